"""ctxlite.reporting.json_output: what ``--json`` prints (issue 46, 4)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from tests.fake_models import use_fake_models

EXAMPLES = [
    {"id": "alice", "context": "Alice takes 10 mg lisinopril daily.", "query": "What?", "response": " lisinopril"},
    {"id": "bob", "context": "Bob takes 5 mg amlodipine at night.", "query": "What?", "response": " amlodipine"},
]


@pytest.fixture(autouse=True)
def fake(monkeypatch):
    use_fake_models(monkeypatch)


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_score_json_of_a_data_set_holds_each_examples_results(tmp_path):
    """The issue's reproducer: ``score --data D --json`` without ``--out`` printed ``"examples": 2``, a
    count, and nothing of the results (no log kept them either). Each example is now listed as
    ``report --json`` lists it, so the two agree."""
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in EXAMPLES), encoding="utf-8")
    out = run("score", "--data", data, "--ngram", "4", "--json")
    assert [e["id"] for e in out["examples"]] == ["alice", "bob"]
    first = out["examples"][0]["results"][0]
    assert first["lam"] == 1.0 and first["top_spans"] and first["max_ngram_influence"] > 0
    assert out["scored"] == ["alice", "bob"] and out["out"] is None and out["summary"] is not None
    log = tmp_path / "s.jsonl"
    logged = run("score", "--data", data, "--ngram", "4", "--json", "--out", log)
    assert logged["examples"] == out["examples"] == run("report", log, "--json")["examples"]
