"""The run layer on the FakeBackend: logs, resume, refusals and verdicts of ``run_score`` and
``run_audit``, and ``report_log`` rebuilding a run from its log -- without a model."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources

import pytest

from ctxlite.audit.dataset import load_records
from ctxlite.audit.settings import AuditSettings
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.influence.scorer import Example, InfluenceSettings
from ctxlite.runs import EpsilonGate, InfluenceGate, report_log, run_audit, run_score
from ctxlite.runtime.fake import FakeBackend

SETTINGS = InfluenceSettings(lambdas=(1.0,), ngram=4, null_ablations=0)
EXAMPLES = [
    Example(context="Bob Jones lives at 12 Elm Street, flat 3.", query="Where?", response="12 Elm Street.", id="a"),
    Example(context="The PIN of card 5521 is 0042, keep it.", query="PIN?", response="The PIN is 0042.", id="b"),
]
CLASSIFY = str(resources.files("ctxlite").joinpath("data", "classify_sample.jsonl"))
AUDIT = AuditSettings(task="classify", trials=10, queries_per_trial=2, reference_runs=2, utility_queries=0)


class Interrupt(Exception):
    pass


class StopAfter:
    """A Progress that interrupts the run once ``after`` steps of ``label`` are done (Ctrl-C, in a test)."""

    def __init__(self, label: str, after: int):
        self.label, self.after = label, after

    def step(self, label, done, total, detail=""):
        if label == self.label and done >= self.after:
            raise Interrupt

    def tick(self, label, done, total):
        if label.endswith(self.label) and done >= self.after:
            raise Interrupt

    def note(self, message):
        pass


def test_a_score_run_resumes_what_it_logged_and_gives_the_same_result(tmp_path):
    out = tmp_path / "scores.jsonl"
    whole = run_score(FakeBackend(3), EXAMPLES, SETTINGS)
    with pytest.raises(Interrupt):
        run_score(FakeBackend(3), EXAMPLES, SETTINGS, out=out, progress=StopAfter("examples", 1))
    resumed = run_score(FakeBackend(3), EXAMPLES, SETTINGS, out=out)
    assert resumed.reused == ["a"] and resumed.scored == ["b"]
    assert [r.to_dict() for r in resumed.results] == [r.to_dict() for r in whole.results]
    again = run_score(FakeBackend(3), EXAMPLES, SETTINGS, out=out)
    assert again.reused == ["a", "b"]
    from_log = report_log(out)
    assert [r.to_dict() for r in from_log.results] == [r.to_dict() for r in whole.results]
    assert from_log.summary.to_dict() == whole.summary.to_dict()


def test_a_score_log_is_refused_by_another_backend(tmp_path):
    out = tmp_path / "scores.jsonl"
    run_score(FakeBackend(3), EXAMPLES, SETTINGS, out=out)
    before = out.read_bytes()
    with pytest.raises((DataError, InvalidParameter)):
        run_score(FakeBackend(4), EXAMPLES, SETTINGS, out=out)
    assert out.read_bytes() == before  # the evidence is kept whole


def test_a_changed_input_is_scored_again_and_said(tmp_path):
    out = tmp_path / "scores.jsonl"
    run_score(FakeBackend(3), EXAMPLES, SETTINGS, out=out)
    changed = [EXAMPLES[0], Example(**{**EXAMPLES[1].__dict__, "response": "It is 0042."})]
    run = run_score(FakeBackend(3), changed, SETTINGS, out=out)
    assert run.reused == ["a"] and run.scored == ["b"]


def test_the_influence_gate_passes_only_on_a_floor_that_measured_rounding():
    """A pass needs a noise floor whose probes saw rounding (the fake's tiling noise); without probes,
    or with probes that reproduce the decode bit for bit, nothing is proven: inconclusive."""
    probed, rounding = replace(SETTINGS, null_ablations=2), FakeBackend(3, tiling_noise=1e-3)
    run = run_score(rounding, EXAMPLES, probed)
    most = max(g.influence for ex in run.results for r in ex.results for g in r.ngrams)
    failed = run_score(rounding, EXAMPLES, probed, gate=InfluenceGate(most / 2))
    passed = run_score(rounding, EXAMPLES, probed, gate=InfluenceGate(most * 10))
    assert failed.verdict.failures and not passed.verdict.failures
    assert [c.outcome.value for c in passed.verdict.cases] == ["pass"] * len(EXAMPLES)
    for backend, settings in ((rounding, SETTINGS), (FakeBackend(3), probed)):
        unproven = run_score(backend, EXAMPLES, settings, gate=InfluenceGate(most * 10))
        assert [c.outcome.value for c in unproven.verdict.cases] == ["inconclusive"] * len(EXAMPLES)


def test_an_audit_resumes_after_an_interruption_to_the_same_report(tmp_path):
    records = load_records(CLASSIFY, "classify")
    whole = run_audit(FakeBackend(2), records, AUDIT, out=tmp_path / "whole.jsonl")
    out = tmp_path / "audit.jsonl"
    with pytest.raises(Interrupt):
        run_audit(FakeBackend(2), records, AUDIT, out=out, progress=StopAfter("trials", 4))
    partial = report_log(out)
    assert not partial.complete and partial.report is None
    with pytest.raises(InvalidParameter, match="--resume"):
        run_audit(FakeBackend(2), records, AUDIT, out=out)
    resumed = run_audit(FakeBackend(2), records, AUDIT, out=out, resume=True)
    assert resumed.report.to_dict()["rows"] == whole.report.to_dict()["rows"]
    assert report_log(out).report.to_dict()["rows"] == whole.report.to_dict()["rows"]


def test_an_audit_gate_is_inconclusive_or_failed_never_a_silent_pass(tmp_path):
    records = load_records(CLASSIFY, "classify")
    run = run_audit(FakeBackend(2), records, AUDIT, gate=EpsilonGate(0.0))
    for case in run.verdict.cases:
        assert case.outcome.value in ("fail", "pass", "inconclusive")
        if case.outcome.value == "pass":  # a pass must prove the budget: a lower bound cannot
            pytest.fail(f"a lower bound passed an epsilon gate: {case}")


def test_every_line_of_a_log_is_json_with_a_chain(tmp_path):
    out = tmp_path / "scores.jsonl"
    run_score(FakeBackend(3), EXAMPLES, SETTINGS, out=out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["type"] == "score-run" and all(line["chain"].startswith("sha256:") for line in lines)
