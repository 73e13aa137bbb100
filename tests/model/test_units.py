"""``ctxlite score --unit passage`` on the real default model: on each of the three retrieved-passage
examples of ctxlite/data/examples/rag_passages.jsonl (issue 27's case), the passage that carries the
answer ranks first, above the noise floor."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.influence.results import ExampleResult
from tests.docs_pages import REPO

pytestmark = pytest.mark.model

DATA = REPO / "ctxlite" / "data" / "examples" / "rag_passages.jsonl"
ANSWER = {"rag-1": "passage 2", "rag-2": "passage 1", "rag-3": "passage 3"}


def test_the_answer_passage_ranks_first(tmp_path):
    out = tmp_path / "rag.jsonl"
    r = CliRunner().invoke(main, ["score", "--data", str(DATA), "--unit", "passage", "--out", str(out)])
    assert r.exit_code == 0, r.output
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()[1:]]
    results = {d["key"]: ExampleResult.from_dict(d["result"]) for d in records if d.get("type") == "example"}
    assert set(results) == set(ANSWER)
    for key, rec in results.items():
        (lam,) = rec.results
        first, *rest = lam.units
        assert first.label == ANSWER[key] and first.above_noise, (key, [(u.label, u.influence) for u in lam.units])
        assert len(rest) == 2 and all(u.kind == "passage" for u in lam.units)
