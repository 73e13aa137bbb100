"""The HTML report of a ``ctxlite score`` log: where in the context the model copied from.

Per example and λ (and ε of ε-bounded CID): the context with every token shaded by τ_i of its
n-gram (the largest τ_i of the windows covering it when windows overlap; underlined when above
the noise floor), hover or keyboard focus showing τ_i, the n-gram and the floor verdict; the
response and its per-token τ_t; a unit run (``--unit``) also has its units ranked by τ_u and the
context shaded unit by unit; the response-position profile τ_t and the n-gram-position
profile τ_i; the λ sweep of document and largest n-gram influence; with an ε sweep, influence
and utility against ε per λ; regurgitation; and the run's identity. For a data set: per λ (and
ε) the mean influence, utility against influence, the privacy–utility curves across ε, the
context-size curve and the mean profiles (τ_t per response step, τ_i per n-gram start, each
over the examples that have it).
τ_i = Σ_t |log p(y_t | D) − log p(y_t | D without n-gram i)| (Wu et al. 2025, context influence).
"""

from __future__ import annotations

import math
from pathlib import Path

from ctxlite.influence.analysis import LargestUnit, RealisedEpsilon, Summary, largest_units
from ctxlite.influence.results import Block, ExampleResult, LambdaResult, NgramInfluence, UnitInfluence
from ctxlite.reporting.page import Redactor, esc, heat_class, legend, page, table, verdict_html
from ctxlite.reporting.svg import line_plot
from ctxlite.runs.score import ScoreRun


def _eps_tag(eps: float | None, sep: str = ", ") -> str:
    """``", ε = 2"`` for a curve or heading of ε-bounded CID; ``""`` without an ε."""
    return "" if eps is None else f"{sep}ε = {eps:g}"


def _by_epsilon(items: list) -> dict:
    """Results (or summary entries) grouped by their ε, unbounded first, then by increasing ε."""
    groups: dict = {}
    for item in items:
        groups.setdefault(item.epsilon, []).append(item)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0.0)))


def _segments(ngrams: list[NgramInfluence]) -> list[tuple[int, int, NgramInfluence]]:
    """The context cut at every window boundary: (char start, char end, the covering window of
    largest τ_i) in order."""
    cuts = sorted({g.char_start for g in ngrams} | {g.char_end for g in ngrams})
    out = []
    for a, b in zip(cuts, cuts[1:]):
        cover = [g for g in ngrams if g.char_start <= a and b <= g.char_end]
        if cover:
            out.append((a, b, max(cover, key=lambda g: g.influence)))
    return out


def _floor_word(g: NgramInfluence | UnitInfluence) -> str:
    return {True: "above the noise floor", False: "within the noise floor", None: "no floor measured"}[g.above_noise]


def _count(n: int | None) -> str:
    return "n/a (this backend counts no tokens)" if n is None else str(n)


def _unmeasured(blocks: list[Block], ngrams: list[NgramInfluence]) -> list[tuple[int, int, Block]]:
    """Adaptive search: the parts of the context no measured n-gram covers, each with the smallest
    measured block holding it (its n-grams were not measured)."""
    covered = [(g.char_start, g.char_end) for g in ngrams]
    cuts = sorted({x for blk in blocks for x in (blk.char_start, blk.char_end)} | {x for c in covered for x in c})
    out = []
    for a, b in zip(cuts, cuts[1:]):
        if any(s <= a and b <= e for s, e in covered):
            continue
        holding = [blk for blk in blocks if blk.char_start <= a and b <= blk.char_end]
        if holding:
            out.append((a, b, min(holding, key=lambda blk: blk.end - blk.start)))
    return out


def page_scale(results: list[LambdaResult]) -> float:
    """The one colour scale of a page: its darkest step is the largest τ_i, τ_u or τ_t (all nats) of every
    example and λ on it, so equal shades mean equal influence anywhere on the page."""
    taus = [g.influence for r in results for g in r.ngrams]
    taus += [u.influence for r in results for u in r.units or ()]
    taus += [t for r in results for t in r.token_influence]
    return max(taus, default=0.0)


