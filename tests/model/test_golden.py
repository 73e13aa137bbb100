"""Golden runs: a small score run and a small classification audit whose whole logs are committed
(tests/golden/). On the build that wrote them (the portable build ``make`` installs: a fixed
instruction set, so every machine that runs it computes the same bits) they are reproduced byte for
byte: every generated token, log-probability, vote, score, summary and hash. On another build the
numbers may round differently, so the comparison is skipped, naming both builds.

Regenerate after an intended change of the numbers or the log format (on the portable build):
``.venv/bin/python tests/model/test_golden.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

GOLDEN = REPO / "tests" / "golden"
RUNS = {
    "score.jsonl": [
        "score", "--data", "ctxlite/data/score_sample.jsonl", "--limit", "1", "--ngram", "8", "--lam", "1",
    ],
    "classify_audit.jsonl": [
        "audit", "--data", "ctxlite/data/classify_sample.jsonl", "--task", "classify", "--mechanism", "none",
        "--trials", "24", "--queries-per-trial", "2", "--utility-queries", "1",
    ],
}  # fmt: skip


def run(name: str, out: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ctxlite", "--quiet", *RUNS[name], "--out", str(out)]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)


def logged_build(text: str) -> dict:
    return json.loads(text.splitlines()[0])["identity"]["software"].get("llama_build") or {}


def first_difference(golden: str, now: str) -> str:
    for number, (a, b) in enumerate(zip(golden.splitlines(), now.splitlines()), 1):
        if a != b:
            da, db = json.loads(a), json.loads(b)
            key = da.get("key") or next(iter(da), "?")
            fields = sorted(k for k in set(da) | set(db) if da.get(k) != db.get(k))
            return f"line {number} ({key}) differs in {fields}"
    return f"the logs have {len(golden.splitlines())} and {len(now.splitlines())} lines"


@pytest.mark.model
@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_golden_run_is_reproduced_bit_for_bit(name, tmp_path):
    from ctxlite.runtime.build import describe, llama_build

    golden = (GOLDEN / name).read_text(encoding="utf-8")
    build, theirs = {"features": llama_build()["features"]}, logged_build(golden)
    if build != theirs:
        pytest.skip(
            f"tests/golden/{name} was written by another llama.cpp build ({theirs.get('features')}); this one is "
            f"{describe(llama_build())} ({build['features']}): the bits are pinned only on the build that made them"
        )
    r = run(name, tmp_path / name)
    assert r.returncode == 0, r.stderr
    now = (tmp_path / name).read_text(encoding="utf-8")
    assert now == golden, (
        f"{first_difference(golden, now)}, on the same build as the golden log: {build['features']} "
        f"(golden: {theirs['features']})"
    )


if __name__ == "__main__":  # regenerate the golden logs with this build
    GOLDEN.mkdir(exist_ok=True)
    for name in RUNS:
        target = GOLDEN / name
        target.unlink(missing_ok=True)
        r = run(name, target)
        if r.returncode != 0:
            sys.exit(f"{name}: {r.stderr}")
        print(f"wrote {target.relative_to(REPO)}")
