"""The top spans of a score run in their context, for a terminal.

A score log keeps no copy of the context, only its n-gram windows (text and character span)
and, for adaptive search, its measured blocks: the context is read back from them, so
characters none covers show as "…". Per example and λ (and ε) one line: an excerpt of ``margin``
characters either side of each of the ``spans`` n-grams of largest τ_i, in reading order,
overlapping excerpts merged, each span marked in reverse video on a terminal (``ansi``; the
largest also bold) and in [brackets] otherwise. Control and bidi characters of the private text
are shown as visible stand-ins (:mod:`ctxlite.visible`), so the text can never drive the
terminal or reorder what it shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ctxlite.audit.report import AuditReport, ceiling_kind
from ctxlite.gates import Verdict
from ctxlite.influence.analysis import LargestUnit, Summary
from ctxlite.influence.results import ExampleResult, LambdaResult
from ctxlite.runs.audit import AuditRun
from ctxlite.runs.score import ScoreRun
from ctxlite.visible import visible

BOLD_REVERSE, REVERSE, RESET = "\x1b[1;7m", "\x1b[7m", "\x1b[0m"
GAP = "…"
FLAG = {True: "yes", False: "no", None: "-"}
"""Whether a τ stands above its noise floor, in a table cell ("-": no floor measured)."""


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: a newline as ⏎, every other control, bidi control or
    line separator as a visible stand-in (:func:`ctxlite.visible.visible`: ESC as ␛,
    U+202E as ⟨U+202E⟩)."""
    return visible(text.replace("\n", "⏎"))


def spans_in_context(
    result: LambdaResult, spans: int = 3, margin: int = 12, width: int = 32, ansi: bool = False
) -> str:
    """One λ result's top spans marked in excerpts of its context ("" when it has no n-grams). A
    character of two top spans belongs to the one of larger τ_i; each span is marked on its own
    (the largest bold reverse, the others reverse); a span longer than ``width`` characters keeps
    its head and tail around "…"."""
    top = result.top[:spans]
    if not top:
        return ""
    blocks = (result.search.blocks if result.search is not None else None) or []  # adaptive search's blocks
    known = [*result.ngrams, *top, *blocks]
    chars = {g.char_start + i: c for g in known for i, c in enumerate(g.text)}
    lo, hi = min(chars), max(chars) + 1
    owner: dict[int, int] = {}  # character -> rank of the top span it is shown in
    for rank, g in reversed(list(enumerate(top))):
        owner.update(dict.fromkeys(range(g.char_start, g.char_end), rank))
    windows: list[list[int]] = []
    for a, b in sorted((max(lo, g.char_start - margin), min(hi, g.char_end + margin)) for g in top):
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


def top_spans_block(
    keys: Sequence[str], records: Sequence[ExampleResult], spans: int = 3, ansi: bool = False
) -> list[str]:
    """The lines under the score table: a heading, then per example and λ (and ε) its top spans in context
    (nothing when no result has n-grams, e.g. ``--doc``)."""
    lines = []
    for key, rec in zip(keys, records):
        for r in rec.results:
            excerpt = spans_in_context(r, spans, ansi=ansi)
            if excerpt:
                lines.append(f"{printable(key)} {r.name}: {excerpt}")
    if not lines:
        return []
    how = "the largest bold" if ansi else "each [in brackets]"
    return ["", f"top {spans} n-grams by τ_i in their context ({how}; {GAP} = not shown):", *lines]