def _heatmap(ngrams: list[NgramInfluence], redact: Redactor, top: float, blocks: list[Block] = ()) -> str:
    """Shaded n-grams on the page's scale ``top``; with adaptive search also the unmeasured rest,
    dotted, each piece telling its block's τ_B."""
    spans = []
    for a, b, blk in _unmeasured(list(blocks), ngrams):
        tip = f"not measured as n-grams · in the block of tokens {blk.start}–{blk.end}, τ_B = {blk.influence:.4f} nats"
        body = esc(f"[{a}–{b}]") if redact.no_text else esc(blk.text[a - blk.char_start : b - blk.char_start])
        spans.append((a, f'<span class="tok unmeasured" tabindex="0" data-chars="{a} {b}" title="{tip}">{body}</span>'))
    for a, b, g in _segments(ngrams):
        piece = g.text[a - g.char_start : b - g.char_start]
        where = f"n-gram at tokens {g.start}–{g.start + g.n}, chars {g.char_start}–{g.char_end}"
        shown = redact(g.text, f"chars {g.char_start}–{g.char_end}")
        tip = f"τ_i = {g.influence:.4f} nats · {where} · {_floor_word(g)}\n{shown}"
        cls = f"tok {heat_class(g.influence, top)}" + (" above" if g.above_noise else "")
        body = esc(f"[{a}–{b}]") if redact.no_text else esc(piece)
        spans.append(
            (a, f'<span class="{cls}" tabindex="0" data-chars="{a} {b}" data-tip="{tip}" title="{tip}">{body}</span>')
        )
    spans.sort(key=lambda span: span[0])
    body = "".join(html for _, html in spans)
    return legend(top, "τ_i (nats)") + f'<div class="text" data-role="heatmap">{body}</div>'


def _unit_heatmap(units: list[UnitInfluence], redact: Redactor, top: float) -> str:
    """The context as its units, in reading order, each shaded by its τ_u on the page's scale ``top``
    (underlined when above the noise floor), hover or keyboard focus showing τ_u, where it lies and
    the floor verdict (and τ_pair with its near-duplicate); characters no unit holds (separators,
    text outside given spans) are not in the log and show as "…"."""
    out, at = [], None
    for u in sorted(units, key=lambda u: u.char_start):
        if at is not None and u.char_start > at:
            tip = f"characters {at}–{u.char_start}: in no unit (not in the log)"
            out.append(f'<span class="gap" title="{tip}">…</span>')
        at = u.char_end if at is None else max(at, u.char_end)
        where = f"tokens {u.token_start}–{u.token_end}, chars {u.char_start}–{u.char_end}"
        pair = "" if u.partner is None else f" · τ_pair = {u.pair_influence:.4f} nats with {u.partner}"
        tip = esc(f"{u.label}: τ_u = {u.influence:.4f} nats · {where} · {_floor_word(u)}{pair}")
        cls = f"tok {heat_class(u.influence, top)}" + (" above" if u.above_noise else "")
        body = redact(u.text, u.label)
        out.append(
            f'<span class="{cls}" tabindex="0" data-unit="{esc(u.label)}" data-chars="{u.char_start} {u.char_end}" '
            f'data-tip="{tip}" title="{tip}">{body}</span>'
        )
    return legend(top, "τ_u (nats)") + f'<div class="text" data-role="unit-heatmap">{" ".join(out)}</div>'


def _response_tokens(result: LambdaResult, redact: Redactor, top: float) -> str:
    """The response with each token shaded by its τ_t on the page's scale ``top`` (a result without
    token spans, from an older log: plain)."""
    text, spans, tau = result.response, result.response_token_chars, result.token_influence
    if redact.no_text or not spans or len(spans) != len(tau):
        return f'<div class="text">{redact(text, "response")}</div>'
    out = []
    for t, ((a, b), v) in enumerate(zip(spans, tau)):
        tip = f"token {t}: τ_t = {v:.4f} nats · PMI {result.token_pmi[t]:.4f}"
        out.append(
            f'<span class="tok {heat_class(v, top)}" tabindex="0" data-t="{t}" data-tip="{tip}" '
            f'title="{tip}">{esc(text[a:b])}</span>'
        )
    return legend(top, "τ_t (nats)") + f'<div class="text" data-role="response">{"".join(out)}</div>'


