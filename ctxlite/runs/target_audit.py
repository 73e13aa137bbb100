"""A target audit run (issue 47): the black-box game against a system ctxlite can only query, its
trial log, its report and verdict.

:func:`run_target_audit` is what ``ctxlite audit --target KIND`` runs and what a program calls
with any object that has ``load(records)`` and ``ask(query, seed) -> str``. As for every audit,
the log is locked for one writer from the start, hash-chained, bound to an identity that names
**the system audited** (the target's kind, URL or command and target file hash), the settings,
the records and the canary; an existing log is continued only with ``resume`` and only when it is
this audit's (checked before any query). Every answer is logged as it comes, so a killed run
resumes where it stopped. ``ctxlite report`` rebuilds the same :class:`TargetAuditRun` from the
log alone (:func:`report_target_log`), every score recomputed from the logged answers, and
``ctxlite verify`` checks its chain like any log's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from ctxlite.audit.settings import EstimateSettings
from ctxlite.audit.target_game import (
    PROBE_KEY,
    TargetGame,
    TargetReport,
    TargetSettings,
    ask_seed,
    converse,
    probe_warning,
    target_report,
    trial_key,
)
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.gates import EpsilonGate, Verdict, check_epsilon_unit, epsilon_case, epsilon_unit_text, run_properties
from ctxlite.identity import content_hash, software
from ctxlite.lock import LogLock
from ctxlite.records import RecordLog, RunLog
from ctxlite.runs.log import LogState, finish
from ctxlite.runs.progress import Notes, Progress, Silent
from ctxlite.targets.base import check_target, target_identity

KIND = "target-audit"
"""The ``type`` of a target audit log's header."""


@dataclass
class TargetAuditRun:
    """One target audit run, finished (``report`` and ``verdict`` set) or, read from its log, partial."""

    report: TargetReport | None
    verdict: Verdict | None
    identity: dict
    complete: bool = True
    log: LogState | None = None
    trials: int = 0
    notes: list[str] = field(default_factory=list)

    def require_report(self) -> None:
        if self.report is None:
            raise DataError(
                f"{self.log.path} is a partial target audit: its report is formed when the run finishes (re-run "
                "the same command with --resume to finish it)"
            )

    def check_gate_finished(self) -> None:
        self.require_report()


def target_audit_identity(target_id: dict, settings: TargetSettings, records: Sequence[dict], canary: dict) -> dict:
    """What a target audit's log is bound to: the system audited, the game, the records and the canary."""
    return {
        "target": target_id,
        "settings": settings.game_params(),
        "data": content_hash([dict(r) for r in records]),
        "canary": content_hash(dict(canary)),
        "software": {"ctxlite": software()["ctxlite"]},
    }


def target_verdict(report: TargetReport, gate: EpsilonGate | None, identity: dict) -> Verdict:
    """The ε gate over a target audit's one row (ε per trial of ``len(queries)`` questions)."""
    settings = report.settings.audit_settings()
    text = None
    threshold = None if gate is None else gate.epsilon
    if gate is not None:
        check_epsilon_unit(gate.unit, settings.queries_per_trial)
        text = f"{epsilon_unit_text(settings.queries_per_trial)} at δ = {settings.delta:g} ≤ {threshold:g}"
    props = run_properties(identity)
    target = identity.get("target") or {}
    props.update({f"target.{k}": str(v) for k, v in target.items() if isinstance(v, (str, int, float))})
    return Verdict("ctxlite audit", text, [epsilon_case(report.row, settings, threshold)], True, props)


def run_target_audit(
    target,
    records: Sequence[dict],
    settings: TargetSettings,
    *,
    canary: dict,
    out: str | os.PathLike | None = None,
    resume: bool = False,
    progress: Progress | None = None,
    gate: EpsilonGate | None = None,
) -> TargetAuditRun:
    """Audit ``target`` (any object with ``load(records)`` and ``ask(query, seed) -> str``; an
    ``identity()`` naming it, if it has one) with the pair ``records`` / ``records`` ∪ {``canary``}
    and return the :class:`TargetAuditRun`.

    >>> from ctxlite.runs.target_audit import run_target_audit          # doctest: +SKIP
    >>> from ctxlite.audit.target_game import TargetSettings
    >>> run = run_target_audit(my_app, records, TargetSettings(queries=("What is Ana's MRN?",),
    ...                        secrets=("4417-2290",), trials=100), canary=canary, out="t.jsonl")
    >>> run.verdict.outcome
    """
    check_target(target)
    if gate is not None:
        check_epsilon_unit(gate.unit, settings.asks_per_trial)
    records = _check_records(records)
    notes = Notes(progress or Silent())
    tick = (progress or Silent()).tick
    game = TargetGame(target, records, canary, settings)
    identity = target_audit_identity(target_identity(target), settings, records, canary)
    with ExitStack() as stack:
        log = None
        if out is not None:
            lock = stack.enter_context(LogLock(out))
            if not resume and Path(out).is_file() and Path(out).stat().st_size > 0:
                raise InvalidParameter(f"{out} exists: pass --resume to continue it or choose another file")
            log = stack.enter_context(RecordLog(out, identity, kind=KIND, lock=lock))
        runs = game.play(log, tick, lambda note: notes(f"ctxlite: warning: {note}"))
        report = target_report(settings, runs, out)
        if log is not None:
            finish(log, {"report": report.to_dict()}, notes)
    verdict = target_verdict(report, gate, identity)
    state = None if log is None else LogState.of(log, out)
    if state is not None:
        verdict.properties["log.head"] = state.head
    return TargetAuditRun(report, verdict, identity, log=state, trials=settings.trials, notes=notes.kept)