def units_table(keys: Sequence[str], records: Sequence[ExampleResult], width: int = 36) -> list[str]:
    """Per example and λ, its units (passages, sentences, fields or spans) ranked by τ_u, largest
    first: label, τ_u, whether it stands above the noise floor, characters and text (``*`` after the
    characters: snapped to whole tokens, which removed more); [] where no result scored units. A
    note line per unit with a near-duplicate partner gives τ_pair, the two removed together, and one per
    cluster of three or more near-duplicates its τ_cluster, all of them removed together."""
    rows = [("example", "λ", "rank", "unit", "τ_u", "above", "chars: text")]
    notes = []
    for key, rec in zip(keys, records):
        for r in rec.results:
            for rank, u in enumerate(r.ranked_units(), 1):
                if u.partner is not None:
                    notes.append(
                        f"  {printable(key)} {r.name}: {printable(u.label)} with its near-duplicate "
                        f"{printable(u.partner)} (similarity {u.similarity:.2f}): τ_pair {u.pair_influence:.2f}, "
                        f"above floor: {FLAG[u.pair_above_noise]}"
                    )
                text = printable(u.text)
                text = text if len(text) <= width else text[: width - 1] + "…"
                above = FLAG[u.above_noise]
                where = f"{u.char_start}–{u.char_end}{'*' * u.snapped}: {text}"
                rows.append((printable(key), r.name, str(rank), printable(u.label), f"{u.influence:.2f}", above, where))
            for c in r.clusters:
                members = ", ".join(printable(label) for label in c.units)
                notes.append(
                    f"  {printable(key)} {r.name}: {members} removed together (similarity ≥ {c.similarity:.2f}): "
                    f"τ_cluster {c.influence:.2f}, above floor: {FLAG[c.above_noise]}"
                )
    if len(rows) == 1:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.rjust(w) if i > 1 and i != 3 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join([*cells, row[-1]]))
    if notes:
        lines += [
            "near-duplicate units, removed together (τ_pair, τ_cluster; leave-one-out misses what all hold):",
            *notes,
        ]
    return lines + descent_lines(keys, records, width) + [""]


def descent_lines(keys: Sequence[str], records: Sequence[ExampleResult], width: int = 36) -> list[str]:
    """Per example and λ of a hierarchical search, what it descended into and the sentences it
    measured there, largest τ_u first (each exact); its n-grams follow in the n-gram table."""
    lines, rule = [], ""
    for key, rec in zip(keys, records):
        for r in rec.results:
            d = r.descent
            if d is None:
                continue
            measured = f"{len(r.ngrams)} of {d.windows} n-gram windows"
            measured += f" ({len(d.copy_windows)} for copy sources alone)" if d.copy_windows else ""
            into = " → ".join(printable(label) for label in d.into)
            lines.append(f"  {printable(key)} {r.name}: descended into {into}; {measured} measured")
            rule = d.rule
            for u in d.ranked_sentences():
                text = printable(u.text)
                text = text if len(text) <= width else text[: width - 1] + "…"
                lines.append(
                    f"    {printable(u.label)}  τ_u {u.influence:.2f}  above: {FLAG[u.above_noise]}  "
                    f"{u.char_start}–{u.char_end}{'*' * u.snapped}: {text}"
                )
    return [f"hierarchical search ({rule}), exact τ at every level measured:", *lines] if lines else []