def _response(result: LambdaResult, redact: Redactor, top: float) -> str:
    tau = result.token_influence
    rows = [[t, v, result.token_pmi[t]] for t, v in enumerate(tau)]
    plot = line_plot(
        "Response-position profile: document-level influence of each response token",
        [("τ_t", list(range(len(tau))), tau)],
        "response token t",
        "τ_t (nats)",
    )
    return (
        "<h4>Response, shaded by τ_t</h4>"
        + _response_tokens(result, redact, top)
        + f"<figure>{plot}<figcaption>τ_t = |log p(y_t | D) − log p(y_t | ∅)|, summed to the document influence "
        f"{result.document_influence:.4f} nats</figcaption></figure>" + table(["t", "τ_t (nats)", "PMI"], rows)
    )


def _ngram_profile(result: LambdaResult, redact: Redactor) -> str:
    ngrams = result.ngrams
    if not ngrams:
        return '<p class="note">Document level only: no n-gram ablations were run.</p>'
    plot = line_plot(
        "N-gram-position profile: influence of each n-gram by its position in the context",
        [("τ_i", [g.start for g in ngrams], [g.influence for g in ngrams])],
        "n-gram start (token of D)",
        "τ_i (nats)",
    )
    rows = [
        [g.start, g.n, g.influence, _floor_word(g), redact(g.text, f"chars {g.char_start}–{g.char_end}")]
        for g in sorted(ngrams, key=lambda g: -g.influence)
    ]
    return f"<figure>{plot}</figure>" + table(["start", "n", "τ_i (nats)", "noise floor", "n-gram"], rows, left=0)


def _sweep(results: list[LambdaResult]) -> str:
    """Document and largest n-gram influence against λ: a pair of curves per ε (one pair without)."""
    groups = _by_epsilon(results)
    if max(len({r.lam for r in rs}) for rs in groups.values()) < 2:
        return ""
    series = []
    for eps, rs in groups.items():
        lams = [r.lam for r in rs]
        series.append((f"document influence{_eps_tag(eps)}", lams, [r.document_influence for r in rs]))
        series.append((f"largest τ_i{_eps_tag(eps)}", lams, [r.max_ngram_influence for r in rs]))
    plot = line_plot("Influence across the λ sweep", series, "λ", "nats")
    with_eps = any(eps is not None for eps in groups)
    head = ["λ", *(["ε"] if with_eps else []), "document influence", "largest τ_i"]
    rows = [
        [r.lam, *([_eps_cell(eps)] if with_eps else []), r.document_influence, r.max_ngram_influence]
        for eps, rs in groups.items()
        for r in rs
    ]
    return f"<h4>λ sweep</h4><figure>{plot}</figure>" + table(head, rows)


def _eps_cell(eps: float | None) -> object:
    return "none" if eps is None else eps


def _realised(result: LambdaResult) -> RealisedEpsilon | None:
    """The per-step bound 2·λ_t·max|pmi| one generated response had: mean and max (None if not generated)."""
    steps = (result.generation.realised_epsilon if result.generation is not None else None) or []
    if not steps:
        return None
    return RealisedEpsilon(sum(steps) / len(steps), max(steps), len(steps))


def _example_epsilon_points(results: list[LambdaResult]) -> list[dict]:
    """One example's results as points of the ε plots (whole contexts only)."""
    return [
        {
            "lam": r.lam,
            "epsilon": r.epsilon,
            "examples": 1,
            "influence": r.document_influence,
            "influence_ci": None,
            "utility": None if r.utility is None else r.utility.f,
            "utility_ci": None,
            "realised": _realised(r),
        }
        for r in results
        if r.context_size is None
    ]


