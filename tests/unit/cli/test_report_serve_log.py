"""``ctxlite report`` on a ``ctxlite serve`` budget log: what was served, recomputed from the records
(a table, or ``--json``), instead of a refusal; gates and the HTML report are refused by name."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.privacy.composition import composed_epsilon
from ctxlite.serve.decoding import Step
from ctxlite.serve.ledger import ANONYMOUS, Budgets, Ledger, key_id

IDENTITY = {
    "software": {"ctxlite": "test"},
    "model": None,
    "settings": {"epsilon": 0.5, "lambda": 1.0, "context": "sha256:" + "0" * 64, "delta": 1e-5},
}


def _served(path, finish=True, crash=False):
    """A ledger that answered key a twice (3 and 4 tokens, one cut by the budget) and key b once."""
    ledger = Ledger(path, IDENTITY, Budgets(total=40.0, per_key=20.0, delta=1e-5), 0.5)
    for kid, n, reason in ((key_id("a"), 3, "length"), (key_id("b"), 2, "stop"), (key_id("a"), 4, "privacy_budget")):
        ledger.close(ledger.open(kid, "completions", 8), kid, "completions", [Step(1, 0.2, 1.0, False)] * n, reason)
    if crash:
        ledger.open(key_id("b"), "chat", 5)  # killed mid-answer: no end, counted at its whole reservation
    if finish:
        ledger.finish()
    ledger.close_log()
    return ledger


def _report(*args):
    return CliRunner().invoke(main, ["report", *map(str, args)])


def test_report_summarises_a_serve_log_as_json_and_as_a_table(tmp_path):
    path = tmp_path / "serve.jsonl"
    _served(path)
    r = _report(path, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    served = out["served"]
    assert out["kind"] == "serve" and out["complete"] and out["settings"]["delta"] == 1e-5
    assert (served["responses"], served["tokens"], served["epsilon_charged"]) == (3, 9, 4.5)
    assert served["keys"][key_id("a")] == {"responses": 2, "tokens": 7, "epsilon_charged": 3.5}
    assert served["finish_reasons"] == {"length": 1, "privacy_budget": 1, "stop": 1} and served["cut_off"] == 0
    rows = {row["key_id"]: row for row in out["rows"]}
    assert rows["all"]["composed"] == pytest.approx(composed_epsilon(9, 0.5, 1e-5))
    assert rows["all"]["composed_neighbour"] == pytest.approx(composed_epsilon(9, 1.0, 1e-5))
    assert rows[key_id("a")]["left"] == pytest.approx(20.0 - composed_epsilon(7, 0.5, 1e-5))
    assert out["budgets"] == {"total": 40.0, "per_key": 20.0, "delta": 1e-5}
    table = _report(path)
    assert table.exit_code == 0 and key_id("b") in table.stdout and "privacy_budget 1" in table.stdout
    assert "serve: 3 response(s), 9 token(s)" in table.stderr and "stopped cleanly" in table.stderr


def test_a_partial_serve_log_is_reported_with_its_cut_off_answers_counted_in_full(tmp_path):
    path = tmp_path / "serve.jsonl"
    _served(path, finish=False, crash=True)
    r = _report(path, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert not out["complete"] and out["served"]["cut_off"] == 1 and out["served"]["tokens"] == 14
    assert "partial serve log" in r.stderr and "1 reservation(s) without their end" in r.stderr


def test_an_end_line_that_disagrees_with_the_records_and_gates_are_refused(tmp_path):
    path = tmp_path / "serve.jsonl"
    ledger = _served(path, finish=False)
    ledger = Ledger(path, IDENTITY, ledger.budgets, 0.5)
    ledger.log.finish({"served": {**ledger_summary(ledger), "tokens": 2}})  # chained, but not the records' sum
    ledger.close_log()
    r = _report(path)
    assert r.exit_code == 4 and "the end line disagrees with the records: served.tokens is 2 there, 9" in r.output
    fresh = tmp_path / "fresh.jsonl"
    _served(fresh)
    gated = _report(fresh, "--fail-above-epsilon", "1")
    assert gated.exit_code == 2 and "--fail-above-epsilon gates score and audit logs" in gated.output
    html = _report(fresh, "--html", tmp_path / "r.html")
    assert html.exit_code == 2 and "--html reports score and audit runs" in html.output
    assert ANONYMOUS not in _report(fresh).stdout


def ledger_summary(ledger):
    from ctxlite.serve.ledger import summary

    return summary(ledger.log.records.values())
