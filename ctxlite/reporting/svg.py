"""Inline SVG plots generated from the data: line charts and step histograms.

Written by hand rather than with a plotting library: a report must be one offline file with
no script, the same bytes for the same log (no timestamps or random ids), and ctxlite must
stay small to install. Series are told apart by dash pattern and marker, not colour alone,
so the plots read in greyscale; every plot carries a ``<title>``/``aria-label`` and the
pages print its numbers in a table below it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ctxlite.reporting.page import esc

DASHES = ("", "6 3", "2 3", "8 3 2 3")
MARKERS = ("circle", "square", "diamond", "triangle")
W, H = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 60, 190, 20, 45
DIAGONAL_DASH = "1 3"


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if m * step >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _marker(kind: str, x: float, y: float) -> str:
    if kind == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#000"/>'
    if kind == "square":
        return f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="#fff" stroke="#000"/>'
    if kind == "diamond":
        return (
            f'<path d="M{x:.1f} {y - 4:.1f}L{x + 4:.1f} {y:.1f}L{x:.1f} {y + 4:.1f}L{x - 4:.1f} {y:.1f}Z" fill="#777"/>'
        )
    return (
        f'<path d="M{x:.1f} {y - 4:.1f}L{x + 4:.1f} {y + 3:.1f}L{x - 4:.1f} {y + 3:.1f}Z" fill="#fff" stroke="#000"/>'
    )


class _Frame:
    """The axes of one plot: data ranges mapped to the SVG box."""

    def __init__(self, xs: Sequence[float], ys: Sequence[float], x_label: str, y_label: str, *, y_zero=True):
        xs = [x for x in xs if math.isfinite(x)] or [0.0, 1.0]
        ys = [y for y in ys if math.isfinite(y)] or [0.0, 1.0]
        self.x0, self.x1 = min(xs), max(xs)
        self.y0, self.y1 = (min(0.0, min(ys)) if y_zero else min(ys)), max(ys)
        if self.x1 == self.x0:
            self.x0, self.x1 = self.x0 - 0.5, self.x1 + 0.5
        if self.y1 == self.y0:
            self.y1 = self.y0 + 1.0
        pad = 0.05 * (self.y1 - self.y0)
        self.y1 += pad
        self.y0 -= pad if self.y0 < 0 else 0.0
        self.x_label, self.y_label = x_label, y_label

    def x(self, v: float) -> float:
        return LEFT + (v - self.x0) / (self.x1 - self.x0) * (W - LEFT - RIGHT)

    def y(self, v: float) -> float:
        return H - BOTTOM - (v - self.y0) / (self.y1 - self.y0) * (H - TOP - BOTTOM)

    def axes(self) -> str:
        out = [
            f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" stroke="#000"/>',
            f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="#000"/>',
        ]
        for t in _ticks(self.x0, self.x1):
            x = f"{self.x(t):.1f}"
            out.append(f'<line x1="{x}" y1="{H - BOTTOM}" x2="{x}" y2="{H - BOTTOM + 4}" stroke="#000"/>')
            out.append(f'<text x="{self.x(t):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{t:.3g}</text>')
        for t in _ticks(self.y0, self.y1):
            out.append(f'<line x1="{LEFT - 4}" y1="{self.y(t):.1f}" x2="{LEFT}" y2="{self.y(t):.1f}" stroke="#000"/>')
            out.append(f'<text x="{LEFT - 6}" y="{self.y(t) + 4:.1f}" text-anchor="end">{t:.3g}</text>')
        out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 8}" text-anchor="middle">{esc(self.x_label)}</text>')
        out.append(
            f'<text x="14" y="{(TOP + H - BOTTOM) / 2}" text-anchor="middle" '
            f'transform="rotate(-90 14 {(TOP + H - BOTTOM) / 2})">{esc(self.y_label)}</text>'
        )
        return "".join(out)


def _svg(title: str, inner: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
        f'role="img" aria-label="{esc(title)}"><title>{esc(title)}</title>{inner}</svg>'
    )


def _legend(entries: Sequence[tuple[str, str, str, str]]) -> str:
    """(name, marker kind, dash pattern, stroke colour) per entry, top right."""
    out = []
    for i, (name, kind, dash, colour) in enumerate(entries):
        y = TOP + 10 + 18 * i
        out.append(
            f'<line x1="{W - RIGHT + 10}" y1="{y}" x2="{W - RIGHT + 34}" y2="{y}" stroke="{colour}" stroke-width="1.5"'
            + (f' stroke-dasharray="{dash}"' if dash else "")
            + "/>"
        )
        if kind:
            out.append(_marker(kind, W - RIGHT + 22, y))
        out.append(f'<text x="{W - RIGHT + 40}" y="{y + 4}">{esc(name)}</text>')
    return "".join(out)


def line_plot(
    title: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    x_label: str,
    y_label: str,
    *,
    diagonal: bool | str = False,
    steps: bool = False,
    markers: bool = True,
) -> str:
    """Lines (or ``steps``) through each series' finite points, a marker at each point when there
    are few; ``diagonal`` draws y = x (e.g. empirical against theoretical ε; a string names it)."""
    xs = [x for _, sx, _ in series for x in sx]
    ys = [y for _, _, sy in series for y in sy]
    frame = _Frame(xs + (xs if diagonal else []), ys + (xs if diagonal else []), x_label, y_label)
    inner = [frame.axes()]
    if diagonal:
        lo, hi = max(frame.x0, frame.y0), min(frame.x1, frame.y1)
        inner.append(
            f'<line x1="{frame.x(lo):.1f}" y1="{frame.y(lo):.1f}" x2="{frame.x(hi):.1f}" y2="{frame.y(hi):.1f}" '
            f'stroke="#999" stroke-dasharray="{DIAGONAL_DASH}"/>'
        )
    entries = []
    for i, (_, sx, sy) in enumerate(series):
        pts = [(frame.x(x), frame.y(y)) for x, y in zip(sx, sy) if math.isfinite(x) and math.isfinite(y)]
        kind = MARKERS[i % len(MARKERS)] if markers and len(pts) <= 30 else ""
        entries.append((series[i][0], kind, DASHES[i % len(DASHES)], "#000"))
        if steps and pts:
            path = [f"M{pts[0][0]:.1f} {pts[0][1]:.1f}"]
            for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
                path.append(f"H{x1:.1f}V{y1:.1f}")
            d = "".join(path)
        else:
            d = "".join(f"{'M' if j == 0 else 'L'}{x:.1f} {y:.1f}" for j, (x, y) in enumerate(pts))
        dash = DASHES[i % len(DASHES)]
        if d:
            inner.append(
                f'<path d="{d}" fill="none" stroke="#000" stroke-width="1.5"'
                + (f' stroke-dasharray="{dash}"' if dash else "")
                + "/>"
            )
        inner.extend(_marker(kind, x, y) for x, y in pts if kind)
    if diagonal:
        entries.append((diagonal if isinstance(diagonal, str) else "y = x", "", DIAGONAL_DASH, "#999"))
    inner.append(_legend(entries))
    return _svg(title, "".join(inner))


def histogram_plot(
    title: str, groups: Sequence[tuple[str, Sequence[float]]], x_label: str, bins: int = 20
) -> tuple[str, list[float], list[list[int]]]:
    """Step outlines of each group's histogram over shared bins: (svg, bin edges, counts per group)."""
    values = [v for _, vs in groups for v in vs if math.isfinite(v)]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    edges = [lo + (hi - lo) * i / bins for i in range(bins + 1)]
    counts = []
    for _, vs in groups:
        c = [0] * bins
        for v in vs:
            if math.isfinite(v):
                c[min(bins - 1, int((v - lo) / (hi - lo) * bins))] += 1
        counts.append(c)
    series = [(name, edges, c + [c[-1]]) for (name, _), c in zip(groups, counts)]
    return line_plot(title, series, x_label, "trials", steps=True, markers=False), edges, counts
