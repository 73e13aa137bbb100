"""run_target_audit against the project's test application (model-free, ``--fake``) over HTTP:
the verdict, the log (every answer, the identity naming the target), a kill and resume, the
report recomputed from the log, verify, the probe flagging an app that ignores load."""

from __future__ import annotations

import json

import pytest

from ctxlite.audit.target_game import TargetSettings
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.gates import EpsilonGate, Outcome
from ctxlite.records import read_run_log
from ctxlite.runs import report_log, verify_log
from ctxlite.runs.target_audit import TargetAuditRun, plan_target_audit, run_target_audit
from ctxlite.targets import open_target
from tests.apps.process import CANARY, QUERY, RECORDS, RagAppProcess, target_file


@pytest.fixture(scope="module")
def apps(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("apps")
    procs = {
        "plain": RagAppProcess(tmp, ["--fake"]),
        "redact": RagAppProcess(tmp, ["--fake", "--redact", r"\d{4}-\d{4}"]),
        "ignore": RagAppProcess(tmp, ["--fake", "--ignore-load"]),
    }
    for p in procs.values():
        p.start(timeout=60)
    yield procs
    for p in procs.values():
        p.stop()


def _target(app, tmp_path):
    return open_target("http", target_file=target_file(tmp_path, app.root))


class StopAfter:
    """A Progress that interrupts the run after ``after`` trials (a kill, in a test)."""

    def __init__(self, after):
        self.after = after

    def tick(self, label, done, total):
        if done >= self.after:
            raise KeyboardInterrupt

    def step(self, *a, **k):
        pass

    def note(self, message):
        pass


def test_the_undefended_app_fails_at_budget_one(apps, tmp_path):
    settings = TargetSettings(queries=(QUERY,), secrets=("4417-2290",), trials=100)
    out = tmp_path / "t.jsonl"
    run = run_target_audit(
        _target(apps["plain"], tmp_path), RECORDS, settings, canary=CANARY, out=out, gate=EpsilonGate(1.0)
    )
    assert run.verdict.outcome is Outcome.FAIL, run.verdict.lines()
    assert run.report.row.epsilon_lower_bound > 1.0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    header, trials = lines[0], [x for x in lines if x.get("type") == "trial"]
    assert header["type"] == "target-audit" and header["identity"]["target"]["url"] == apps["plain"].root
    assert header["identity"]["target"]["target_file_sha256"].startswith("sha256:")
    assert len(trials) == 100 and all(len(t["answers"]) == 1 for t in trials)
    assert sum(t["z"] for t in trials) == 50
    assert any("4417-2290" in t["answers"][0] for t in trials if t["z"])
    assert not any("4417-2290" in t["answers"][0] for t in trials if not t["z"])
    again = report_log(out, gate=EpsilonGate(1.0))  # every score recomputed from the logged answers
    assert isinstance(again, TargetAuditRun) and again.verdict.outcome is Outcome.FAIL
    assert again.report.to_dict() == run.report.to_dict()
    assert verify_log(out, run.log.head).head == run.log.head


def test_a_redaction_marker_gives_the_canary_away(apps, tmp_path):
    settings = TargetSettings(queries=(QUERY,), secrets=("4417-2290",), markers=(r"\[redacted\]",), trials=100)
    run = run_target_audit(_target(apps["redact"], tmp_path), RECORDS, settings, canary=CANARY, gate=EpsilonGate(1.0))
    assert run.verdict.outcome is Outcome.FAIL
    assert not any(t.seen["exact"] for t in run.report.trials)  # the secret itself never came back
    assert all(t.z for t in run.report.trials if t.seen["markers"])


def test_a_killed_run_resumes_to_the_same_report(apps, tmp_path):
    settings = TargetSettings(queries=(QUERY, "Who has diabetes?"), secrets=("4417-2290",), trials=12)
    out = tmp_path / "k.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_target_audit(
            _target(apps["plain"], tmp_path), RECORDS, settings, canary=CANARY, out=out, progress=StopAfter(5)
        )
    partial = report_log(out)
    assert not partial.complete and partial.trials == 5 and partial.report is None
    with pytest.raises(DataError, match="partial target audit"):  # a gate never passes an unfinished run
        report_log(out, gate=EpsilonGate(1.0))
    with pytest.raises(InvalidParameter, match="--resume"):
        run_target_audit(_target(apps["plain"], tmp_path), RECORDS, settings, canary=CANARY, out=out)
    other = TargetSettings(queries=(QUERY,), secrets=("4417-2290",), trials=12)
    with pytest.raises(DataError, match="settings"):
        run_target_audit(_target(apps["plain"], tmp_path), RECORDS, other, canary=CANARY, out=out, resume=True)
    resumed = run_target_audit(_target(apps["plain"], tmp_path), RECORDS, settings, canary=CANARY, out=out, resume=True)
    whole = run_target_audit(_target(apps["plain"], tmp_path), RECORDS, settings, canary=CANARY)
    assert resumed.report.to_dict() == whole.report.to_dict()
    assert [t.answers for t in resumed.report.trials] == [t.answers for t in whole.report.trials]
    assert len(read_run_log(out).records) == 13  # the probe and 12 trials, none twice


