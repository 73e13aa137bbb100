"""The top spans of a score run in their context, for a terminal.

A score log keeps no copy of the context, only its n-gram windows (text and character span)
and, for adaptive search, its measured blocks: the context is read back from them, so
characters none covers show as "…". Per example and λ (and ε) one line: an excerpt of ``margin``
characters either side of each of the ``spans`` n-grams of largest τ_i, in reading order,
overlapping excerpts merged, each span marked in reverse video on a terminal (``ansi``; the
largest also bold) and in [brackets] otherwise. Control and bidi characters of the private text
are shown as visible stand-ins (:mod:`ctxlite.reporting.visible`), so the text can never drive the
terminal or reorder what it shows.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxlite.reporting.labels import result_label
from ctxlite.reporting.visible import visible

BOLD_REVERSE, REVERSE, RESET = "\x1b[1;7m", "\x1b[7m", "\x1b[0m"
GAP = "…"


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: a newline as ⏎, every other control, bidi control or
    line separator as a visible stand-in (:func:`ctxlite.reporting.visible.visible`: ESC as ␛,
    U+202E as ⟨U+202E⟩)."""
    return visible(text.replace("\n", "⏎"))


def _top(result: dict, spans: int) -> list[dict]:
    grams = result.get("top_spans")
    if grams is None:  # a record without the scorer's own choice: rank its n-grams
        grams = sorted(result.get("ngrams") or [], key=lambda g: -g["influence"])
    return list(grams)[:spans]


def spans_in_context(result: dict, spans: int = 3, margin: int = 12, width: int = 32, ansi: bool = False) -> str:
    """One λ result's top spans marked in excerpts of its context ("" when it has no n-grams). A
    character of two top spans belongs to the one of larger τ_i; each span is marked on its own
    (the largest bold reverse, the others reverse); a span longer than ``width`` characters keeps
    its head and tail around "…"."""
    top = _top(result, spans)
    if not top:
        return ""
    blocks = (result.get("search") or {}).get("blocks") or []  # adaptive search: text measured as blocks
    known = [*(result.get("ngrams") or []), *top, *blocks]
    chars = {g["char_start"] + i: c for g in known for i, c in enumerate(g["text"])}
    lo, hi = min(chars), max(chars) + 1
    owner: dict[int, int] = {}  # character -> rank of the top span it is shown in
    for rank, g in reversed(list(enumerate(top))):
        owner.update(dict.fromkeys(range(g["char_start"], g["char_end"]), rank))
    windows: list[list[int]] = []
    for a, b in sorted((max(lo, g["char_start"] - margin), min(hi, g["char_end"] + margin)) for g in top):
        if windows and a <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], b)
        else:
            windows.append([a, b])

    def mark(rank: int | None, text: str) -> str:
        if rank is None:
            return text
        if len(text) > width:
            text = text[: width // 2] + GAP + text[len(text) - (width - width // 2 - 1) :]
        if not ansi:
            return f"[{text}]"
        return f"{BOLD_REVERSE if rank == 0 else REVERSE}{text}{RESET}"

    pieces = []
    for a, b in windows:
        runs: list[list] = []  # [rank of the span or None, text] in reading order
        for i in range(a, b):
            c, rank = chars.get(i), owner.get(i)
            if runs and runs[-1][0] == rank:
                if c is None and runs[-1][1].endswith(GAP):
                    continue  # one "…" per stretch no window covers
                runs[-1][1] += GAP if c is None else printable(c)
            else:
                runs.append([rank, GAP if c is None else printable(c)])
        body = "".join(mark(rank, text) for rank, text in runs)
        pieces.append((GAP if a > lo else "") + body + (GAP if b < hi else ""))
    return " ".join(pieces)


def top_spans_block(keys: Sequence[str], records: Sequence[dict], spans: int = 3, ansi: bool = False) -> list[str]:
    """The lines under the score table: a heading, then per example and λ (and ε) its top spans in context
    (nothing when no result has n-grams, e.g. ``--doc``)."""
    lines = []
    for key, rec in zip(keys, records):
        for r in rec["results"]:
            excerpt = spans_in_context(r, spans, ansi=ansi)
            if excerpt:
                lines.append(f"{printable(key)} {result_label(r)}: {excerpt}")
    if not lines:
        return []
    how = "the largest bold" if ansi else "each [in brackets]"
    return ["", f"top {spans} n-grams by τ_i in their context ({how}; {GAP} = not shown):", *lines]


__all__ = ["printable", "spans_in_context", "top_spans_block"]
