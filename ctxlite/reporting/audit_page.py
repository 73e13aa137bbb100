"""The HTML report of a ``ctxlite audit`` log: how well the canary was detected, and what that certifies.

The audited prompt with the canary marked; per theoretical ε the detector's ROC curve
(TPR against FPR over every threshold, Jagielski et al. 2020) and the histograms of the IN and
OUT trial scores; the certified lower bound, the point estimate, the GDP estimate (a model,
not a bound) and the audited pair's exact ε against the theoretical ε with the line ε = ε; the
privacy–utility curve across ε; and the run's identity. Every plot's numbers are in a table
below it.
"""

from __future__ import annotations

import math
from pathlib import Path

from ctxlite.audit.report import AuditReport, AuditRow
from ctxlite.privacy.estimators import CanaryScoreAuditor
from ctxlite.reporting.page import Redactor, esc, page, table, verdict_html
from ctxlite.reporting.score_page import identity_table
from ctxlite.reporting.svg import histogram_plot, line_plot
from ctxlite.runs.audit import AuditRun

_OPEN, _CLOSE = "[[CANARY]]", "[[/CANARY]]"


def _num(v: float | None) -> float:
    return math.nan if v is None else float(v)


def _eps_key(eps: float | None) -> str:
    return "inf" if eps is None or math.isinf(eps) else f"{float(eps):g}"


def _eps_cell(eps: float | None):
    """A theoretical ε as the report's table shows it (strict JSON: ``inf`` as a word)."""
    return "inf" if eps is not None and math.isinf(eps) else eps


def _prompt(text: str | None, redact: Redactor) -> str:
    if not text:
        return ""
    before, _, rest = text.partition(_OPEN)
    canary, _, after = rest.partition(_CLOSE)
    body = redact(before, "prompt before the canary")
    if rest:
        body += f'<mark class="canary" data-role="canary">{redact(canary, "canary")}</mark>'
        body += redact(after, "prompt after the canary")
    return f'<h2>The audited prompt (Z = 1; the canary marked)</h2><div class="text">{body}</div>'