def _summary_epsilon_points(summary: Summary) -> list[dict]:
    """The data set's summary entries as points of the ε plots (whole contexts only)."""
    return [
        {
            "lam": s.lam,
            "epsilon": s.epsilon,
            "examples": s.examples,
            "influence": s.document_influence.mean,
            "influence_ci": list(s.document_influence.ci),
            "utility": None if s.utility is None else s.utility.mean,
            "utility_ci": None if s.utility is None else list(s.utility.ci),
            "realised": s.realised_epsilon,
        }
        for s in summary
        if s.context_size is None
    ]


EPSILON_CAPTION = (
    "ε-bounded CID, a curve per λ: each step's λ_t = min(λ, ε / (2·max|pmi|)), so its realised ε "
    "(2·λ_t·max|pmi|, in the table) is at most ε"
)
UTILITY_CAPTION = "utility: ROUGE-L F of the response against the reference answer, a curve per λ"


def _per_lambda(points: list[dict], y: str) -> list[tuple[str, list, list]]:
    """A curve per λ through (ε, point[y]) in increasing ε."""
    by_lam: dict[float, list[dict]] = {}
    for p in sorted(points, key=lambda p: (p["lam"], p["epsilon"])):
        by_lam.setdefault(p["lam"], []).append(p)
    return [(f"λ = {lam:g}", [p["epsilon"] for p in ps], [p[y] for p in ps]) for lam, ps in by_lam.items()]


def _epsilon_sweep(points: list[dict], mean: bool) -> str:
    """Privacy–utility across ε: document influence and utility (ROUGE-L F) against the ε of
    ε-bounded CID, a curve per λ, each plot with its numbers in a table below it (the table alone
    while no λ has two ε); the realised per-step ε (≤ ε) in the influence table. ``mean``: the
    points are data-set means, with their CIs. Nothing when no point has an ε."""
    points = sorted((p for p in points if p["epsilon"] is not None), key=lambda p: (p["lam"], p["epsilon"]))
    if not points:
        return ""
    what = "Mean document influence" if mean else "Document influence"
    out = ["<h3>Privacy–utility across ε</h3>" if mean else "<h4>Privacy–utility across ε</h4>"]

    def ci(p, key):
        return list(p[key] or (None, None)) if mean else []

    series = _per_lambda(points, "influence")
    if max(len(xs) for _, xs, _ in series) > 1:
        plot = line_plot(f"{what} against ε", series, "ε of ε-bounded CID", "nats")
        out.append(f"<figure>{plot}<figcaption>{EPSILON_CAPTION}</figcaption></figure>")
    ci_head = ["95% CI low", "95% CI high"] if mean else []
    head = ["λ", "ε", "examples", what.lower(), *ci_head, "realised ε mean", "realised ε max"]
    rows = [
        [p["lam"], p["epsilon"], p["examples"], p["influence"], *ci(p, "influence_ci"), *_mean_max(p["realised"])]
        for p in points
    ]
    out.append(table(head, rows))
    useful = [p for p in points if p["utility"] is not None]
    if not useful:
        return "".join(out)
    series = _per_lambda(useful, "utility")
    if max(len(xs) for _, xs, _ in series) > 1:
        title = f"{'Mean utility' if mean else 'Utility'} against ε"
        plot = line_plot(title, series, "ε of ε-bounded CID", "ROUGE-L F")
        out.append(f"<figure>{plot}<figcaption>{UTILITY_CAPTION}</figcaption></figure>")
    head = ["λ", "ε", "mean ROUGE-L F" if mean else "ROUGE-L F", *ci_head, *(["examples"] if mean else [])]
    rows = [
        [p["lam"], p["epsilon"], p["utility"], *ci(p, "utility_ci"), *([p["examples"]] if mean else [])] for p in useful
    ]
    out.append(table(head, rows))
    return "".join(out)


def _mean_max(realised: RealisedEpsilon | None) -> list:
    return [None, None] if realised is None else [realised.mean, realised.max]