def score_table(keys: Sequence[str], records: Sequence[ExampleResult], ansi: bool, width: int = 36) -> str:
    """A readable table of example results: per example and λ (and ε, in a column of its own when
    some result has one), the document influence, the largest n-gram influence τ_i with its
    character span and text, the noise floor, and how many n-grams stand above it (``-`` where a
    value was not measured, e.g. ``--doc`` or ``--null-ablations 0``); then the top spans marked in
    their context, in reverse video when ``ansi`` (a terminal), else in brackets. Units, where
    scored, come first (:func:`units_table`)."""

    def num(v) -> str:
        return "-" if v is None else f"{v:.2f}"

    with_eps = any(r.epsilon is not None for rec in records for r in rec.results)
    eps_head = ("ε",) if with_eps else ()
    rows = [("example", "λ", *eps_head, "tokens", "doc τ", "max τ_i", "floor", "above", "top n-gram (chars: text)")]
    for key, rec in zip(keys, records):
        for r in rec.results:
            name = (r.label, r.epsilon_label or "-") if with_eps else (r.label,)
            flags = [g.above_noise for g in r.ngrams]
            above = "-" if not r.ngrams or None in flags else f"{sum(flags)}/{len(r.ngrams)}"
            top = max(r.ngrams, key=lambda g: g.influence, default=None)
            span = "-"
            if top is not None:
                text = printable(top.text)
                text = text if len(text) <= width else text[: width - 1] + "…"
                span = f"{top.char_start}–{top.char_end}: {text}"
            floor = None if r.noise_floor is None else r.noise_floor.max
            rows.append(
                (printable(key), *name, str(r.context_tokens), num(r.document_influence),
                 num(max((g.influence for g in r.ngrams), default=None)), num(floor), above, span)
            )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join([*cells, row[-1]]))
    return "\n".join(units_table(keys, records, width) + lines + top_spans_block(keys, records, ansi=ansi))


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def summary_lines(summary: Summary, largest: dict[str, LargestUnit] | None = None) -> list[str]:
    """One line per λ (and context size and ε): the data set's mean document influence with its
    bootstrap CI, the n-gram max-of-mean (a unit run, ``largest`` from
    :func:`~ctxlite.influence.analysis.largest_units`: its largest τ_u, its example and unit instead,
    since it measured no n-gram), and the mean utility where the data has answers."""
    lines = []
    for s in summary:
        d, u = s.document_influence, s.utility
        utility = "" if u is None else f", ROUGE-L F {u.mean:.3f} (95% CI {u.ci[0]:.3f}–{u.ci[1]:.3f})"
        top = (largest or {}).get(s.key)
        if top is not None:
            where = f"{printable(top.key)}, {printable(top.unit.label)}"
            most = f"largest {top.unit.kind} τ_u {top.influence:.2f} ({where})"
        else:
            most = f"n-gram max-of-mean {_num(s.ngram_influence.max_of_mean)}"
        lines.append(
            f"{s.name}: document influence {d.mean:.2f} (95% CI {d.ci[0]:.2f}–{d.ci[1]:.2f}), {most}, "
            f"Repeat {s.regurgitation.repeat}, Rouge {s.regurgitation.rouge} of {s.examples}{utility}"
        )
    return lines


def verdict_line(verdict: Verdict) -> str:
    """The verdict's one line, ending with the chain head of the log it was formed from (if any), with
    control and bidi characters shown as visible escapes (a person reads it)."""
    head = verdict.properties.get("log.head")
    return visible(verdict.summary()) + (f" [log head {head}]" if head else "")


def score_headline(run: ScoreRun) -> str:
    """The line a person reads first: the largest n-gram (or unit) influence, where and how it stands
    against the noise floor."""
    units = [(key, r) for key, rec in zip(run.keys, run.results) for r in rec.results if r.units]
    if units:
        key, r = max(units, key=lambda kr: kr[1].max_unit_influence)
        u = r.units[0]
        floor = {True: "above", False: "within", None: "no"}[u.above_noise]
        return (
            f"score: largest {u.kind} influence {u.influence:.2f} nats in {key} at λ = {r.lam:g}, "
            f"{u.label} ({floor} noise floor)"
        )
    best = None
    for key, rec in zip(run.keys, run.results):
        for r in rec.results:
            if r.top and (best is None or r.max_ngram_influence > best[1].max_ngram_influence):
                best = (key, r)
    if best is None:
        return "score: document level only (no n-grams scored)"
    key, r = best
    span = r.top[0]
    text = " ".join(span.text.split())
    floor = {True: "above", False: "within", None: "no"}[span.above_noise]
    at = f"λ = {r.lam:g}" + (f", ε = {r.epsilon_label}" if r.epsilon is not None else "")
    return (
        f"score: largest n-gram influence {r.max_ngram_influence:.2f} nats in {key} at {at}, "
        f'"{text[:40]}{"…" if len(text) > 40 else ""}" ({floor} noise floor)'
    )


