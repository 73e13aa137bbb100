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

from ctxlite.audit.settings import AuditSettings
from ctxlite.privacy.estimators import CanaryScoreAuditor
from ctxlite.reporting.page import Redactor, esc, page, table, verdict_html
from ctxlite.reporting.score_page import identity_table
from ctxlite.reporting.svg import histogram_plot, line_plot

_OPEN, _CLOSE = "[[CANARY]]", "[[/CANARY]]"


def _num(v) -> float:
    if v in ("inf", "-inf"):
        return float(v)
    return math.nan if v is None else float(v)


def _eps_key(eps) -> str:
    return "inf" if eps in (None, "inf") or (isinstance(eps, float) and math.isinf(eps)) else f"{float(eps):g}"


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


def _scores(run) -> dict[str, tuple[list[float], list[float]]]:
    out: dict[str, tuple[list, list]] = {}
    for key, rec in sorted(run.records.items()):
        if "/trial=" in key:
            out.setdefault(key.split("/")[0].removeprefix("eps="), ([], []))[0 if rec["z"] else 1].append(rec["score"])
    return out


def _row_section(row: dict, ins: list[float], outs: list[float]) -> str:
    eps = row["epsilon"]
    name = "no privacy parameter" if eps is None else f"theoretical ε = {esc(eps)}"
    parts = [f'<section data-epsilon="{esc(_eps_key(eps))}"><h3>{name}</h3>']
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
        parts.append(f"<figure>{roc}<figcaption>AUROC {row.get('auroc', math.nan):.3f}</figcaption></figure>")
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


def _bound_terms(rows: list[dict]) -> tuple[str, str]:
    """The lower bound's confidence (e.g. "95%") and threshold-selection method, as logged per row."""
    confidences = {r.get("confidence") for r in rows} - {None}
    methods = {r.get("lower_bound_method") for r in rows} - {None}
    conf = "/".join(f"{c:.0%}" for c in sorted(confidences)) or "unlogged"
    return conf, "; ".join(sorted(methods)) or "not logged"


def _epsilon_plot(rows: list[dict]) -> str:
    dp = [r for r in rows if r["epsilon"] is not None and math.isfinite(_num(r["epsilon"]))]
    conf, method = _bound_terms(rows)
    fields = [
        (f"lower bound ({conf} conf.)", "epsilon_lower_bound"),
        ("point estimate", "epsilon_point"),
        ("GDP estimate (no bound)", "epsilon_gdp"),
        ("ε of pair (exact/upper)", "epsilon_upper_bound"),
    ]
    table_rows = [
        [esc(_eps_key(r["epsilon"]))] + [r.get(k) if r.get(k) is not None else "n/a" for _, k in fields] for r in rows
    ]
    out = "<h2>Empirical against theoretical ε</h2>"
    if len(dp) >= 1:
        xs = [_num(r["epsilon"]) for r in dp]
        series = [(label, xs, [_num(r.get(k)) for r in dp]) for label, k in fields]
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


def _estimation_settings(report: dict) -> str:
    """The settings that shape the estimates but no trial (a resume may change them, so the run
    identity does not hold them), with the lower bound's method."""
    settings = report.get("settings", {})
    keys = ["delta", *AuditSettings.REPORT_ONLY]
    rows = [[esc(k), esc(settings[k])] for k in keys if k in settings]
    rows.append(["lower bound method", esc(_bound_terms(report.get("rows", []))[1])])
    return "<h2>Settings of the estimates</h2>" + table(["setting", "value"], rows, left=2)


def _utility_plot(rows: list[dict], metric: str) -> str:
    pts = [(r, _num(r["epsilon"])) for r in rows if r.get("utility") is not None and r["epsilon"] is not None]
    finite = [(r, e) for r, e in pts if math.isfinite(e)]
    if len(finite) < 2:
        return ""
    plot = line_plot(
        "Privacy–utility trade-off",
        [(metric, [e for _, e in finite], [r["utility"] for r, _ in finite])],
        "theoretical ε",
        metric,
    )
    return (
        "<h2>Privacy–utility</h2><figure>"
        + plot
        + "</figure>"
        + table(["theoretical ε", metric], [[esc(_eps_key(r["epsilon"])), r["utility"]] for r, _ in pts], 1)
    )


def audit_html(run, no_text: bool = False, verdict=None) -> str:
    """The report of an audit log (``records.read_run_log``): a finished one, or a partial one's
    trials so far (no estimates until it ends); the gate's ``verdict`` (a ``gates.Verdict``) on top."""
    redact = Redactor(no_text)
    parts = [f"<h1>ctxlite audit report: {esc(run.path.name)}</h1>", verdict_html(verdict and verdict.to_dict())]
    scores = _scores(run)
    if no_text:
        parts.append('<p class="note">--no-text: private text is replaced by its position, length and hash.</p>')
    report = (run.end or {}).get("report") if run.complete else None
    if report is None:
        n = sum(len(a) + len(b) for a, b in scores.values())
        parts.append(
            f'<p class="note" data-partial="1">Partial run: {n} trial(s) logged; estimates are formed when it ends.</p>'
        )
        rows = [{"epsilon": None if k == "inf" else k} for k in scores]
    else:
        canary = report["canary"]
        parts.append(
            f"<p>Mechanism {esc(report['settings']['mechanism'])} · canary {esc(canary['kind'])} "
            f"(label {redact(str(canary['label']), 'canary label')}) · {esc(report['epsilon_kind'])}</p>"
        )
        parts.append(_prompt(report.get("example_prompt"), redact))
        rows = report["rows"]
        parts.append(_epsilon_plot(rows))
        parts.append(_utility_plot(rows, report.get("utility_metric", "utility")))
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in report.get("notes", [])) + "</ul>")
    parts.append("<h2>Trials per ε</h2>")
    for row in rows:
        ins, outs = scores.get(_eps_key(row["epsilon"]), ([], []))
        parts.append(_row_section(row, ins, outs))
    if report is not None:
        parts.append(_estimation_settings(report))
    parts.append(identity_table(run.identity, redact))
    return page(f"ctxlite audit report: {run.path.name}", "".join(parts))


__all__ = ["audit_html"]