def example_anchor(index: int) -> str:
    """The ``id`` of the page's ``index``-th example (0-based): ``report.html#example-1`` links to the
    first. Built from the position, not the id, so no private text lands in a URL."""
    return f"example-{index + 1}"


def _example(key: str, result: ExampleResult, redact: Redactor, top: float, anchor: str) -> str:
    out = [f'<section id="{anchor}" data-example="{esc(key)}"><h2>Example {esc(key)} <a href="#{anchor}">#</a></h2>']
    out.append(f"<p>Query: {redact(result.query, 'query')} · {result.context_tokens} context tokens</p>")
    for r in result.results:
        floor = r.noise_floor
        eps = r.epsilon
        eps_attr = "" if eps is None else f' data-epsilon="{eps}"'
        floor_text = (
            "0 nats (0 null ablations)" if floor is None else f"{floor.max:.3g} nats ({len(floor.sums)} {floor.method})"
        )
        out.append(
            f'<h3 data-lambda="{r.lam}"{eps_attr}>λ = {r.lam:g}{_eps_tag(eps, " · ")}</h3>'
            f"<p>Document influence {r.document_influence:.4f} nats · largest τ_i "
            f"{r.max_ngram_influence:.4f} nats · noise floor {floor_text}</p>"
        )
        realised = _realised(r) if eps is not None else None
        if realised:
            out.append(
                f"<p>ε-bounded CID at ε = {eps:g}: realised per-step ε (2·λ_t·max|pmi|) mean "
                f"{realised.mean:.4g}, max {realised.max:.4g} over {realised.steps} steps</p>"
            )
        if r.utility is not None:
            u = r.utility
            out.append(
                f"<p>Utility against the reference answer: ROUGE-L F {u.f:.3f} "
                f"(precision {u.precision:.3f}, recall {u.recall:.3f})</p>"
            )
        search = r.search
        if search is not None and search.adaptive:
            out.append(
                f"<p>Adaptive search for the {search.top} largest τ_i: {search.ablations} ablations of "
                f"{search.windows} n-grams, {_count(search.tokens_decoded)} tokens decoded against "
                f"exhaustive search's {_count(search.exhaustive_tokens)}; dotted text was measured only as "
                "part of a block.</p>"
            )
        if r.units is not None:
            out.append(_units(r, redact))
            out.append("<h4>Context, shaded by τ_u</h4>" + _unit_heatmap(r.units, redact, top))
        if r.ngrams:
            blocks = (search.blocks if search is not None else None) or []
            out.append("<h4>Context, shaded by τ_i</h4>" + _heatmap(r.ngrams, redact, top, blocks))
        out.append(_response(r, redact, top))
        out.append("<h4>N-grams</h4>" + _ngram_profile(r, redact))
        if r.regurgitation is not None:
            reg = r.regurgitation.to_dict()
            out.append("<h4>Regurgitation</h4>" + table(["metric", "value"], [[esc(k), v] for k, v in reg.items()], 1))
    out.append(_sweep(result.results))
    out.append(_epsilon_sweep(_example_epsilon_points(result.results), mean=False))
    out.append("</section>")
    return "".join(out)


PAIR_FLOOR = {True: "above the noise floor", False: "within the noise floor", None: "no floor measured"}
"""How a τ_pair (or τ_cluster) stands against its result's noise floor (``UnitInfluence.pair_above_noise``,
``ClusterInfluence.above_noise``)."""


