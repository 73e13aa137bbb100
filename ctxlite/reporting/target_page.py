"""A target audit (``ctxlite audit --target``) as a table, JSON and an offline HTML page: the
system audited, the verdict, the one ε row, and per trial Z, the answers and what the detector
saw in them (the answers hidden by position, length and hash with ``--no-text``)."""

from __future__ import annotations

import math

from ctxlite.reporting.json_output import verdict_json
from ctxlite.reporting.page import Redactor, esc, page, table, verdict_html
from ctxlite.runs.target_audit import TargetAuditRun


def _num(x) -> str:
    if x is None:
        return "-"
    return "inf" if isinstance(x, float) and math.isinf(x) else f"{x:.4g}"


def target_name(identity: dict) -> str:
    """The system audited, in words: its kind and its URL or command."""
    t = identity.get("target") or {}
    where = t.get("url") or " ".join(t.get("ask") or []) or t.get("object") or "?"
    return f"{t.get('kind', '?')} target {where}"


def target_table(run: TargetAuditRun) -> str:
    """The terminal table: the system audited, the row's estimates, the detector's counts."""
    r = run.report.row
    lines = [
        f"target: {target_name(run.identity)}"
        + (
            f" (target file {run.identity['target']['target_file_sha256']})"
            if "target_file_sha256" in (run.identity.get("target") or {})
            else ""
        ),
        f"trials: {r.n_in} IN / {r.n_out} OUT, {len(run.report.settings.queries)} question(s) and "
        f"{run.report.settings.asks_per_trial} answer(s) each",
        f"eps_lb = {_num(r.epsilon_lower_bound)} (certified at confidence {r.confidence:g}, {r.lower_bound_method}); "
        f"point {_num(r.epsilon_point)}, TPR {_num(r.tpr)}, FPR {_num(r.fpr)}, AUROC {_num(r.auroc)}",
        *run.report.notes[2:],
    ]
    return "\n".join(lines)


def target_json(run: TargetAuditRun) -> dict:
    """The JSON of a target audit (``ctxlite audit --target`` and ``ctxlite report``): the verdict
    first, the system audited, the report, the log's head; a partial run says how far it got."""
    head = {} if run.log is None else {"log": run.log.path, "log_head": run.log.head}
    if run.report is None:
        return {"kind": "target-audit", "complete": False, "trials": run.trials, **head}
    return {
        **verdict_json(run.verdict),
        "kind": "target-audit",
        "complete": True,
        "target": run.identity.get("target"),
        **run.report.to_dict(),
        **head,
    }


def target_html(run: TargetAuditRun, no_text: bool = False) -> str:
    """The page: the system audited, the verdict, the row, then every trial with what the detector saw."""
    show = Redactor(no_text)
    title = f"ctxlite target audit: {target_name(run.identity)}"
    if run.report is None:
        return page(title, f"<h1>{esc(title)}</h1><p>Partial run: {run.trials} trial(s) logged.</p>")
    r, s = run.report.row, run.report.settings
    row = [
        [_num(r.epsilon_lower_bound), _num(r.epsilon_point), _num(r.tpr), _num(r.fpr), _num(r.auroc), r.n_in, r.n_out]
    ]
    trials = [
        [
            t.trial,
            "IN" if t.z else "OUT",
            "<br>".join(show(a, f"trial {t.trial} answer {j + 1}") for j, a in enumerate(t.answers)),
            _num(t.seen["secret"]),
            "yes" if t.seen["exact"] else "no",
            t.seen["markers"],
            t.seen.get("labels", 0),
            _num(t.seen.get("words")),
            _num(t.seen["score"]),
        ]
        for t in run.report.trials
    ]
    turns = [[q] if isinstance(q, str) else list(q) for q in s.queries]
    queries = "".join("<li>" + " → ".join(show(t, "question") for t in q) + "</li>" for q in turns)
    body = (
        f"<h1>{esc(title)}</h1>"
        + verdict_html(run.verdict)
        + f"<p data-role='target'>System audited: {esc(target_name(run.identity))}</p>"
        + f"<h2>Questions</h2><ul>{queries}</ul>"
        + table(["ε_lb", "ε point", "TPR", "FPR", "AUROC", "IN", "OUT"], row)
        + "".join(f"<p class='note'>{esc(n)}</p>" for n in run.report.notes)
        + "<h2>Trials: what the detector saw</h2>"
        + table(
            ["trial", "Z", "answers", "secret share", "secret whole", "markers", "labels", "words", "score"],
            trials,
            left=3,
        )
    )
    return page(title, body)