PROBE_CALLS = 4
"""The calls :func:`plan_target_audit` makes: a load and an ask with the canary, then without it (a
multi-turn first question: an ask per turn)."""


@dataclass(frozen=True)
class TargetPlan:
    """What a target audit would cost, from :data:`PROBE_CALLS` timed calls: the calls the run makes
    (``loads``, ``asks``; the probe's included), the seconds one load and one ask took, the run's
    estimate (their sum over its calls: the target's own speed, measured once, so an estimate, not
    a bound), and whether the probe's answers were identical with and without the canary."""

    loads: int
    asks: int
    load_seconds: float
    ask_seconds: float
    estimated_seconds: float
    probe_identical: bool
    probe_calls: int = PROBE_CALLS

    def to_dict(self) -> dict:
        return {
            "target_calls": self.loads + self.asks,
            "loads": self.loads,
            "asks": self.asks,
            "probe_calls": self.probe_calls,
            "load_seconds": self.load_seconds,
            "ask_seconds": self.ask_seconds,
            "estimated_seconds": self.estimated_seconds,
            "probe_identical": self.probe_identical,
        }

    def summary(self) -> str:
        line = (
            f"{self.loads} loads and {self.asks} asks; measured on {self.probe_calls} probe calls: a load "
            f"{self.load_seconds:.3g} s, an ask {self.ask_seconds:.3g} s; estimated {self.estimated_seconds:.0f} s"
        )
        return line + (f"; warning: {probe_warning()}" if self.probe_identical else "")


def plan_target_audit(target, records: Sequence[dict], settings: TargetSettings, *, canary: dict) -> TargetPlan:
    """What :func:`run_target_audit` would cost against ``target``, from :data:`PROBE_CALLS` timed
    calls (a load and the first question with the canary, then without it), writing no log."""
    check_target(target)
    game = TargetGame(target, _check_records(records), canary, settings)
    loads, asks, answers = [], [], []
    seed = ask_seed(settings.seed, -1, 0)
    for z in (True, False):
        began = time.perf_counter()
        target.load(game.dataset(z, -1))  # the probe's draw, as the run's probe loads it
        loads.append(time.perf_counter() - began)
        began = time.perf_counter()
        first = settings.queries[0]
        answers.append(target.ask(first, seed) if isinstance(first, str) else converse(target, first, seed))
        asks.append(time.perf_counter() - began)
    load_s, ask_s = sum(loads) / len(loads), sum(asks) / len(asks)
    n_loads = settings.trials + (2 if settings.probe else 0) + 2 * settings.reference_runs
    n_asks = n_loads * settings.asks_per_trial
    turns = 1 if isinstance(settings.queries[0], str) else len(settings.queries[0])
    ask_s /= turns  # a conversation was timed whole: per answer
    estimate = n_loads * load_s + n_asks * ask_s
    return TargetPlan(n_loads, n_asks, load_s, ask_s, estimate, answers[0] == answers[1], 2 + 2 * turns)


def _check_records(records: Sequence[dict]) -> list[dict]:
    records = list(records)
    if not records:
        raise DataError("the target audit needs at least one record (the data set D the canary joins)")
    bad = next((i for i, r in enumerate(records) if not isinstance(r, dict)), None)
    if bad is not None:
        raise DataError(f"record {bad + 1} is not a JSON object")
    return records


def settings_of(run: RunLog) -> TargetSettings:
    """The settings a target audit log's header holds (``DataError`` if it cannot be read)."""
    params = run.identity.get("settings")
    end = run.end.get("report") if isinstance(run.end, dict) and isinstance(run.end.get("report"), dict) else {}
    try:
        estimates = EstimateSettings(**end.get("estimates", {}))
        return TargetSettings(
            queries=tuple(q if isinstance(q, str) else tuple(q) for q in params["queries"]),
            secrets=tuple(params["secrets"]),
            markers=tuple(params["markers"]),
            labels=tuple(params.get("labels", ())),
            trials=int(params["trials"]),
            delta=float(params["delta"]),
            seed=int(params["seed"]),
            probe=bool(params["probe"]),
            resample_size=None if params.get("resample_size") is None else int(params["resample_size"]),
            reference_runs=int(params.get("reference_runs", 0)),
            estimates=estimates,
        )
    except (KeyError, TypeError, ValueError, InvalidParameter) as exc:
        raise DataError(f"{run.path}:1: corrupt target audit log, its settings cannot be read ({exc})") from None


def report_target_log(run: RunLog, gate: EpsilonGate | None, note, disagrees) -> TargetAuditRun:
    """A target audit read back from its log: the report recomputed from the logged answers (an end
    line that disagrees is refused by ``disagrees(run, what, stored, recomputed)``)."""
    settings = settings_of(run)
    done = sum(1 for i in range(settings.trials) if trial_key(i) in run.records)
    state = LogState(os.fspath(run.path), run.head, run.chained, run.lines)
    if not run.complete or done < settings.trials:
        note(f"{run.path}: partial run ({done}/{settings.trials} trials; it did not finish): re-run the same command")
        partial = TargetAuditRun(None, None, run.identity, complete=False, log=state, trials=done)
        if gate is not None:  # a gate on an unfinished run refuses (exit 4) rather than pass it
            partial.require_report()
        return partial
    report = target_report(settings, run.records, run.path)
    stored = run.end.get("report") if isinstance(run.end, dict) else None
    disagrees(run, "report", stored, report.to_dict())
    if settings.probe and PROBE_KEY not in run.records:
        raise DataError(f"{run.path}: corrupt log, its probe record is missing")
    verdict = target_verdict(report, gate, run.identity)
    verdict.properties["log.head"] = run.head
    return TargetAuditRun(report, verdict, run.identity, log=state, trials=done, notes=[])