def _units(result: LambdaResult, redact: Redactor) -> str:
    """The units of one result, largest τ_u first: label, kind, text (redacted as the rest of the
    page), rank, τ_u, whether it stands above the noise floor, the characters (``*``: snapped to
    whole tokens, which removed more)."""
    rows = []
    for rank, u in enumerate(result.ranked_units(), 1):
        above = "-" if u.above_noise is None else ("yes" if u.above_noise else "no")
        chars = f"{u.char_start}–{u.char_end}" + ("*" if u.snapped else "")
        rows.append([esc(u.label), esc(u.kind), redact(u.text, u.label), rank, u.influence, above, chars])
    head = ["unit", "kind", "text", "rank", "τ_u (nats)", "above floor", "characters"]
    pairs = [
        f"<li>{esc(u.label)} with its near-duplicate {esc(u.partner)} (similarity {u.similarity:.2f}): "
        f"τ_pair {u.pair_influence:.2f} nats, {PAIR_FLOOR[u.pair_above_noise]}</li>"
        for u in result.ranked_units()
        if u.partner is not None
    ]
    pairs += [
        f"<li>{', '.join(esc(label) for label in c.units)} removed together (similarity ≥ {c.similarity:.2f}): "
        f"τ_cluster {c.influence:.2f} nats, {PAIR_FLOOR[c.above_noise]}</li>"
        for c in result.clusters
    ]
    note = "" if not pairs else '<ul data-role="pairs">' + "".join(pairs) + "</ul>"
    return (
        '<h4 data-role="units">Units, largest τ_u first</h4>' + table(head, rows, 3) + note + _descent(result, redact)
    )


def _descent(result: LambdaResult, redact: Redactor) -> str:
    """A hierarchical search's levels below the units: what it descended into, by which rule, and the
    sentences it measured, largest τ_u first (its n-grams are shaded in the context below)."""
    d = result.descent
    if d is None:
        return ""
    rows = []
    for rank, u in enumerate(d.ranked_sentences(), 1):
        chars = f"{u.char_start}–{u.char_end}" + ("*" if u.snapped else "")
        rows.append(
            [
                esc(u.label),
                esc(u.parent or "-"),
                redact(u.text, u.label),
                rank,
                u.influence,
                PAIR_FLOOR[u.above_noise],
                chars,
            ]
        )
    head = ["sentence", "in", "text", "rank", "τ_u (nats)", "noise floor", "characters"]
    into = " → ".join(esc(label) for label in d.into)
    said = (
        f'<p data-role="descent">Hierarchical search: descended into {into} ({esc(d.rule)}); '
        f"{len(result.ngrams)} of {d.windows} n-gram windows measured"
        f"{f' ({len(d.copy_windows)} for copy sources alone)' if d.copy_windows else ''}, each exactly; "
        "exhaustive n-gram search "
        f"would decode {_count(d.exhaustive_tokens)} tokens.</p>"
    )
    return said + (table(head, rows, 3) if rows else "")


def _summary(summary: Summary | None, largest: dict[str, LargestUnit] | None = None) -> str:
    """The data set's table (and plots); a unit run (``largest``, :func:`largest_units`) shows its
    largest τ_u with its example and unit where an n-gram run shows the n-gram max of mean."""
    if not summary:
        return ""
    rows = []
    for s in summary:
        d = s.document_influence
        top = (largest or {}).get(s.key)
        most = [s.ngram_influence.max_of_mean] if not largest else [
            None if top is None else top.influence,
            "-" if top is None else f"{esc(top.key)}: {esc(top.unit.label)}",
        ]  # fmt: skip
        rows.append([esc(s.key), s.examples, d.mean, d.ci[0], d.ci[1], *most])
    most_head = ["largest τ_u", "example: unit"] if largest else ["n-gram max of mean"]
    head = ["λ", "examples", "mean document influence", "95% CI low", "95% CI high", *most_head]
    out = "<h2>Data set</h2>" + table(head, rows, 1) + _tradeoff(summary) + _context_sizes(summary)
    # the λ sweep over whole contexts, a curve per ε (the context-size entries have their own plot)
    groups = _by_epsilon([s for s in summary if s.context_size is None])
    curves = {eps: sorted((s.lam, s.document_influence.mean) for s in ss) for eps, ss in groups.items()}
    if any(len(c) > 1 for c in curves.values()):
        with_eps = any(eps is not None for eps in curves)
        series = [
            ("mean" if eps is None else f"mean{_eps_tag(eps)}", [lam for lam, _ in c], [m for _, m in c])
            for eps, c in curves.items()
        ]
        head = ["λ", *(["ε"] if with_eps else []), "mean document influence"]
        rows = [[lam, *([_eps_cell(eps)] if with_eps else []), m] for eps, c in curves.items() for lam, m in c]
        out += (
            "<figure>"
            + line_plot("Mean document influence across λ", series, "λ", "nats")
            + "</figure>"
            + table(head, rows)
        )
    return out + _epsilon_sweep(_summary_epsilon_points(summary), mean=True) + _dataset_profiles(summary)


