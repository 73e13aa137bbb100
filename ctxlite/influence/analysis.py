"""Dataset-level summaries of context influence (the analyses of Flemings et al., ACL 2025).

Works on the JSON records ``ExampleResult.to_dict()`` writes, so a summary can
be recomputed from a (resumed) result log without the model.

- dataset value: mean over examples of the response influence, with a
  percentile-bootstrap confidence interval;
- n-gram "max influence": the per-start-position mean of τ_i over the
  examples that have that position, maximised over positions;
- response-position profile: mean document-level τ_t at each response step t;
- n-gram-position profile: mean τ_i at each n-gram start position;
- regurgitation: Repeat and Rouge counts and rates.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from ctxlite.errors import InvalidParameter
from ctxlite.reporting.labels import epsilon_label, lambda_label, result_epsilon
from ctxlite.reporting.terminal import printable, top_spans_block


def bootstrap_ci(
    values: Sequence[float], confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (degenerate for fewer than 2 values)."""
    x = np.asarray(values, dtype=float)
    if not 0 < confidence < 1:
        raise InvalidParameter(f"confidence must be in (0, 1), got {confidence}")
    if len(x) == 0:
        return (float("nan"), float("nan"))
    if len(x) == 1:
        return (float(x[0]), float(x[0]))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    a = (1 - confidence) / 2
    return (float(np.quantile(means, a)), float(np.quantile(means, 1 - a)))


def position_means(rows: Iterable[Sequence[float]]) -> list[float]:
    """Mean at each index over the rows long enough to have it (ragged rows)."""
    sums: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    for row in rows:
        for i, v in enumerate(row):
            sums[i] += v
            counts[i] += 1
    return [sums[i] / counts[i] for i in range(len(sums))]


def start_means(ngram_lists: Iterable[Sequence[dict]]) -> dict:
    """Mean τ_i per n-gram start token over the examples that have an n-gram there.

    Grouped by the start offset in D (not by list index), so the tail window of
    a short context is not averaged with another offset of a longer one.
    """
    sums: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    for grams in ngram_lists:
        for g in grams:
            sums[g["start"]] += g["influence"]
            counts[g["start"]] += 1
    starts = sorted(sums)
    return {"starts": starts, "means": [sums[s] / counts[s] for s in starts]}


def summary_key(lam: float, context_size: int | None = None, epsilon: float | None = None) -> str:
    """The key of a ``summarize`` entry: ``"λ"``, ``"λ@k"`` for the first k context tokens, and
    ``"/eps=ε"`` appended for ε-bounded CID (numbers as Python's ``str`` writes floats):
    ``"1.5"``, ``"1.5@32"``, ``"1.5/eps=2.0"``, ``"1.5@32/eps=2.0"``."""
    key = str(lam) if context_size is None else f"{lam}@{context_size}"
    return key if epsilon is None else f"{key}/eps={epsilon}"


def summarize(records: Iterable[dict], confidence: float = 0.95) -> dict:
    """Dataset summary of example records (``ExampleResult.to_dict()`` output), one entry per λ,
    context size and ε of ε-bounded CID.

    Keys are ``summary_key(λ, k, ε)``: ``"λ"``; ``"λ@k"`` for results scored on the first k
    context tokens (the context-size analysis); either with ``"/eps=ε"`` appended for responses
    generated with ε-bounded CID at that ε (``"1.5/eps=2.0"``). A given response, or one of
    unbounded CID, has no ε part. Each entry also holds ``lam``, ``context_size`` and
    ``epsilon`` (None where absent), so a consumer never parses a key. Entries are ordered by λ,
    then k (whole contexts first), then ε (unbounded first).
    """
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for rec in records:
        for res in rec["results"]:
            size, eps = res.get("context_size"), result_epsilon(res)
            groups[(res["lam"], -1 if size is None else size, -1.0 if eps is None else eps)].append(res)
    out = {}
    for (lam, size, eps), results in sorted(groups.items()):
        size, eps = (None if size == -1 else size), (None if eps == -1.0 else eps)
        doc = [r["document_influence"] for r in results]
        # adaptive search measured only the n-grams it chose: averages over them would be biased
        adaptive = sum((r.get("search") or {}).get("method") == "adaptive" for r in results)
        measured = [] if adaptive else results
        ngram_profile = start_means(r["ngrams"] for r in measured)
        all_grams = [g for r in measured for g in r["ngrams"]]
        flagged = [g["above_noise"] for g in all_grams if g.get("above_noise") is not None]
        floors = [r["noise_floor"]["max"] for r in results if r.get("noise_floor")]
        reg = [r["regurgitation"] for r in results]
        lo, hi = bootstrap_ci(doc, confidence)
        out[summary_key(lam, size, eps)] = {
            "lam": lam,
            "context_size": size,
            "epsilon": eps,
            "context_tokens_mean": float(np.mean([r.get("context_tokens", 0) for r in results])),
            "examples": len(results),
            "document_influence": {
                "mean": float(np.mean(doc)),
                "std": float(np.std(doc)),
                "ci": [lo, hi],
                "confidence": confidence,
            },
            "ngram_influence": {
                "mean": float(np.mean([g["influence"] for g in all_grams])) if all_grams else None,
                "max_of_mean": max(ngram_profile["means"]) if ngram_profile["means"] else None,
                "max_of_mean_position": ngram_profile["starts"][int(np.argmax(ngram_profile["means"]))]
                if ngram_profile["means"]
                else None,
                "fraction_above_noise": float(np.mean(flagged)) if flagged else None,
                **(
                    {
                        "not_measured": f"{adaptive} result(s) of adaptive search, which measures only the "
                        "n-grams it chooses: n-gram averages need every n-gram (--search exhaustive)"
                    }
                    if adaptive
                    else {}
                ),
            },
            "noise_floor_max_mean": float(np.mean(floors)) if floors else None,
            "response_position_profile": position_means(r["token_influence"] for r in results),
            "ngram_position_profile": ngram_profile,
            "utility": _utility(results, confidence),
            "realised_epsilon": _realised(results),
            "regurgitation": {
                "repeat": sum(r["repeat"] for r in reg),
                "rouge": sum(r["rouge"] for r in reg),
                "repeat_rate": float(np.mean([r["repeat"] for r in reg])),
                "rouge_rate": float(np.mean([r["rouge"] for r in reg])),
            },
        }
    return out


