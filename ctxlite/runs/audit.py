"""An audit run: the ContextLeak game on one backend, its trial log, its report and verdict.

:func:`run_audit` is what ``ctxlite audit`` runs and what a program embedding ctxlite calls. It
owns what an audit run *means*: the identity its trial log is bound to (the backend's, the game's
settings, the prompt format, the private records, the bundled canaries and templates, the
embedding and judge models), the log (locked for one writer from the start, hash-chained; an
existing log is continued only when asked to resume, and only when it is this audit's, checked
before any model work), the optional template search, the report, the ε gate's verdict and the
end line. The result, :class:`AuditRun`, is rendered by :mod:`ctxlite.reporting`, and
``ctxlite report`` builds the same object from the log alone (:func:`ctxlite.runs.report_log`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

from ctxlite.audit.dataset import check_records, resolve_format
from ctxlite.audit.formats import AuditFormat
from ctxlite.audit.game import run_audit as play
from ctxlite.audit.report import AuditReport
from ctxlite.audit.settings import Attack, AuditSettings, Task, audit_identity
from ctxlite.audit.target_game import TargetSettings
from ctxlite.audit.template_search import search_template
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.gates import EpsilonGate, Verdict, audit_verdict, check_epsilon_unit
from ctxlite.lock import LogLock
from ctxlite.records import RecordLog
from ctxlite.runs.log import LogState, finish
from ctxlite.runs.progress import Notes, Progress, Silent
from ctxlite.runs.target_audit import TargetAuditRun, run_target_audit
from ctxlite.runtime.engine import LocalModel
from ctxlite.runtime.planning import Plan, plan_run

KIND = "audit"
"""The ``type`` of an audit log's header."""


@dataclass
class TrialScores:
    """The detector's scores of the IN (canary present) and OUT trials at one theoretical ε."""

    ins: list[float] = field(default_factory=list)
    outs: list[float] = field(default_factory=list)


@dataclass
class AuditRun:
    """One audit run, finished or (read from a log) partial.

    ``report`` holds the estimates per ε (None for a partial run read from its log: they are formed
    when it finishes) and ``verdict`` the gate's (None while there is no report); ``identity`` is
    what the log is bound to, ``log`` the log as it stands (None without one); ``trials`` counts the
    logged trials and ``scores`` holds their scores per ε key (read from a log: what its report
    plots); ``notes`` are the lines a person was told."""

    report: AuditReport | None
    verdict: Verdict | None
    identity: dict
    complete: bool = True
    log: LogState | None = None
    trials: int = 0
    scores: dict[str, TrialScores] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def require_report(self) -> None:
        """Refuse (``DataError``) what needs the report of a partial audit (a gate, a JUnit file): it is
        formed when the run finishes."""
        if self.report is None:
            raise DataError(
                f"{self.log.path} is a partial audit: its report is formed when the run finishes, so there is no "
                "ε to gate or write as JUnit yet (re-run the same command with --resume to finish it)"
            )

    def check_gate_finished(self) -> None:
        """An audit's verdict exists only for a finished run (:meth:`require_report`)."""
        self.require_report()


class _Job:
    """The records, format, settings, identity and lock of one audit, before any model work."""

    def __init__(self, backend, records, settings, fmt, out, resume, embedder, judge, progress, gate):
        self.settings, self.gate, self.out = settings, gate, out
        if gate is not None:  # a budget in another unit than the audit's is refused before any work
            check_epsilon_unit(gate.unit, settings.queries_per_trial)
        fmt = fmt if fmt is not None else settings.task
        self.records = check_records(records, fmt)
        self.fmt = resolve_format(fmt, self.records)
        self.backend, self.embedder, self.judge = backend, embedder, judge
        self.progress = progress or Silent()
        self.notes = Notes(self.progress)
        self.lock: LogLock | None = None
        self.resume = resume

    def identity(self) -> dict:
        """The trial log's identity, computed without loading a model (model files are hashed)."""
        model = lambda b: None if b is None else b.identity()["model"]  # noqa: E731
        return audit_identity(
            self.backend.identity(), self.settings, self.records, model(self.embedder), self.fmt, model(self.judge)
        )

    def hold_log(self, stack: ExitStack, ignore=()) -> None:
        """Take the log's write lock for the whole run, then refuse a log that is not to be continued:
        one that exists without ``resume``, or (with it) another audit's, broken or of an older format."""
        self.lock = stack.enter_context(LogLock(self.out))
        if not self.resume and Path(self.out).is_file() and Path(self.out).stat().st_size > 0:
            raise InvalidParameter(f"{self.out} exists: pass --resume to continue it or choose another file")
        if self.resume:
            RecordLog.check_existing(self.out, self.identity(), kind=KIND, ignore=ignore)

    def open(self, stack: ExitStack, backend):
        """``backend`` opened now if it is a model not loaded yet (and closed when the run ends)."""
        if isinstance(backend, LocalModel):
            return stack.enter_context(backend.open())
        return backend