def _dataset_profiles(summary: Summary) -> str:
    """The data set's mean τ_t at each response step t and mean τ_i at each n-gram start, one line
    per λ (whole contexts only), each mean over the examples that have that position."""
    whole = sorted(
        (s for s in summary if s.context_size is None),
        key=lambda s: (s.lam, s.epsilon is not None, s.epsilon or 0.0),
    )
    response, ngram, why = {}, {}, []
    for s in whole:
        name = f"{s.lam:g}{_eps_tag(s.epsilon)}"  # "1.5", or "1.5, ε = 2"
        profile = s.response_position_profile
        response[name] = (list(range(len(profile))), profile)
        ngram[name] = (s.ngram_position_profile.starts, s.ngram_position_profile.means)
        why.append(s.ngram_influence.not_measured)
    reasons = "; ".join(dict.fromkeys(w for w in why if w))  # e.g. adaptive search: averages need every n-gram
    return (
        "<h3>Response-position profile</h3>"
        + _by_position("Mean τ_t at each response position", "response token t", "mean τ_t (nats)", response)
        + "<h3>N-gram-position profile</h3>"
        + _by_position("Mean τ_i at each n-gram start", "n-gram start (token of D)", "mean τ_i (nats)", ngram, reasons)
    )


def _by_position(title: str, x_label: str, y_label: str, curves: dict[str, tuple[list, list]], why: str = "") -> str:
    """A line per λ through (position, mean) and a table of a row per position, a column per λ
    (blank where that λ has no such position, n/a where its mean is None); if all are empty, a
    note saying so (and ``why``, when the summary says)."""
    curves = {lam: (xs, ys) for lam, (xs, ys) in curves.items() if xs}
    if not curves:
        return f'<p class="note" data-role="no-profile">Not measured in this run: {esc(why or "no values logged")}.</p>'
    series = [(f"λ = {lam}", xs, [math.nan if y is None else y for y in ys]) for lam, (xs, ys) in curves.items()]
    plot = line_plot(title, series, x_label, y_label)
    values = {lam: dict(zip(xs, ys)) for lam, (xs, ys) in curves.items()}
    positions = sorted({x for xs, _ in curves.values() for x in xs})

    def cell(lam: str, x) -> object:
        v = values[lam].get(x, "")
        return "n/a" if v is None else v

    rows = [[x, *(cell(lam, x) for lam in curves)] for x in positions]
    return f"<figure>{plot}</figure>" + table([x_label] + [f"λ = {lam}" for lam in curves], rows)


