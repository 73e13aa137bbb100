"""The influence gate on every path that can produce a pass (issue 24 §1).

A pass rests on τ_i computed on this build plus a noise floor *estimated* from probe pairs in
other batch tilings, and says so in the message, the JSON, JUnit and HTML. Wherever no floor was
measured (a server backend, ``--null-ablations 0``, an older log's null-ablation floor) the case
is inconclusive, exit 10, never a pass. Logs: the committed golden score log and a fake server
(no model), and small runs of the default model for the paths that make a log: given
(tests/model/test_report.py) and generated responses, ε-bounded CID, ``--exact`` and adaptive search.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.gates import Basis
from ctxlite.influence.analysis import summarize
from ctxlite.influence.results import ExampleResult
from ctxlite.logformat import upgrade_example
from tests.fake_server import MODEL, FakeServer
from tests.logtools import edit_log
from tests.paths import GOLDEN

GOLDEN_SCORE = GOLDEN / "score.jsonl"
ESTIMATED = Basis.MEASURED.value
NOTE = (
    "Clinic note. Patient: Dana Whitcombe, DOB 04/09/1971, MRN 5521-8830. "
    "Prescribed lisinopril 10 mg daily for hypertension; follow up in four weeks."
)


def _run(args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _case(r) -> dict:
    """The one case of a ``--json`` run's or report's verdict."""
    [case] = json.loads(r.stdout)["verdict"]["results"]
    return case


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _golden_bound() -> float:
    """A budget above every n-gram's τ_i plus its floor in the golden log: it passes there."""
    results = [
        res for line in _lines(GOLDEN_SCORE) if line.get("type") == "example" for res in line["result"]["results"]
    ]
    return max(g["influence"] for res in results for g in res["ngrams"]) + max(
        res["noise_floor"]["max"] for res in results
    )


# ---------------------------------------------------------------------------
# stored logs (no model)


def test_a_pass_from_a_stored_log_says_it_rests_on_an_estimated_floor(tmp_path):
    log = shutil.copy(GOLDEN_SCORE, tmp_path / "run.jsonl")
    junit, page = tmp_path / "gate.xml", tmp_path / "report.html"
    budget = _golden_bound() + 0.01
    r = _run(["report", log, "--fail-above-influence", budget, "--json", "--junit", junit, "--html", page])
    assert r.exit_code == 0, r.output
    case = _case(r)
    assert case["verdict"] == "pass" and case["basis"] == ESTIMATED
    assert "floor estimated from 3 probe pairs re-decoded in other batch tilings" in case["message"]
    assert "ctxlite score: pass: all 1 case(s) within the budget" in r.stderr and ESTIMATED in r.stderr
    assert ET.parse(junit).getroot().find("testsuite/testcase/system-out").text == case["message"]
    assert "an estimate, not a bound" in page.read_text(encoding="utf-8")


def _older_floor(lines):
    """A floor as 2b1529b logged it: null ablations in the canonical tiling (they read 0), in a log of
    that time (no ``schema_version``: ctxlite.logformat reads it as an older log)."""
    del lines[0]["schema_version"]
    for line in lines:
        for res in line.get("result", {}).get("results", []):
            res["noise_floor"] = {"split_points": [175, 168], "sums": [0.0, 0.0], "mean": 0.0, "max": 0.0}
    return lines


def _no_floor(lines):
    """No floor at all, as a server backend or --null-ablations 0 logs it."""
    for line in lines:
        for res in line.get("result", {}).get("results", []):
            res["noise_floor"] = None
            for g in res["ngrams"] + res["top_spans"]:
                g["above_noise"] = None
    return lines


def _resummarised(edit):
    """``edit`` with the end line's summary recomputed from the edited records (what a run that
    logged them would have written)."""

    def both(lines):
        lines = edit(lines)
        older = "schema_version" not in lines[0]
        results = [line["result"] for line in lines[1:-1]]
        typed = [ExampleResult.from_dict(upgrade_example(r) if older else r) for r in results]
        lines[-1]["end"]["summary"] = json.loads(json.dumps(summarize(typed).to_dict()))
        return lines

    return both


def _unchained(edit):
    return lambda lines: [{k: v for k, v in line.items() if k != "chain"} for line in edit(lines)]