def run_audit(
    backend,
    records: Sequence[dict],
    settings: AuditSettings,
    *,
    fmt: AuditFormat | str | None = None,
    out: str | os.PathLike | None = None,
    resume: bool = False,
    embedder=None,
    judge=None,
    search: bool = False,
    progress: Progress | None = None,
    gate: EpsilonGate | None = None,
    canary: dict | None = None,
) -> AuditRun | TargetAuditRun:
    """Audit private in-context learning on ``backend`` (an open backend, or a
    :class:`~ctxlite.runtime.engine.LocalModel` opened only after the log is checked) with the
    private ``records`` in the prompt ``fmt`` (an :class:`AuditFormat`, a built-in name or a file;
    default the built-in of ``settings.task``), and return the :class:`AuditRun`.

    ``out``: the trial log, every reference run and trial appended as it finishes; an existing log
    is continued only with ``resume`` (and only if it is this audit's). ``embedder``: the embedding
    model of a generation audit, ``judge``: the model of ``settings.judge_model`` (each a backend or
    a ``LocalModel``). ``search``: pick the query template first (:func:`~ctxlite.audit.search_template`;
    a resumed log may hold another template index). ``gate``: the ε gate of the verdict (a budget
    per query is refused where a trial composes several, before any work). ``progress`` is told
    the reference runs and trials and the notes.

    >>> from ctxlite import Engine                                 # doctest: +SKIP
    >>> from ctxlite.audit import AuditSettings, load_records
    >>> with Engine() as eng:
    ...     run = run_audit(eng, load_records("private.jsonl", "classify"), AuditSettings(trials=40), out="a.jsonl")
    >>> run.report.rows[0].epsilon_lower_bound

    With :class:`~ctxlite.audit.target_game.TargetSettings`, ``backend`` is a black-box target
    (any object with ``load(records)`` and ``ask(query, seed) -> str``) and ``canary`` the canary
    record: :func:`~ctxlite.runs.target_audit.run_target_audit` runs it (docs/targets.md).
    """
    if isinstance(settings, TargetSettings):
        if canary is None:
            raise InvalidParameter("a target audit needs canary=, one record in the data's own shape")
        if fmt is not None or embedder is not None or judge is not None or search:
            raise InvalidParameter("fmt, embedder, judge and search are options of the model audit, not a target's")
        return run_target_audit(
            backend, records, settings, canary=canary, out=out, resume=resume, progress=progress, gate=gate
        )
    if canary is not None:
        raise InvalidParameter("canary= is the canary record of a target audit (settings=TargetSettings(...))")
    job = _Job(backend, records, settings, fmt, out, resume, embedder, judge, progress, gate)
    with ExitStack() as stack:
        if out is not None:
            job.hold_log(stack, ignore=("settings.template_index",) if search else ())
        engine = job.open(stack, backend)
        embed, judged = job.open(stack, embedder), job.open(stack, judge)
        if search:
            found = search_template(engine, job.records, job.settings, embedder=embed, fmt=job.fmt)
            accuracies = [round(a, 3) for a in found.accuracies]
            job.notes(f"template search ({found.kind}): accuracies {accuracies} -> template {found.best_index}")
            job.settings = replace(job.settings, template_index=found.best_index)
        identity = job.identity()
        log = None if out is None else stack.enter_context(RecordLog(out, identity, kind=KIND, lock=job.lock))
        report = play(
            engine,
            job.records,
            job.settings,
            log,
            embedder=embed,
            progress=job.progress.tick,
            fmt=job.fmt,
            judge=judged,
            tell=lambda note: job.notes(f"ctxlite: note: {note}"),
        )
        if report.rereport_warning:
            job.notes(f"ctxlite: warning: {report.rereport_warning}")
        if log is not None:
            finish(log, {"report": report.to_dict()}, job.notes)
    verdict = audit_verdict(report, None if gate is None else gate.epsilon, identity, gate.unit if gate else "trial")
    state = None if log is None else LogState.of(log, out)
    if state is not None:
        verdict.properties["log.head"] = state.head
    return AuditRun(report, verdict, identity, log=state, notes=job.notes.kept)


def plan_audit(
    backend,
    records: Sequence[dict],
    settings: AuditSettings,
    *,
    fmt: AuditFormat | str | None = None,
    embedder=None,
    judge=None,
    search: bool = False,
) -> Plan:
    """What :func:`run_audit` would cost on this machine (every trial, the template search
    included, none read from a log), without running it."""
    job = _Job(backend, records, settings, fmt, None, False, embedder, judge, None, None)
    with ExitStack() as stack:
        engine = job.open(stack, backend)
        embed, judged = job.open(stack, embedder), job.open(stack, judge)

        def run():
            s = job.settings
            if search:
                found = search_template(engine, job.records, s, embedder=embed, fmt=job.fmt)
                s = replace(s, template_index=found.best_index)
            play(engine, job.records, s, None, embedder=embed, fmt=job.fmt, judge=judged)

        sampled = settings.task is Task.GENERATE or settings.attack is Attack.INJECTION
        return plan_run([engine, embed, judged], run, sampled)
