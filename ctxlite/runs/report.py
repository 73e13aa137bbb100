"""A run read back from its log alone (no model): what ``ctxlite report`` shows and gates.

:func:`report_log` reads a score or audit log, checks its hash chain and its records as it reads
them, and recomputes everything it reports from the records: a score run's summary, an audit's
rows (the detector refitted on the reference runs, the trials scored again), each verdict. An
end line that disagrees with what the records give is refused (the log was edited), naming the
first place they differ. A log of an older format is read as :mod:`ctxlite.logformat` says.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping

from ctxlite.audit.game import recompute_rows, run_keys
from ctxlite.audit.report import GRID_WAS_EXACT, AuditReport, AuditRow
from ctxlite.chain import FIELD, check_head
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.gates import EpsilonGate, InfluenceGate, audit_verdict, score_verdict
from ctxlite.identity import differences, mismatch, normalise
from ctxlite.influence.analysis import summarize
from ctxlite.influence.results import ExampleResult
from ctxlite.logformat import upgrade_example, upgrade_report
from ctxlite.records import RunLog, read_run_log, read_text
from ctxlite.runs.audit import KIND as AUDIT_KIND
from ctxlite.runs.audit import AuditRun, TrialScores
from ctxlite.runs.log import LogState
from ctxlite.runs.progress import Notes, Progress, Silent
from ctxlite.runs.score import KIND as SCORE_KIND
from ctxlite.runs.score import ScoreRun
from ctxlite.runs.target_audit import KIND as TARGET_KIND
from ctxlite.runs.target_audit import report_target_log


def report_log(
    path: str | os.PathLike,
    *,
    gate: InfluenceGate | EpsilonGate | None = None,
    progress: Progress | None = None,
    others: Mapping[str, Callable] | None = None,
):
    """The run in the log at ``path``, recomputed from its records: a
    :class:`~ctxlite.runs.score.ScoreRun` or an :class:`~ctxlite.runs.audit.AuditRun`, finished
    or partial, with the verdict of ``gate`` (an influence gate for a score log, an ε gate for an
    audit log; the other kind is refused). ``progress`` is told what a person must know (the
    chain, a partial run, examples the last run did not list). ``others`` reads logs of other
    kinds, by kind: ``reader(run, note)`` of the log read and its chain checked (``ctxlite
    report`` passes ``ctxlite serve``'s budget log reader, a layer this one does not import); a
    gate on such a log is refused."""
    notes = Notes(progress or Silent())
    run = read_run_log(path)  # the chain and the records' keys are checked as it is read
    _check_identity(run)
    refuse_foreign_records(run)
    _say_chain(run, notes)
    if run.kind == SCORE_KIND:
        if isinstance(gate, EpsilonGate):
            raise InvalidParameter(f"--fail-above-epsilon gates audit logs; {path} is a score log")
        return _score(run, gate, notes)
    if run.kind == AUDIT_KIND:
        if isinstance(gate, InfluenceGate):
            raise InvalidParameter(f"--fail-above-influence gates score logs; {path} is an audit log")
        return _audit(run, gate, notes)
    if run.kind == TARGET_KIND:
        if isinstance(gate, InfluenceGate):
            raise InvalidParameter(f"--fail-above-influence gates score logs; {path} is a target audit log")
        return report_target_log(run, gate, notes, disagrees)
    if others and run.kind in others:
        if gate is not None:
            name = "--fail-above-influence" if isinstance(gate, InfluenceGate) else "--fail-above-epsilon"
            raise InvalidParameter(f"{name} gates score and audit logs; {path} is a ctxlite {run.kind} log")
        return others[run.kind](run, notes)
    raise DataError(f"{path} is a ctxlite {run.kind!r} log, not a score or audit log")


def verify_log(path: str | os.PathLike, head: str | None = None) -> RunLog:
    """The log at ``path`` with its hash chain checked as it is read (``ctxlite verify``); with
    ``head``, it must end exactly there. Refused (``DataError``, exit 4): a log without a chain, a
    kept head that is an earlier line's (resumed or appended to since) or none of its lines'; a
    ``head`` not of a chain hash's form is refused first (``InvalidParameter``, exit 2)."""
    if head is not None:
        check_head(head)
    run = read_run_log(path)
    if not run.chained:
        raise DataError(f"{path} has no hash chain (written before ctxlite chained its logs): nothing to verify")
    refuse_foreign_records(run)
    if head is not None and head != run.head:
        heads = [json.loads(line).get(FIELD) for line in read_text(path, "result log").split("\n")[: run.lines]]
        if head in heads:
            at = heads.index(head) + 1
            raise DataError(
                f"{path}: the kept head {head} is line {at}'s; the log has {run.lines - at} line(s) after it "
                f"(it was resumed or appended to since; its head is now {run.head})"
            )
        raise DataError(
            f"{path}: its head is {run.head}, not the kept {head}: the log is not the one whose head was "
            "kept (rewritten, truncated, or another log)"
        )
    return run


def refuse_foreign_records(run: RunLog) -> None:
    """Refuse (``DataError``, exit 4, naming the line) a record that no run of the log's kind writes,
    however well chained: a score run writes ``example`` records only; an audit run a ``trial``
    record per trial ``i < trials`` and a ``reference`` record per reference run ``j <
    reference_runs`` of each audited ε, under the game's keys. The report reads none other, so such
    a record would otherwise be ignored without a word (or, in a partial audit, counted). Logs of
    other kinds are not judged here."""
    if run.kind == SCORE_KIND:
        for key, rec in run.records.items():
            if rec.get("type") != "example":
                _foreign(
                    run,
                    key,
                    "a score run",
                    f"a score run writes example records, this one is of type {rec.get('type')!r}",
                )
    elif run.kind == AUDIT_KIND:
        allowed = _audit_keys(run.identity.get("settings"))
        if allowed is None:  # settings in another shape: the report refuses the log as it reads them
            return
        for key, rec in run.records.items():
            kind = allowed.get(key)
            if kind is None:
                _foreign(
                    run,
                    key,
                    "an audit run",
                    "no trial or reference run of the audited ε, trials and reference runs has that key",
                )
            if run.schema_version is not None and rec.get("type") != kind:
                _foreign(run, key, "an audit run", f"its key is a {kind} record's, its type is {rec.get('type')!r}")


def _foreign(run: RunLog, key: str, who: str, why: str) -> None:
    raise DataError(f"{run.where(key)}: record {key!r} is not one {who} writes ({why}): the log was edited")


def _audit_keys(settings) -> dict[str, str] | None:
    """The key of every record an audit of ``settings`` (its log identity's) writes, and its type."""
    try:
        epsilons = [float(e) for e in settings["epsilons"]]
        trials, refs = int(settings["trials"]), int(settings["reference_runs"])
    except (KeyError, TypeError, ValueError):
        return None
    return run_keys(epsilons, trials, refs)


def log_state(run: RunLog, path: str | os.PathLike) -> LogState:
    return LogState(os.fspath(path), run.head, run.chained, run.lines)


def _check_identity(run: RunLog) -> None:
    """Refuse (exit 4) a header whose identity holds a part the report reads in another shape."""
    for name in ("model", "software", "settings"):
        value = run.identity.get(name)
        if value is not None and not isinstance(value, dict):
            raise DataError(
                f"{run.path}:1: corrupt log, its header's identity.{name} is a {type(value).__name__}, not an object"
            )


def _say_chain(run: RunLog, note) -> None:
    """The log's chain head (what ``ctxlite verify --head`` checks), or that it has none."""
    if run.chained:
        note(f"{run.path}: hash chain intact over {run.lines} line(s), head {run.head}")
    else:
        note(
            f"ctxlite: note: {run.path} has no hash chain (written before ctxlite chained its logs): an edit "
            "to it cannot be detected; reported from its records, read-only (it cannot be resumed)"
        )


def disagrees(run: RunLog, what: str, stored, recomputed) -> None:
    """Refuse (exit 4) an end line whose ``what`` is not what the records give; a log of an older
    format is compared on the fields it holds (:mod:`ctxlite.logformat`)."""
    found = mismatch(stored, recomputed, newer_keys=run.schema_version is None)
    if found is not None:
        path, a, b = found
        raise DataError(
            f"{run.where()}: the end line disagrees with the records: {what}{'' if path.startswith('[') else '.'}"
            f"{path} is {a!r} there, "
            f"{b!r} recomputed from the records (the log was edited)"
        )


def partial(run: RunLog, what: str, note) -> None:
    note(f"{run.path}: partial run ({what}; it did not finish): re-run the same command to finish it")


def end_part(run: RunLog, key: str):
    """What the log's end line holds under ``key``; a hand-edited end line without it is refused."""
    if not isinstance(run.end.get(key), (dict, list)):
        raise DataError(f"{run.path}: corrupt log, its end line has no {key!r}")
    return run.end[key]


def _example(run: RunLog, key: str) -> ExampleResult:
    """One logged example's result, read through its type (an older format upgraded first)."""
    data = run.records[key]["result"]
    try:
        return ExampleResult.from_dict(upgrade_example(data) if run.schema_version is None else data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(f"{run.where(key)}: corrupt record {key!r}, its result cannot be read ({exc!r})") from None


def _score(run: RunLog, gate: InfluenceGate | None, note) -> ScoreRun:
    examples = [k for k, r in run.records.items() if r.get("type") == "example"]
    if run.complete:
        keys = end_part(run, "examples")
        missing = [k for k in keys if k not in examples]
        if missing:
            raise DataError(f"{run.path}: corrupt log, its end line names example {missing[0]!r} it does not hold")
        unlisted = [k for k in examples if k not in keys]
        if unlisted:  # an earlier run of the same log scored inputs the last one did not have
            note(
                f"ctxlite: note: {run.path} also holds {len(unlisted)} example(s) its last run did not list "
                f"({', '.join(map(repr, unlisted[:3]))}{', …' if len(unlisted) > 3 else ''}): not reported"
            )
    else:
        keys = examples
        partial(run, f"{len(keys)} example(s) finished", note)
    results = [_example(run, k) for k in keys]
    if run.complete:  # recomputed from the records, never read from the end line
        stored = run.end.get("summary")
        if "summary" not in run.end or (stored is None and len(keys) != 1):
            raise DataError(
                f"{run.where()}: the end line has no summary ({_said(run.end)}) for {len(keys)} example(s): "
                "a run writes one for a data set, null only for a single example (the log was edited)"
            )
        summary = None if stored is None else summarize(results)
        disagrees(run, "summary", stored, None if summary is None else _as_logged(summary.to_dict()))
    else:
        summary = summarize(results) if len(results) > 1 else None
    verdict = score_verdict(keys, results, None if gate is None else gate.nats, run.identity, complete=run.complete)
    if run.head is not None:
        verdict.properties["log.head"] = run.head
    return ScoreRun(
        keys,
        results,
        summary,
        verdict,
        run.identity,
        complete=run.complete,
        log=log_state(run, run.path),
        notes=note.kept,
    )


def _said(end: dict) -> str:
    return "'summary': null" if "summary" in end else "no 'summary' key"


def _as_logged(obj):
    """``obj`` as the log holds it (strict JSON read back)."""
    return json.loads(json.dumps(obj, allow_nan=False))


def _audit(run: RunLog, gate: EpsilonGate | None, note) -> AuditRun:
    scores = _trial_scores(run)
    trials = sum("/trial=" in k for k in run.records)
    state = log_state(run, run.path)
    if not run.complete:
        partial(run, f"{trials} trial(s) logged, no report formed yet", note)
        audit = AuditRun(None, None, run.identity, False, state, trials, scores, note.kept)
        if gate is not None:
            audit.require_report()
        return audit
    report = _recomputed_report(run, end_part(run, "report"))
    if report.rereport_warning:  # the stored report was a re-report of the trials under another bound choice
        note(f"ctxlite: warning: {report.rereport_warning}")
    threshold, unit = (None, "trial") if gate is None else (gate.epsilon, gate.unit)
    verdict = audit_verdict(report, threshold, run.identity, unit)
    if run.head is not None:
        verdict.properties["log.head"] = run.head
    return AuditRun(report, verdict, run.identity, True, state, trials, scores, note.kept)


def _trial_scores(run: RunLog) -> dict[str, TrialScores]:
    """The logged score of every trial, IN and OUT, per ε key (in the log's key order)."""
    out: dict[str, TrialScores] = {}
    for key, rec in sorted(run.records.items()):
        if "/trial=" in key:
            scores = out.setdefault(key.split("/")[0].removeprefix("eps="), TrialScores())
            (scores.ins if rec["z"] else scores.outs).append(rec["score"])
    return out


def _recomputed_report(run: RunLog, stored: dict) -> AuditReport:
    """The end line's audit report with every row recomputed from the logged trial and reference
    records (:func:`ctxlite.audit.game.recompute_rows`); refused if the end line disagrees with them."""
    try:
        report = AuditReport.from_dict(upgrade_report(stored) if run.schema_version is None else stored)
        rows = recompute_rows(report, run.records, run.path)
    except (InvalidParameter, KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(f"{run.where()}: corrupt log, its end line's report cannot be read ({exc})") from None
    diff = differences(normalise(run.identity.get("settings")), report.settings.game_params())
    if diff:
        raise DataError(
            f"{run.where()}: the end line disagrees with the header: its report's settings "
            f"({', '.join(diff[:6])}) are not those the trials were played with (the log was edited)"
        )
    read = [_as_read(raw, row) for raw, row in zip(stored["rows"], report.rows)]
    report.rows = rows
    disagrees(run, "report.rows", read, _as_logged([r.to_dict() for r in rows]))
    return report


def _as_read(raw: dict, row: AuditRow) -> dict:
    """An end line's row as the reader takes it: a row written before exact values were told from
    grid ones has its grid ε read as an upper bound (``GRID_WAS_EXACT``), which the recomputed row
    carries forward; any other row as written."""
    if row.reasons.get("epsilon_exact") != GRID_WAS_EXACT:
        return raw
    tight = {"audit_tightness": None, "audit_tightness_at_least": row.audit_tightness_at_least}
    return {**raw, "epsilon_exact": None, **tight, "reasons": row.reasons}