def test_an_edited_answer_is_refused_by_report(apps, tmp_path):
    from tests.logtools import edit_log

    settings = TargetSettings(queries=(QUERY,), secrets=("4417-2290",), trials=6)
    out = tmp_path / "e.jsonl"
    run_target_audit(_target(apps["plain"], tmp_path), RECORDS, settings, canary=CANARY, out=out)
    verify_log(out)
    leak = lambda lines: [{**x, "answers": ["4417-2290"]} if x.get("type") == "trial" else x for x in lines]  # noqa: E731
    edit_log(out, leak, chain=False)  # an edit: the chain breaks
    with pytest.raises(DataError, match="chain"):
        report_log(out)
    edit_log(out, lambda lines: lines)  # re-chained, as an attacker would: the end line disagrees
    with pytest.raises(DataError, match="end line disagrees"):
        report_log(out)


def test_an_app_that_ignores_load_is_flagged_before_the_trials(apps, tmp_path):
    told = []

    class Tell(StopAfter):
        def note(self, message):
            told.append(message)

    settings = TargetSettings(queries=(QUERY,), secrets=("4417-2290",), trials=4)
    target = _target(apps["ignore"], tmp_path)
    target.load(RECORDS)  # the app keeps its first load: the canary never gets in
    with pytest.raises(KeyboardInterrupt):
        run_target_audit(target, RECORDS, settings, canary=CANARY, progress=Tell(1))
    assert any("may ignore load" in m for m in told)  # said before the first trial finished


def test_plan_makes_four_calls_and_writes_nothing(tmp_path):
    class Counting:
        def __init__(self):
            self.calls = []

        def load(self, records):
            self.calls.append(("load", len(records)))

        def ask(self, query, seed):
            self.calls.append(("ask", query))
            return "same"

    target = Counting()
    settings = TargetSettings(queries=(QUERY, "Who has gout?"), secrets=("4417-2290",), trials=20)
    plan = plan_target_audit(target, RECORDS, settings, canary=CANARY)
    assert target.calls == [("load", 4), ("ask", QUERY), ("load", 3), ("ask", QUERY)]
    assert (plan.loads, plan.asks) == (22, 44) and plan.probe_identical  # it answers "same" either way
    assert "may ignore load" in plan.summary() and plan.to_dict()["target_calls"] == 66
    assert list(tmp_path.iterdir()) == []


def test_run_audit_takes_any_object_with_load_and_ask():
    """The issue's Python API: ctxlite.run_audit(target, records, TargetSettings(...), canary=...)."""
    from ctxlite import run_audit

    class Echo:
        def load(self, records):
            self.records = list(records)

        def ask(self, query, seed):
            return next((r["note"] for r in self.records if r["name"] == "Ana Lopez"), "no")

    settings = TargetSettings(queries=(QUERY,), secrets=("4417-2290",), trials=40)
    run = run_audit(Echo(), RECORDS, settings, canary=CANARY, gate=EpsilonGate(1.0))
    assert isinstance(run, TargetAuditRun) and run.verdict.outcome is Outcome.FAIL
    assert run.identity["target"] == {"kind": "python", "object": f"{__name__}.{Echo.__qualname__}"}
    with pytest.raises(InvalidParameter, match="canary"):
        run_audit(Echo(), RECORDS, settings)
    with pytest.raises(InvalidParameter, match="has no load or ask method"):
        run_audit(object(), RECORDS, settings, canary=CANARY)


def test_words_fitted_on_reference_runs_catch_what_the_fixed_rule_misses(tmp_path):
    """A redacting app whose answers differ only by a word of the canary's record: the secret and the
    marker are the same on both sides, the words fitted on reference runs (disjoint) tell them apart."""

    class Redacting:
        def load(self, records):
            self.canary_in = any(r["name"] == "Ana Lopez" for r in records)

        def ask(self, query, seed):
            return "[redacted], diabetes" if self.canary_in else "[redacted]."

    settings = TargetSettings(
        queries=(QUERY,), secrets=("4417-2290",), markers=(r"\[redacted\]",), trials=40, reference_runs=4
    )
    fixed = TargetSettings(queries=(QUERY,), secrets=("4417-2290",), markers=(r"\[redacted\]",), trials=40)
    assert run_target_audit(Redacting(), RECORDS, fixed, canary=CANARY, gate=EpsilonGate(1.0)).verdict.outcome is (
        Outcome.INCONCLUSIVE
    )
    out = tmp_path / "w.jsonl"
    run = run_target_audit(Redacting(), RECORDS, settings, canary=CANARY, out=out, gate=EpsilonGate(1.0))
    assert run.verdict.outcome is Outcome.FAIL
    refs = [json.loads(x) for x in out.read_text().splitlines() if '"reference"' in x]
    assert len(refs) == 8 and {r["key"] for r in refs} == {f"reference={j}/z={z}" for j in range(4) for z in (0, 1)}
    assert run.report.words["diabetes"] > 0 and abs(run.report.words["redacted"]) < 1e-12
    again = report_log(out, gate=EpsilonGate(1.0))
    assert again.verdict.outcome is Outcome.FAIL and again.report.to_dict() == run.report.to_dict()
