"""A self-contained, offline HTML page that is safe to open on private text.

Every piece of user text goes through :func:`esc` (HTML-escaped, quotes included) or, for a
shareable report (``--no-text``), through :class:`Redactor`, which replaces it by its position,
length and a hash. The page has no script at all and one inline stylesheet, and its
Content-Security-Policy allows exactly that stylesheet (by hash) and nothing else: no script,
no network request, no external font or image. Hover and keyboard focus show the numbers
through CSS (``title`` attributes and ``:focus`` rules), so nothing needs JavaScript.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os

from ctxlite.gates import Verdict
from ctxlite.outputs import write_atomic
from ctxlite.visible import visible

HEAT_LEVELS = 8
"""Influence is shaded in this many steps (classes ``h0`` … ``h7``), a luminance ramp that reads in greyscale."""

STYLE = """
:root { color-scheme: light; }
body { font: 15px/1.5 system-ui, sans-serif; margin: 2rem auto; max-width: 64rem; color: #111; background: #fff; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.25rem; margin-top: 2rem; } h3 { font-size: 1.05rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: 13px; }
th, td { border: 1px solid #bbb; padding: 2px 6px; text-align: right; }
th { background: #eee; } td.l, th.l { text-align: left; }
.text { font: 14px/1.9 ui-monospace, monospace; white-space: pre-wrap; word-break: break-word;
  border: 1px solid #bbb; padding: .75rem; }
.tok { position: relative; outline-offset: 1px; }
.tok:focus { outline: 2px solid #000; }
.tok:hover::after, .tok:focus::after { content: attr(data-tip); position: absolute; left: 0; top: 1.7em;
  z-index: 2; background: #111; color: #fff; padding: 2px 6px; font: 12px/1.4 system-ui, sans-serif;
  white-space: pre; }
.h0 { background: #ffffff; } .h1 { background: #e6e6e6; } .h2 { background: #cccccc; }
.h3 { background: #b3b3b3; } .h4 { background: #999999; } .h5 { background: #7a7a7a; color: #fff; }
.h6 { background: #5c5c5c; color: #fff; } .h7 { background: #333333; color: #fff; }
.above { text-decoration: underline; text-decoration-thickness: 2px; }
.unmeasured { color: #555; text-decoration: underline dotted; }
.canary { border: 2px solid #000; font-weight: bold; }
.legend span { display: inline-block; min-width: 4.5rem; text-align: center; border: 1px solid #bbb; }
.note { color: #444; font-size: 13px; }
.verdict { border: 3px solid #000; padding: .5rem .75rem; margin: 1rem 0; }
.verdict h2 { margin: 0 0 .25rem; } .verdict-fail { border-style: double; border-width: 6px; }
.verdict-inconclusive { border-style: dashed; }
figure { margin: 1rem 0; } figcaption { font-size: 13px; color: #333; }
svg text { font: 11px system-ui, sans-serif; }
"""


def esc(value) -> str:
    """``value`` as HTML text or attribute content (``&``, ``<``, ``>``, ``"`` and ``'`` escaped), its
    control and bidi characters as visible escapes (a U+202E cannot reorder what the page shows;
    newlines and tabs stay, the text is laid out ``pre-wrap``)."""
    return html.escape(visible(str(value), keep="\n\t"), quote=True)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


class Redactor:
    """Turns private text into what a report shows: the text itself (escaped), or with
    ``no_text`` only where it sits, how long it is and a hash of it."""

    def __init__(self, no_text: bool):
        self.no_text = bool(no_text)

    def __call__(self, text: str, where: str = "") -> str:
        if not self.no_text:
            return esc(text)
        at = f"{where}, " if where else ""
        return esc(f"[{at}{len(text)} chars, sha256 {text_hash(text)}]")


def heat_class(value: float, top: float) -> str:
    """The shading class of ``value`` on a scale whose darkest step is ``top`` (values ≤ 0: none)."""
    if top <= 0 or value <= 0:
        return "h0"
    return f"h{min(HEAT_LEVELS - 1, 1 + int((HEAT_LEVELS - 1) * min(value / top, 1.0) - 1e-9))}"


def legend(top: float, unit: str) -> str:
    """The heat scale's steps with the values they stand for."""
    cells = ['<span class="h0">≤ 0</span>']
    for level in range(1, HEAT_LEVELS):
        lo, hi = top * (level - 1) / (HEAT_LEVELS - 1), top * level / (HEAT_LEVELS - 1)
        cells.append(f'<span class="h{level}">{lo:.2g}–{hi:.2g}</span>')
    return f'<p class="legend">{esc(unit)}: {" ".join(cells)}</p>'


def verdict_html(verdict: Verdict | None) -> str:
    """The gate's verdict for the top of a report: the outcome, the gate, and each case's verdict
    and basis with its message (numbers and positions, no private text); a line saying no gate was
    set for None or a verdict without a gate."""
    if verdict is None or verdict.outcome is None:
        return (
            '<section class="verdict" data-role="verdict" data-verdict="none"><h2>Verdict: no gate set</h2>'
            '<p class="note">Give --fail-above-influence or --fail-above-epsilon for a verdict (fail, pass or '
            "inconclusive) and its basis.</p></section>"
        )
    outcome = verdict.outcome.value
    rows = [[esc(c.name), esc(c.outcome.value), esc(c.basis.value), esc(c.message)] for c in verdict.cases]
    return (
        f'<section class="verdict verdict-{esc(outcome)}" data-role="verdict" data-verdict="{esc(outcome)}">'
        f"<h2>Verdict: {esc(outcome)}</h2><p>Gate: {esc(verdict.gate)} · {len(verdict.cases)} case(s)</p>"
        + table(["case", "verdict", "basis", "why"], rows, left=4)
        + "</section>"
    )


def table(headers: list[str], rows: list[list], left: int = 0) -> str:
    """An HTML table; the first ``left`` columns are left-aligned (text), numbers are formatted."""

    def cell(v, i, tag):
        cls = ' class="l"' if i < left else ""
        if isinstance(v, float):
            v = f"{v:.4g}"
        return f"<{tag}{cls}>{'' if v is None else v}</{tag}>"

    head = "".join(cell(esc(h), i, "th") for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(cell(v, i, "td") for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, body: str) -> str:
    """The whole document: the stylesheet inline and a CSP that allows only it."""
    digest = base64.b64encode(hashlib.sha256(STYLE.encode("utf-8")).digest()).decode()
    csp = f"default-src 'none'; style-src 'sha256-{digest}'; img-src 'none'; base-uri 'none'; form-action 'none'"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def write_private(path: str | os.PathLike, document: str) -> None:
    """Write ``document`` to ``path`` owner-readable only (0600: it holds private text), atomically: an
    existing report is replaced whole or left as it was (:func:`ctxlite.outputs.write_atomic`)."""
    write_atomic(path, document.encode("utf-8"), "HTML report")