@pytest.mark.parametrize(
    "edit, chain",
    [
        (_resummarised(_older_floor), True),
        (_resummarised(_no_floor), True),
        (_unchained(_resummarised(_older_floor)), False),
    ],
    ids=["older floor", "no floor", "older unchained log"],
)
def test_a_stored_log_without_a_measured_floor_is_inconclusive(tmp_path, edit, chain):
    log = shutil.copy(GOLDEN_SCORE, tmp_path / "run.jsonl")
    edit_log(log, edit, chain=chain)
    r = _run(["report", log, "--fail-above-influence", _golden_bound() + 0.01, "--json"])
    assert r.exit_code == 10, r.output
    case = _case(r)
    assert case["verdict"] == "inconclusive" and "not measured" in case["message"], case
    assert "--null-ablations" in case["message"]
    assert "ctxlite: gate inconclusive: ctxlite score: inconclusive: 1 of 1 case(s)" in r.stderr
    tripped = _run(["report", log, "--fail-above-influence", 1, "--json"])  # what it computed still trips
    assert tripped.exit_code == 8 and _case(tripped)["basis"] == Basis.THIS_BUILD.value, tripped.output


def test_a_score_on_a_server_backend_is_inconclusive_never_passed(tmp_path):
    """A server has no batch tiling to choose, so no floor is measured: a pass there ignored rounding."""
    data, out, junit = tmp_path / "data.jsonl", tmp_path / "run.jsonl", tmp_path / "gate.xml"
    example = {"id": "alice", "context": "Alice takes 10 mg lisinopril.", "query": "What?", "response": " lisinopril"}
    data.write_text(json.dumps(example) + "\n", encoding="utf-8")
    args = ["score", "--data", data, "--template", "{context} Q: {query} A:", "--ngram", "4", "-T", "1"]
    args += ["--out", out, "--backend", "openai", "--model-name", MODEL, "--json", "--junit", junit]
    with FakeServer() as fake:
        r = _run([*args, "--base-url", fake.url, "--fail-above-influence", 1000])
    assert r.exit_code == 10, r.output
    [case] = json.loads(r.stdout)["verdict"]["results"]
    assert case["verdict"] == "inconclusive" and "not measured" in case["message"], case
    assert ET.parse(junit).getroot().find("testsuite/testcase/error").get("type") == "ctxlite.inconclusive"
    again = _run(["report", out, "--fail-above-influence", 1000, "--json"])
    assert again.exit_code == 10 and _case(again)["message"] == case["message"]


# ---------------------------------------------------------------------------
# runs of the default model

GENERATED = ["--lam", "1.5", "--min-new-tokens", "2", "--max-new-tokens", "6"]
PATHS = {  # a given response's run is tests/model/test_report.py's (its report passes on a high budget)
    "CID response": GENERATED,
    "epsilon-bounded CID, --exact, adaptive search": [*GENERATED, "--epsilon", "2", "--exact", "--search", "adaptive"],
}


def _gated(tmp_path, *extra):
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    args = ["score", "--context", tmp_path / "note.txt", "-q", "What was prescribed?", "--ngram", "4", *extra]
    return _run([*args, "--fail-above-influence", 1000, "--json"])


@pytest.mark.model
@pytest.mark.parametrize("extra", PATHS.values(), ids=PATHS.keys())
def test_a_generated_response_passes_on_its_estimated_floor(tmp_path, extra):
    """Generated responses (CID, ε-bounded CID: each λ and ε its own floor), from scratch or by
    adaptive search: every result has a floor from probes, and the pass says it rests on it."""
    r = _gated(tmp_path, *extra)
    results = json.loads(r.stdout)["result"]["results"]
    assert all(len(res["ngrams"]) == res["search"]["windows"] for res in results)  # every window measured
    floors = [res["noise_floor"] for res in results]
    assert floors and all(f is not None and f["method"] == "retiled probes" for f in floors)
    saw = all(any(f["per_token"]) for f in floors)  # probes that reproduce the canonical bits measure nothing
    case = _case(r)
    assert (r.exit_code, case["verdict"]) == ((0, "pass") if saw else (10, "inconclusive")), r.output
    if saw:
        assert case["basis"] == ESTIMATED and "probe pairs re-decoded in other batch tilings" in case["message"]


@pytest.mark.model
def test_a_run_with_null_ablations_0_is_inconclusive(tmp_path):
    """No probes, no floor: how far another build moves τ_i is unknown, so nothing passes."""
    r = _gated(tmp_path, *GENERATED, "--null-ablations", 0)
    assert r.exit_code == 10, r.output
    assert all(res["noise_floor"] is None for res in json.loads(r.stdout)["result"]["results"])
    case = _case(r)
    assert case["verdict"] == "inconclusive" and "not measured" in case["message"]
    assert "--null-ablations 1 or more" in case["message"]
