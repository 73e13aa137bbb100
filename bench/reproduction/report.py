"""The reproduction's outputs: a JSON summary and one self-contained HTML page, made with ctxlite's own
report code (``ctxlite.reporting``: the escaped, script-free page with its CSP, and the inline SVG
plots), so the page opens offline and is the same bytes for the same results."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ctxlite.outputs import write_atomic
from ctxlite.reporting.page import esc, page, table
from ctxlite.reporting.svg import line_plot

from .framework import ClaimRun, RunContext


def summary(runs: Sequence[ClaimRun], ctx: RunContext, environment: dict, seconds: float) -> dict:
    """The JSON summary: the run's settings and environment, its wall-clock and CPU seconds (this
    process: the cost without the machine's other load), the count per outcome, every claim."""
    return {
        "settings": ctx.settings(),
        "environment": environment,
        "seconds": round(seconds, 1),
        "cpu_seconds": round(sum(r.cpu_seconds for r in runs), 1),
        "outcomes": dict(Counter(r.verdict.outcome for r in runs)),
        "claims": [r.to_dict() for r in runs],
    }


def _value(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)) and len(v) <= 6 and all(isinstance(x, (int, float)) for x in v):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    text = json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else str(v)
    return text if len(text) <= 300 else text[:299] + "…"


def _claim_section(run: dict) -> str:
    test = run.get("test")
    rows = [[esc(k), esc(_value(v))] for k, v in run["numbers"].items()]
    parts = [
        f'<section id="claim-{esc(run["id"])}"><h2>{esc(run["id"])} · {esc(run["outcome"])}</h2>',
        f"<p><b>Claim</b> ({esc(run['paper'])}): {esc(run['statement'])}</p>",
        f"<p><b>Verdict</b>: {esc(run['reason'])}</p>",
    ]
    if test:
        ci = "" if test.get("ci") is None else f"; {100 * (test['confidence'] or 0.95):.0f}% CI {_value(test['ci'])}"
        parts.append(
            f"<p><b>Test</b>: {esc(test['name'])}: effect {esc(_value(test['effect']))}{esc(ci)}, "
            f"statistic {esc(_value(test['statistic']))}, "
            + ("decided by the bound" if test["p_value"] is None else f"p = {test['p_value']:.3g}")
            + f", n = {test['n']}</p>"
        )
    if rows:
        parts.append(table(["number", "value"], rows, left=1))
    for fig in run.get("figures", []):
        series = [(name, [float(x) for x in xs], [float(y) for y in ys]) for name, xs, ys in fig["series"]]
        svg = line_plot(fig["title"], series, fig["x_label"], fig["y_label"])
        parts.append(f"<figure>{svg}<figcaption>{esc(fig['title'])}</figcaption></figure>")
    settings = [[esc(k), esc(_value(v))] for k, v in run["settings"].items()]
    if settings:
        parts.append("<h3>Settings</h3>" + table(["setting", "value"], settings, left=1))
    parts.append(
        f'<p class="note">{run["seconds"]} s ({run["cpu_seconds"]} s of CPU); per-example data in the JSON '
        "summary.</p></section>"
    )
    return "".join(parts)


def html(result: dict) -> str:
    """One offline page: the verdict table, then each claim with its numbers, test, plots and settings."""
    rows = [
        [
            f'<a href="#claim-{esc(r["id"])}">{esc(r["id"])}</a>',
            esc(r["outcome"]),
            esc(r["statement"]),
            esc(r["reason"]),
        ]
        for r in result["claims"]
    ]
    env = [[esc(k), esc(_value(v))] for k, v in {**result["settings"], **result["environment"]}.items()]
    body = (
        "<h1>ctxlite: the papers' claims, reproduced</h1>"
        f"<p>{esc(result['settings']['mode'])} run, {result['seconds']} s ({result['cpu_seconds']} s of CPU). Outcomes: "
        + esc(", ".join(f"{k} {v}" for k, v in sorted(result["outcomes"].items())))
        + ".</p>"
        + table(["claim", "outcome", "statement", "why"], rows, left=4)
        + "<h2>Run</h2>"
        + table(["setting", "value"], env, left=1)
        + "".join(_claim_section(r) for r in result["claims"])
    )
    return page("ctxlite reproduction", body)


def write(out: Path, result: dict) -> tuple[Path, Path]:
    """``reproduce.json`` and ``reproduce.html`` in ``out`` (created), each written whole."""
    out.mkdir(parents=True, exist_ok=True)
    js, page_path = out / "reproduce.json", out / "reproduce.html"
    write_atomic(js, (json.dumps(result, indent=1, ensure_ascii=False) + "\n").encode(), "JSON summary", 0o644)
    write_atomic(page_path, html(result).encode(), "HTML report", 0o644)
    return js, page_path