def _context_sizes(summary: Summary) -> str:
    """Mean document influence against the number of context tokens scored (keys "λ@k"), a curve per
    λ (and ε)."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for s in summary:
        if s.context_size is not None:
            name = f"{s.lam:g}{_eps_tag(s.epsilon)}"
            curves.setdefault(name, []).append((s.context_size, s.document_influence.mean))
    if not curves:
        return ""
    series = [(f"λ = {lam}", [k for k, _ in sorted(c)], [v for _, v in sorted(c)]) for lam, c in curves.items()]
    plot = line_plot("Document influence against context size", series, "context tokens scored (k)", "nats")
    rows = [[esc(lam), k, v] for lam, c in curves.items() for k, v in sorted(c)]
    return "<h3>Context size</h3><figure>" + plot + "</figure>" + table(["λ", "k", "mean document influence"], rows, 1)


def _tradeoff(summary: Summary) -> str:
    """Utility (ROUGE-L F against the reference answers) against influence across the λ sweep, a
    curve per ε of ε-bounded CID (one without)."""
    rows = [s for s in summary if s.utility is not None]
    if not rows:
        return ""
    groups = _by_epsilon(rows)
    order = [id(s) for ss in groups.values() for s in ss]  # the entries of each ε together, in summary order
    rows.sort(key=lambda s: order.index(id(s)))
    table_rows = [
        [esc(s.key), s.document_influence.mean, s.utility.mean, *s.utility.ci, s.utility.examples] for s in rows
    ]
    out = "<h3>Privacy–utility across λ</h3>"
    if len(rows) > 1:
        series = [
            (
                f"λ sweep{_eps_tag(eps)}",
                [s.document_influence.mean for s in ss],
                [s.utility.mean for s in ss],
            )
            for eps, ss in groups.items()
        ]
        plot = line_plot("Utility against influence across λ", series, "mean document influence (nats)", "ROUGE-L F")
        out += (
            f"<figure>{plot}<figcaption>one point per λ, in the order of the table"
            + (", a curve per ε" if len(groups) > 1 else "")
            + "</figcaption></figure>"
        )
    head = ["λ", "mean document influence", "mean ROUGE-L F", "95% CI low", "95% CI high", "examples"]
    return out + table(head, table_rows, 1)


def flatten(d: dict, prefix: str = "") -> list[tuple[str, str]]:
    """Nested identity fields as (dotted key, value) rows."""
    rows = []
    for k, v in d.items():
        if isinstance(v, dict):
            rows.extend(flatten(v, f"{prefix}{k}."))
        else:
            rows.append((f"{prefix}{k}", v if isinstance(v, (int, float, str, type(None))) else str(v)))
    return rows


def identity_table(identity: dict, redact: Redactor) -> str:
    """The run identity as an HTML table, one row per dotted field; the template, format and chat text go
    through ``redact`` (shown only by position, length and hash under ``--no-text``)."""
    rows = []
    for k, v in flatten(identity):
        text = "" if v is None else str(v)
        private = k.startswith("template") or k.startswith("format") or k.startswith("chat")
        rows.append([esc(k), redact(text, k) if private else esc(text)])
    return "<h2>Run identity</h2>" + table(["field", "value"], rows, left=2)


def _contents(keys: list[str]) -> str:
    """Links to every example's anchor."""
    links = " · ".join(f'<a href="#{example_anchor(i)}">{esc(k)}</a>' for i, k in enumerate(keys))
    return f'<nav data-role="contents"><p>Examples: {links}</p></nav>' if len(keys) > 1 else ""


def score_html(run: ScoreRun, no_text: bool = False) -> str:
    """The report of a score run read from its log (:func:`ctxlite.runs.report_log`), finished or
    partial: the gate's verdict on top, then one colour scale for the whole page
    (:func:`page_scale`) in its legend, links to each example's anchor, the summary (of a finished
    run) and the examples."""
    redact = Redactor(no_text)
    name = Path(run.log.path).name
    keys, results = run.keys, run.results
    top = page_scale([r for rec in results for r in rec.results])
    parts = [f"<h1>ctxlite score report: {esc(name)}</h1>", verdict_html(run.verdict)]
    parts.append(
        '<div data-role="scale"><p class="note">One colour scale for the whole page: the darkest step is the '
        f"largest influence on it, {top:.4g} nats; τ_i, τ_u and τ_t are shaded alike.</p>"
        + legend(top, "τ_i, τ_u, τ_t (nats)")
        + "</div>"
    )
    parts.append(_contents(keys))
    if not run.complete:
        parts.append(
            f'<p class="note" data-partial="1">Partial run: {len(keys)} example(s) finished; it did not end.</p>'
        )
    if no_text:
        parts.append('<p class="note">--no-text: private text is replaced by its position, length and hash.</p>')
    parts.append(_summary(run.summary if run.complete else None, largest_units(keys, results)))
    for i, (key, result) in enumerate(zip(keys, results)):
        parts.append(_example(key, result, redact, top, example_anchor(i)))
    parts.append(identity_table(run.identity, redact))
    return page(f"ctxlite score report: {name}", "".join(parts))


__all__ = ["score_html", "identity_table", "flatten"]