def _row_section(shown, key: str, row: AuditRow | None, scores) -> str:
    """The trials of one theoretical ε (``shown``: as its heading names it; ``key``: its log key)."""
    ins, outs = (scores.ins, scores.outs) if scores is not None else ([], [])
    name = "no privacy parameter" if shown is None else f"theoretical ε = {esc(shown)}"
    parts = [f'<section data-epsilon="{esc(key)}"><h3>{name}</h3>']
    if len(ins) >= 1 and len(outs) >= 1:
        _, fpr, tpr = CanaryScoreAuditor(ins, outs).roc()
        roc = line_plot(
            f"ROC of the detector ({name})",
            [("ROC", fpr.tolist(), tpr.tolist())],
            "false positive rate",
            "true positive rate",
            diagonal="chance",
            steps=True,
            markers=False,
        )
        step = max(1, len(fpr) // 25)
        rows = [[float(f), float(t)] for f, t in zip(fpr[::step], tpr[::step])]
        auroc = math.nan if row is None else row.auroc
        parts.append(f"<figure>{roc}<figcaption>AUROC {auroc:.3f}</figcaption></figure>")
        parts.append(table(["FPR", "TPR"], rows))
        hist, edges, counts = histogram_plot(f"Trial scores ({name})", [("IN (canary)", ins), ("OUT", outs)], "score")
        parts.append(f"<figure>{hist}</figure>")
        parts.append(
            table(
                ["bin from", "bin to", "IN", "OUT"],
                [[edges[i], edges[i + 1], counts[0][i], counts[1][i]] for i in range(len(counts[0]))],
            )
        )
    parts.append("</section>")
    return "".join(parts)


def _bound_terms(rows: list[AuditRow]) -> tuple[str, str]:
    """The lower bound's confidence (e.g. "95%") and threshold-selection method, as logged per row."""
    confidences = {r.confidence for r in rows}
    methods = {r.lower_bound_method for r in rows}
    conf = "/".join(f"{c:.0%}" for c in sorted(confidences)) or "unlogged"
    return conf, "; ".join(sorted(methods)) or "not logged"


def _epsilon_plot(rows: list[AuditRow]) -> str:
    dp = [r for r in rows if r.epsilon is not None and math.isfinite(r.epsilon)]
    conf, method = _bound_terms(rows)
    fields = [
        (f"lower bound ({conf} conf.)", "epsilon_lower_bound"),
        ("point estimate", "epsilon_point"),
        ("GDP estimate (no bound)", "epsilon_gdp"),
        ("ε of pair (exact/upper)", "epsilon_upper_bound"),
    ]
    table_rows = [[esc(_eps_key(r.epsilon))] + [_cell(getattr(r, k)) for _, k in fields] for r in rows]
    out = "<h2>Empirical against theoretical ε</h2>"
    if len(dp) >= 1:
        xs = [_num(r.epsilon) for r in dp]
        series = [(label, xs, [_num(getattr(r, k)) for r in dp]) for label, k in fields]
        out += "<figure>" + line_plot(
            "Empirical ε against theoretical ε", series, "theoretical ε", "ε", diagonal="ε = ε"
        )
        out += (
            f'<figcaption data-role="bound">Only the lower bound is a guarantee: ε ≥ it with {conf} confidence '
            f"(Clopper–Pearson; threshold: {esc(method)}). The point and GDP values are estimates, not "
            "bounds (GDP assumes a Gaussian trade-off curve); the pair's ε (exact, or for rnm an upper bound) "
            "is the most the lower bound can certify; the dotted line is ε = ε.</figcaption></figure>"
        )
    return out + table(["theoretical ε"] + [label for label, _ in fields], table_rows, 1)


def _cell(v):
    if v is None:
        return "n/a"
    return "inf" if isinstance(v, float) and math.isinf(v) else v


def _estimation_settings(report: AuditReport) -> str:
    """The settings that shape the estimates but no trial (a resume may change them, so the run
    identity does not hold them), with the lower bound's method."""
    settings = {"delta": report.settings.delta, **report.settings.estimates.params()}
    rows = [[esc(k), esc(v)] for k, v in settings.items()]
    rows.append(["lower bound method", esc(_bound_terms(report.rows)[1])])
    return "<h2>Settings of the estimates</h2>" + table(["setting", "value"], rows, left=2)


def _utility_plot(rows: list[AuditRow], metric: str) -> str:
    pts = [(r, _num(r.epsilon)) for r in rows if r.utility is not None and r.epsilon is not None]
    finite = [(r, e) for r, e in pts if math.isfinite(e)]
    if len(finite) < 2:
        return ""
    plot = line_plot(
        "Privacy–utility trade-off",
        [(metric, [e for _, e in finite], [r.utility for r, _ in finite])],
        "theoretical ε",
        metric,
    )
    return (
        "<h2>Privacy–utility</h2><figure>"
        + plot
        + "</figure>"
        + table(["theoretical ε", metric], [[esc(_eps_key(r.epsilon)), r.utility] for r, _ in pts], 1)
    )


def audit_html(run: AuditRun, no_text: bool = False) -> str:
    """The report of an audit run read from its log (:func:`ctxlite.runs.report_log`): a finished
    one, or a partial one's trials so far (no estimates until it ends); the gate's verdict on top."""
    redact = Redactor(no_text)
    name = Path(run.log.path).name
    parts = [f"<h1>ctxlite audit report: {esc(name)}</h1>", verdict_html(run.verdict)]
    if no_text:
        parts.append('<p class="note">--no-text: private text is replaced by its position, length and hash.</p>')
    report = run.report
    if report is None:
        n = sum(len(t.ins) + len(t.outs) for t in run.scores.values())
        parts.append(
            f'<p class="note" data-partial="1">Partial run: {n} trial(s) logged; estimates are formed when it ends.</p>'
        )
        sections = [(None if k == "inf" else k, k, None) for k in run.scores]
    else:
        canary = report.canary
        parts.append(
            f"<p>Mechanism {esc(report.settings.mechanism.value)} · canary {esc(canary.kind.value)} "
            f"(label {redact(str(canary.label), 'canary label')}) · {esc(report.epsilon_kind)}</p>"
        )
        parts.append(_prompt(report.example_prompt, redact))
        parts.append(_epsilon_plot(report.rows))
        parts.append(_utility_plot(report.rows, report.utility_metric))
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in report.notes) + "</ul>")
        sections = [(_eps_cell(r.epsilon), _eps_key(r.epsilon), r) for r in report.rows]
    parts.append("<h2>Trials per ε</h2>")
    for shown, key, row in sections:
        parts.append(_row_section(shown, key, row, run.scores.get(key)))
    if report is not None:
        parts.append(_estimation_settings(report))
    parts.append(identity_table(run.identity, redact))
    return page(f"ctxlite audit report: {name}", "".join(parts))


__all__ = ["audit_html"]