def audit_table(report: AuditReport) -> str:
    """A readable table of an audit's rows; an estimate that could not be formed prints n/a, with its
    reason below."""
    e = report.settings.estimates
    sub = e.accounting_queries is not None
    head = (
        f"{'eps':>6} {'eps/trial':>9} {'sigma':>7} {'acc*':>6} {'TPR':>6} {'FPR':>6} {'eps_pt':>7} "
        f"{'eps_lb':>7} {'eps_max':>7} {'mu_lb':>6} {'AUROC':>6} {'gdp_est':>8} {'utility':>8}"
    )
    head += f" {'eps_T':>7}" if sub else ""
    lines = [head]
    missing = []

    def f(v, w, p=3):
        if v is None:
            return f"{'-':>{w}}"
        return f"{v:>{w}.{p}f}" if math.isfinite(v) else f"{'inf':>{w}}"

    def est(r, key, w):
        if getattr(r, key) is None and key in r.reasons:
            missing.append((r.epsilon, key, r.reasons[key]))
            return f"{'n/a':>{w}}"
        return f(getattr(r, key), w)

    for r in report.rows:
        cells = [
            f(r.epsilon, 6, 2),
            f(r.epsilon_per_trial, 9, 2),
            f(r.sigma, 7),
            f(r.audit_accuracy, 6),
            f(r.tpr, 6),
            f(r.fpr, 6),
            est(r, "epsilon_point", 7),
            f(r.epsilon_lower_bound, 7),
            est(r, "epsilon_upper_bound", 7),
            f(r.mu_lower_bound, 6),
            f(r.auroc, 6),
            est(r, "epsilon_gdp", 8),
            f(r.utility, 8),
        ]
        lines.append(" ".join(cells + ([f(r.epsilon_subsampled, 7)] if sub else [])))
    method = report.rows[0].lower_bound_method if report.rows else "split"
    lines.append(
        f"acc* = audit accuracy with the threshold optimised on the same trials (optimistic); "
        f"eps_lb = Clopper-Pearson lower bound at {e.confidence:.2f} ({method}; the guarantee); "
        f"eps_max = the audited pair's eps at delta = {report.settings.delta:g}, "
        f"{_profile_kinds(report)} (the most a valid eps_lb can reach); "
        f"mu_lb = Gaussian-DP mu lower bound at the same confidence; "
        f"gdp_est = GDP estimate (model-based, not a bound); "
        f"theoretical eps: {report.epsilon_kind}"
        + (
            f"; eps_T = the same sigma subsampled over T = {e.accounting_queries} queries at q = {e.sampling_rate:g}"
            if sub
            else ""
        )
    )
    names = {"epsilon_point": "eps_pt", "epsilon_gdp": "gdp_est", "epsilon_upper_bound": "eps_max"}
    for eps, key, why in missing:
        at = "-" if eps is None else ("inf" if math.isinf(eps) else f"{eps:g}")
        lines.append(f"n/a: {names[key]} at eps = {at}: {why}")
    return "\n".join(lines)


def _profile_kinds(report: AuditReport) -> str:
    """How the rows' eps_max were computed: "exact", "an upper bound", or both, by theoretical ε (a
    row whose exact profile is computed on a grid has the upper end of its bracket: an upper bound)."""
    kinds = {ceiling_kind(r) for r in report.rows} - {None}
    if kinds == {"exact"}:
        return "exact"
    if kinds == {"upper bound"}:
        return "an upper bound on it"
    if not kinds:
        return "not known"
    return "exact or an upper bound (see privacy_profile_kind)"


def audit_headline(run: AuditRun) -> str:
    """The line a person reads first: the strongest certified ε, at which theoretical ε and
    confidence, and what the audited pair's ε is."""
    report = run.report
    top = max(report.rows, key=lambda r: r.epsilon_lower_bound)
    at = "" if top.epsilon is None else f" at theoretical ε = {_eps_text(top.epsilon)}"
    ceiling = top.epsilon_upper_bound
    kind = ceiling_kind(top) or "exact"
    exact_text = (
        ""
        if ceiling is None
        else f"; the audited pair's {'exact ε' if kind == 'exact' else 'ε is at most'}: "
        f"{'inf' if math.isinf(ceiling) else f'{ceiling:.3g}'}"
    )
    return (
        f"audit ({report.settings.mechanism.value}): certified ε ≥ {top.epsilon_lower_bound:.3f}{at} "
        f"at {report.settings.estimates.confidence:.0%} confidence{exact_text}"
    )


def _eps_text(eps: float) -> str:
    """A theoretical ε as the report's JSON writes it: ``inf``, or the number."""
    return "inf" if math.isinf(eps) else f"{eps}"


__all__ = [
    "audit_headline",
    "audit_table",
    "printable",
    "score_headline",
    "score_table",
    "spans_in_context",
    "summary_lines",
    "top_spans_block",
    "verdict_line",
]
