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


def summarize(records: Iterable[dict], confidence: float = 0.95) -> dict:
    """Per-λ dataset summary of example records (``ExampleResult.to_dict()`` output).

    Keys are ``"λ"``, or ``"λ@k"`` for results scored on the first k context
    tokens (the context-size analysis).
    """
    by_lam: dict[tuple, list[dict]] = defaultdict(list)
    for rec in records:
        for res in rec["results"]:
            size = res.get("context_size")
            by_lam[(res["lam"], -1 if size is None else size)].append(res)
    out = {}
    for (lam, size), results in sorted(by_lam.items()):
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
        key = str(lam) if size == -1 else f"{lam}@{size}"
        out[key] = {
            "lam": lam,
            "context_size": None if size == -1 else size,
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


def score_table(keys: Sequence[str], records: Sequence[dict], width: int = 36, ansi: bool | None = None) -> str:
    """A readable table of example records: per example and λ, the document influence, the largest
    n-gram influence τ_i with its character span and text, the noise floor, and how many n-grams
    stand above it (``-`` where a value was not measured, e.g. ``--doc`` or no null ablations);
    then the top spans marked in their context, in reverse video when ``ansi`` (default: when stdout
    is a terminal), else in brackets."""

    def num(v) -> str:
        return "-" if v is None else f"{v:.2f}"

    rows = [("example", "λ", "tokens", "doc τ", "max τ_i", "floor", "above", "top n-gram (chars: text)")]
    for key, rec in zip(keys, records):
        for r in rec["results"]:
            lam = f"{r['lam']:g}" + ("" if r.get("context_size") is None else f"@{r['context_size']}")
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
                (key, lam, str(r.get("context_tokens", "-")), num(r["document_influence"]),
                 num(max((g["influence"] for g in grams), default=None)), num(floor), above, span)
            )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join([*cells, row[-1]]))
    ansi = sys.stdout.isatty() if ansi is None else ansi
    return "\n".join(lines + top_spans_block(keys, records, ansi=ansi))