def _utility(results: list[dict], confidence: float) -> dict | None:
    """Mean ROUGE-L F of the responses that have a reference answer, with its bootstrap CI."""
    f = [r["utility"]["f"] for r in results if r.get("utility")]
    if not f:
        return None
    lo, hi = bootstrap_ci(f, confidence)
    return {
        "metric": "rouge_l_f",
        "mean": float(np.mean(f)),
        "ci": [lo, hi],
        "confidence": confidence,
        "examples": len(f),
    }


def _realised(results: list[dict]) -> dict | None:
    """The per-step bound 2·λ_t·max_v |pmi_D(v)| the generated responses actually had (≤ ε under
    ε-bounded CID): its mean and max over every step of every response, or None without any."""
    steps = [v for r in results for v in (r.get("generation") or {}).get("realised_epsilon") or ()]
    if not steps:
        return None
    return {"mean": float(np.mean(steps)), "max": float(np.max(steps)), "steps": len(steps)}


def score_table(keys: Sequence[str], records: Sequence[dict], width: int = 36, ansi: bool | None = None) -> str:
    """A readable table of example records: per example and λ (and ε, in a column of its own when
    some result has one), the document influence, the largest
    n-gram influence τ_i with its character span and text, the noise floor, and how many n-grams
    stand above it (``-`` where a value was not measured, e.g. ``--doc`` or ``--null-ablations 0``);
    then the top spans marked in their context, in reverse video when ``ansi`` (default: when stdout
    is a terminal), else in brackets."""

    def num(v) -> str:
        return "-" if v is None else f"{v:.2f}"

    with_eps = any(result_epsilon(r) is not None for rec in records for r in rec["results"])
    eps_head = ("ε",) if with_eps else ()
    rows = [("example", "λ", *eps_head, "tokens", "doc τ", "max τ_i", "floor", "above", "top n-gram (chars: text)")]
    for key, rec in zip(keys, records):
        for r in rec["results"]:
            name = (lambda_label(r), epsilon_label(r) or "-") if with_eps else (lambda_label(r),)
            grams = r.get("ngrams") or []
            flags = [g.get("above_noise") for g in grams]
            above = "-" if not grams or None in flags else f"{sum(flags)}/{len(grams)}"
            top = max(grams, key=lambda g: g["influence"], default=None)
            span = "-"
            if top is not None:
                text = printable(top["text"])
                text = text if len(text) <= width else text[: width - 1] + "…"
                span = f"{top['char_start']}–{top['char_end']}: {text}"
            floor = (r.get("noise_floor") or {}).get("max")
            rows.append(
                (printable(key), *name, str(r.get("context_tokens", "-")), num(r["document_influence"]),
                 num(max((g["influence"] for g in grams), default=None)), num(floor), above, span)
            )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join([*cells, row[-1]]))
    ansi = sys.stdout.isatty() if ansi is None else ansi
    return "\n".join(lines + top_spans_block(keys, records, ansi=ansi))
