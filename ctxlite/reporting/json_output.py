"""The JSON a command prints on stdout for a run: the verdict first, then the numbers."""

from __future__ import annotations

from ctxlite.gates import Verdict
from ctxlite.influence.results import ExampleResult, LambdaResult
from ctxlite.runs.audit import AuditRun
from ctxlite.runs.score import ScoreRun


def verdict_json(verdict: Verdict | None) -> dict:
    """The ``verdict`` key of a command's JSON (only when a gate was set)."""
    return {} if verdict is None or verdict.gate is None else {"verdict": verdict.to_dict()}


def score_json(run: ScoreRun) -> dict:
    """``ctxlite score``'s JSON: the run (versions, backend, template, settings, identity) and the
    result of its one example, or the data set's summary, each example's results as ``ctxlite
    report --json`` lists them (:func:`score_report_json`: its id, τ and top spans per λ, without
    the per-token arrays) and which examples were scored or reused."""
    head = None if run.log is None else run.log.head
    if run.single:
        return {
            **verdict_json(run.verdict),
            "run": run.meta,
            "result": run.results[0].to_dict(),
            **({} if run.log is None else {"log_head": head}),
        }
    return {
        **verdict_json(run.verdict),  # first: what a reader of the JSON needs before the numbers
        "run": run.meta,
        "summary": None if run.summary is None else run.summary.to_dict(),
        "examples": _examples(run),  # the results themselves: without --out nothing else keeps them
        "scored": run.scored,
        "reused": run.reused,
        "out": None if run.log is None else run.log.path,
        "log_head": head,
    }


def score_report_json(run: ScoreRun) -> dict:
    """``ctxlite report``'s JSON of a score log: per example and λ what a report shows (no per-token
    arrays), the summary, and the log's chain."""
    return {
        **verdict_json(run.verdict),
        "log": run.log.path,
        "kind": "score",
        "complete": run.complete,
        "identity": run.identity,
        "summary": None if run.summary is None else run.summary.to_dict(),
        "examples": _examples(run),
        "chain": _chain(run),
    }


def audit_json(run: AuditRun) -> dict:
    """``ctxlite audit``'s JSON: the verdict, the report (strict JSON: ±inf as ``"inf"``) and the log's head."""
    head = {} if run.log is None else {"log_head": run.log.head}
    return {**verdict_json(run.verdict), **run.report.to_dict(), **head}


def audit_report_json(run: AuditRun) -> dict:
    """``ctxlite report``'s JSON of an audit log: the recomputed report of a finished run, or how many
    trials a partial one holds; and the log's chain."""
    if run.report is None:
        out = {"log": run.log.path, "kind": "audit", "complete": False, "trials": run.trials}
    else:
        out = {
            **verdict_json(run.verdict),
            "log": run.log.path,
            "kind": "audit",
            "complete": True,
            "identity": run.identity,
            **run.report.to_dict(),
        }
    return {**out, "chain": _chain(run)}


def report_json(run: ScoreRun | AuditRun) -> dict:
    """``ctxlite report``'s JSON of a run read from its log."""
    return score_report_json(run) if isinstance(run, ScoreRun) else audit_report_json(run)


def _examples(run: ScoreRun) -> list[dict]:
    """Each example's results, by id, as a report shows them (:func:`_compact`)."""
    return [{"id": k, **_compact(r)} for k, r in zip(run.keys, run.results)]


def _chain(run) -> dict:
    return {"chained": run.log.chained, "head": run.log.head, "lines": run.log.lines}


def _compact(record: ExampleResult) -> dict:
    """One example's result without the per-token arrays: what a report shows."""
    return {"context_tokens": record.context_tokens, "results": [_compact_result(r) for r in record.results]}


def _compact_result(r: LambdaResult) -> dict:
    keep = ("start", "n", "char_start", "char_end", "text", "influence", "above_noise")
    return (
        {
            "lam": r.lam,
            "context_size": r.context_size,
            "context_tokens": r.context_tokens,
            "document_influence": r.document_influence,
            "max_ngram_influence": r.max_ngram_influence,
            "noise_floor": None if r.noise_floor is None else r.noise_floor.to_dict(),
            "epsilon": r.epsilon,
            "top_spans": [{k: g.to_dict()[k] for k in keep} for g in r.top],
        }
        | ({} if r.units is None else {"units": [_compact_unit(u) for u in r.ranked_units()]})
        | ({"clusters": [c.to_dict() for c in r.clusters]} if r.clusters else {})
        | _compact_descent(r)
    )


def _compact_descent(r: LambdaResult) -> dict:
    """A hierarchical search's descent, its sentences largest τ_u first without their per-token τ
    (its n-grams are the result's top spans)."""
    if r.descent is None:
        return {}
    d = r.descent.to_dict()
    d["sentences"] = [_compact_unit(u) for u in r.descent.ranked_sentences()]
    d["ngrams_measured"] = len(r.ngrams)
    return {"descent": d}


def _compact_unit(u) -> dict:
    """A unit (``UnitInfluence``) without its per-token τ."""
    return {k: v for k, v in u.to_dict().items() if k != "per_token"}
