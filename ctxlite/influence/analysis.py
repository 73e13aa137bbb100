"""Dataset-level summaries of context influence (the analyses of Flemings et al., ACL 2025).

Works on :class:`~ctxlite.influence.results.ExampleResult` objects (a run's, or a log's read back
with ``from_dict``), so a summary can be recomputed from a (resumed) result log without the model;
the summary itself is a typed :class:`Summary` with its log form (``to_dict``/``from_dict``).

- dataset value: mean over examples of the response influence, with a
  percentile-bootstrap confidence interval;
- n-gram "max influence": the per-start-position mean of τ_i over the
  examples that have that position, maximised over positions;
- response-position profile: mean document-level τ_t at each response step t;
- n-gram-position profile: mean τ_i at each n-gram start position;
- regurgitation: Repeat and Rouge counts and rates.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ctxlite.errors import InvalidParameter
from ctxlite.influence.results import ExampleResult, LambdaResult, NgramInfluence, UnitInfluence


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


def start_means(ngram_lists: Iterable[Sequence[NgramInfluence]]) -> PositionProfile:
    """Mean τ_i per n-gram start token over the examples that have an n-gram there.

    Grouped by the start offset in D (not by list index), so the tail window of
    a short context is not averaged with another offset of a longer one.
    """
    sums: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    for grams in ngram_lists:
        for g in grams:
            sums[g.start] += g.influence
            counts[g.start] += 1
    starts = sorted(sums)
    return PositionProfile(starts, [sums[s] / counts[s] for s in starts])


def summary_key(lam: float, context_size: int | None = None, epsilon: float | None = None) -> str:
    """The key of a summary entry: ``"λ"``, ``"λ@k"`` for the first k context tokens, and
    ``"/eps=ε"`` appended for ε-bounded CID (numbers as Python's ``str`` writes floats):
    ``"1.5"``, ``"1.5@32"``, ``"1.5/eps=2.0"``, ``"1.5@32/eps=2.0"``."""
    key = str(lam) if context_size is None else f"{lam}@{context_size}"
    return key if epsilon is None else f"{key}/eps={epsilon}"


@dataclass
class PositionProfile:
    """Mean τ_i at each n-gram start token (``starts``, increasing), over the examples that have one."""

    starts: list[int]
    means: list[float]

    def to_dict(self) -> dict:
        return {"starts": list(self.starts), "means": list(self.means)}

    @classmethod
    def from_dict(cls, d: dict) -> PositionProfile:
        return cls(list(d["starts"]), list(d["means"]))


@dataclass
class MeanWithCI:
    """A mean over the examples with its percentile-bootstrap interval ``ci`` at ``confidence``
    (``std``: the values' standard deviation, where the summary gives it; ``examples``: how many
    values, where not every example has one)."""

    mean: float
    ci: tuple[float, float]
    confidence: float
    std: float | None = None
    examples: int | None = None
    metric: str | None = None

    def to_dict(self) -> dict:
        out = {"metric": self.metric} if self.metric is not None else {}
        out.update(mean=self.mean)
        if self.std is not None:
            out["std"] = self.std
        out.update(ci=list(self.ci), confidence=self.confidence)
        if self.examples is not None:
            out["examples"] = self.examples
        return out

    @classmethod
    def from_dict(cls, d: dict) -> MeanWithCI:
        lo, hi = d["ci"]
        return cls(d["mean"], (lo, hi), d["confidence"], d.get("std"), d.get("examples"), d.get("metric"))


@dataclass
class NgramSummary:
    """n-gram influence over the data set: the mean τ_i of every n-gram, the largest per-start
    mean (``max_of_mean``, at ``max_of_mean_position``) and the fraction of n-grams above their
    noise floor; None where no n-gram was measured, with ``not_measured`` saying why where a
    search skipped n-grams (averages need them all)."""

    mean: float | None
    max_of_mean: float | None
    max_of_mean_position: int | None
    fraction_above_noise: float | None
    not_measured: str | None = None

    def to_dict(self) -> dict:
        out = {
            "mean": self.mean,
            "max_of_mean": self.max_of_mean,
            "max_of_mean_position": self.max_of_mean_position,
            "fraction_above_noise": self.fraction_above_noise,
        }
        if self.not_measured is not None:
            out["not_measured"] = self.not_measured
        return out

    @classmethod
    def from_dict(cls, d: dict) -> NgramSummary:
        return cls(
            d["mean"], d["max_of_mean"], d["max_of_mean_position"], d["fraction_above_noise"], d.get("not_measured")
        )


@dataclass
class RealisedEpsilon:
    """The per-step bound 2·λ_t·max_v |pmi_D(v)| generated responses had (≤ ε under ε-bounded CID):
    its mean and max over ``steps`` steps."""

    mean: float
    max: float
    steps: int

    def to_dict(self) -> dict:
        return {"mean": self.mean, "max": self.max, "steps": self.steps}

    @classmethod
    def from_dict(cls, d: dict) -> RealisedEpsilon:
        return cls(d["mean"], d["max"], d["steps"])


@dataclass
class RegurgitationCounts:
    """How many responses Repeat and Rouge flag, and the rates."""

    repeat: int
    rouge: int
    repeat_rate: float
    rouge_rate: float

    def to_dict(self) -> dict:
        return {
            "repeat": self.repeat,
            "rouge": self.rouge,
            "repeat_rate": self.repeat_rate,
            "rouge_rate": self.rouge_rate,
        }

    @classmethod
    def from_dict(cls, d: dict) -> RegurgitationCounts:
        return cls(d["repeat"], d["rouge"], d["repeat_rate"], d["rouge_rate"])


@dataclass
class SummaryEntry:
    """The data set's summary at one λ, context size and ε (module docstring)."""

    lam: float
    context_size: int | None
    epsilon: float | None
    context_tokens_mean: float
    examples: int
    document_influence: MeanWithCI
    ngram_influence: NgramSummary
    noise_floor_max_mean: float | None
    response_position_profile: list[float]
    ngram_position_profile: PositionProfile
    utility: MeanWithCI | None
    realised_epsilon: RealisedEpsilon | None
    regurgitation: RegurgitationCounts

    @property
    def key(self) -> str:
        return summary_key(self.lam, self.context_size, self.epsilon)

    @property
    def label(self) -> str:
        """``1.5``, or ``1.5@32`` for the first 32 context tokens."""
        return f"{self.lam:g}" + ("" if self.context_size is None else f"@{self.context_size}")

    @property
    def name(self) -> str:
        """``λ=1.5``, ``λ=1.5@32``, ``λ=1.5 ε=2``: the entry's name in one line of text."""
        return f"λ={self.label}" + ("" if self.epsilon is None else f" ε={self.epsilon:g}")

    def to_dict(self) -> dict:
        return {
            "lam": self.lam,
            "context_size": self.context_size,
            "epsilon": self.epsilon,
            "context_tokens_mean": self.context_tokens_mean,
            "examples": self.examples,
            "document_influence": self.document_influence.to_dict(),
            "ngram_influence": self.ngram_influence.to_dict(),
            "noise_floor_max_mean": self.noise_floor_max_mean,
            "response_position_profile": list(self.response_position_profile),
            "ngram_position_profile": self.ngram_position_profile.to_dict(),
            "utility": None if self.utility is None else self.utility.to_dict(),
            "realised_epsilon": None if self.realised_epsilon is None else self.realised_epsilon.to_dict(),
            "regurgitation": self.regurgitation.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> SummaryEntry:
        return cls(
            d["lam"],
            d["context_size"],
            d["epsilon"],
            d["context_tokens_mean"],
            d["examples"],
            MeanWithCI.from_dict(d["document_influence"]),
            NgramSummary.from_dict(d["ngram_influence"]),
            d["noise_floor_max_mean"],
            list(d["response_position_profile"]),
            PositionProfile.from_dict(d["ngram_position_profile"]),
            None if d["utility"] is None else MeanWithCI.from_dict(d["utility"]),
            None if d["realised_epsilon"] is None else RealisedEpsilon.from_dict(d["realised_epsilon"]),
            RegurgitationCounts.from_dict(d["regurgitation"]),
        )


@dataclass
class Summary:
    """A data set's summary: one :class:`SummaryEntry` per λ, context size and ε, ordered by λ,
    then k (whole contexts first), then ε (unbounded first); its log form maps each entry's
    :func:`summary_key` to the entry."""

    entries: list[SummaryEntry]

    def __iter__(self) -> Iterator[SummaryEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, key: str) -> SummaryEntry:
        for entry in self.entries:
            if entry.key == key:
                return entry
        raise KeyError(key)

    def keys(self) -> list[str]:
        return [e.key for e in self.entries]

    def to_dict(self) -> dict:
        return {e.key: e.to_dict() for e in self.entries}

    @classmethod
    def from_dict(cls, d: dict) -> Summary:
        return cls([SummaryEntry.from_dict(v) for v in d.values()])


def summarize(records: Iterable[ExampleResult], confidence: float = 0.95) -> Summary:
    """Dataset summary of example results, one entry per λ, context size and ε of ε-bounded CID.

    Entries are keyed ``summary_key(λ, k, ε)`` in the log: ``"λ"``; ``"λ@k"`` for results scored
    on the first k context tokens (the context-size analysis); either with ``"/eps=ε"`` appended
    for responses generated with ε-bounded CID at that ε (``"1.5/eps=2.0"``). A given response, or
    one of unbounded CID, has no ε part. Each entry also holds ``lam``, ``context_size`` and
    ``epsilon``, so a consumer never parses a key.
    """
    groups: dict[tuple, list[LambdaResult]] = defaultdict(list)
    for rec in records:
        for res in rec.results:
            size, eps = res.context_size, res.epsilon
            groups[(res.lam, -1 if size is None else size, -1.0 if eps is None else eps)].append(res)
    entries = []
    for (lam, size, eps), results in sorted(groups.items(), key=lambda kv: kv[0]):
        size, eps = (None if size == -1 else size), (None if eps == -1.0 else eps)
        doc = [r.document_influence for r in results]
        # adaptive search measured only the n-grams it chose: averages over them would be biased
        adaptive = sum((r.search is not None and r.search.adaptive) or r.descent is not None for r in results)
        measured = [] if adaptive else results
        ngram_profile = start_means(r.ngrams for r in measured)
        all_grams = [g for r in measured for g in r.ngrams]
        flagged = [g.above_noise for g in all_grams if g.above_noise is not None]
        floors = [r.noise_floor.max for r in results if r.noise_floor is not None]
        reg = [r.regurgitation for r in results if r.regurgitation is not None]
        lo, hi = bootstrap_ci(doc, confidence)
        means = ngram_profile.means
        not_measured = (
            f"{adaptive} result(s) of adaptive search, which measures only the n-grams it chooses: n-gram "
            "averages need every n-gram (--search exhaustive)"
            if adaptive
            else None
        )
        entries.append(
            SummaryEntry(
                lam=lam,
                context_size=size,
                epsilon=eps,
                context_tokens_mean=float(np.mean([r.context_tokens for r in results])),
                examples=len(results),
                document_influence=MeanWithCI(float(np.mean(doc)), (lo, hi), confidence, std=float(np.std(doc))),
                ngram_influence=NgramSummary(
                    float(np.mean([g.influence for g in all_grams])) if all_grams else None,
                    max(means) if means else None,
                    ngram_profile.starts[int(np.argmax(means))] if means else None,
                    float(np.mean(flagged)) if flagged else None,
                    not_measured,
                ),
                noise_floor_max_mean=float(np.mean(floors)) if floors else None,
                response_position_profile=position_means(r.token_influence for r in results),
                ngram_position_profile=ngram_profile,
                utility=_utility(results, confidence),
                realised_epsilon=_realised(results),
                regurgitation=RegurgitationCounts(
                    sum(r.repeat for r in reg),
                    sum(r.rouge for r in reg),
                    float(np.mean([r.repeat for r in reg])) if reg else 0.0,
                    float(np.mean([r.rouge for r in reg])) if reg else 0.0,
                ),
            )
        )
    return Summary(entries)


@dataclass(frozen=True)
class LargestUnit:
    """The unit of largest τ_u at one summary key, over a unit run's examples: its example's ``key``."""

    influence: float
    key: str
    unit: UnitInfluence


def largest_units(keys: Sequence[str], records: Iterable[ExampleResult]) -> dict[str, LargestUnit]:
    """Per summary key (:func:`summary_key`), the unit of largest τ_u over the examples (the first
    in example order on a tie); empty for an n-gram run, whose summary has its n-gram figures
    instead (a unit run measures no n-gram: its ``ngram_influence`` is null)."""
    out: dict[str, LargestUnit] = {}
    for key, rec in zip(keys, records):
        for r in rec.results:
            for u in r.units or ():
                k = summary_key(r.lam, r.context_size, r.epsilon)
                if k not in out or u.influence > out[k].influence:
                    out[k] = LargestUnit(u.influence, key, u)
    return out


def _utility(results: list[LambdaResult], confidence: float) -> MeanWithCI | None:
    """Mean ROUGE-L F of the responses that have a reference answer, with its bootstrap CI."""
    f = [r.utility.f for r in results if r.utility is not None]
    if not f:
        return None
    lo, hi = bootstrap_ci(f, confidence)
    return MeanWithCI(float(np.mean(f)), (lo, hi), confidence, examples=len(f), metric="rouge_l_f")


def _realised(results: list[LambdaResult]) -> RealisedEpsilon | None:
    """The per-step bound 2·λ_t·max_v |pmi_D(v)| the generated responses actually had (≤ ε under
    ε-bounded CID): its mean and max over every step of every response, or None without any."""
    steps = [v for r in results if r.generation is not None for v in r.generation.realised_epsilon or ()]
    if not steps:
        return None
    return RealisedEpsilon(float(np.mean(steps)), float(np.max(steps)), len(steps))
