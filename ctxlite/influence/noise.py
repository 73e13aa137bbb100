"""The noise floor of context influence: how far rounding alone moves τ_i.

llama.cpp's CPU kernels round by batch shape and by build: the same model and input give τ_i
that differ by up to ~2 nats between an AVX-512 and an AVX2 build, or between ``n_ubatch`` 37 and
512 on one machine (docs/noise-floor.md). The prefix-reuse path is canonical by
construction (it equals a from-scratch decode bit for bit), so re-decoding an unchanged suffix in
the *same* tiling reads exactly 0 and measures nothing of that.

The floor is measured with **probes**: decodes the run already made, repeated in *another batch
tiling* (``ctxlite.runtime.backend.Tiling``: another restart alignment and another micro-batch),
in pairs at a span s of the run: the full prompt re-decoded from s's start (a null probe,
δ_t = ã_t − a_t against the base a) and s's ablation re-decoded (δ_t = b̃_t − b_t). For the base
a, an ablation b_i and any other rounding a', b'_i of them,

    |τ'_i − τ_i| = |Σ_t |a'_t − b'_{i,t}| − |a_t − b_{i,t}|| ≤ Σ_t |a'_t − a_t| + |b'_{i,t} − b_{i,t}|

(triangle inequality). The floor estimates that right-hand side with one rounding scale per
response token, r_t = max over the probes of |δ_t| (base and ablations are the same
computation on almost the same input, so their rounding is of one size at one token):

    floor = 2 Σ_t r_t

It is an **estimate**, not a bound: another build's rounding is not one of the probes', and a
probe can reproduce the canonical bits by chance (several probes with different tilings make
that unlikely to matter). Its coverage against a second build is measured, not assumed
(bench/bench_floor.py). The probes are put at the spans of latest start, where a re-decode is
shortest, as many pairs as fit in ``BUDGET`` of the run's decoded tokens (at least
``MIN_PAIRS``, at most the ``null_ablations`` setting).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ctxlite.runtime.backend import Tiling

TILINGS = (Tiling(7, 37), Tiling(3, 23), Tiling(13, 29), Tiling(9, 41), Tiling(5, 19), Tiling(11, 31))
"""One tiling per probe, cycled: odd restart offsets (mod 16) and odd micro-batch sizes, all
different, so no two probes group the rows alike and none groups them as the canonical decode."""

BUDGET = 0.10
"""The share of the run's decoded tokens (the base and the ablations of the first pass) the probes
may take, beyond ``MIN_PAIRS``."""

MIN_PAIRS = 2
"""Probe pairs every floor gets (fewer only when ``null_ablations`` asks for fewer)."""

RETILED = "retiled probes"
"""The ``method`` of a floor measured by probes in other batch tilings (an older log's floor of null
ablations re-decoded in the canonical tiling reads ``"null ablations"``, :mod:`ctxlite.logformat`)."""


@dataclass
class NoiseFloor:
    """The measured rounding of one result (one λ of one response).

    ``split_points``: the context offset (start of the probed span) of each probe; ``kinds``:
    ``"null"`` or ``"ablation"``; ``sums``: Σ_t |δ_t| of each probe; ``per_token``: r_t, the
    largest |δ_t| over the probes at each response token. ``max`` is the floor, 2 Σ_t r_t, the
    value every τ_i is compared against (the name is kept from the null-ablation floor, which
    was the max of the null ablations' sums, so that older readers still find it).
    """

    split_points: list[int]
    sums: list[float]
    per_token: list[float] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    method: str = RETILED

    @property
    def max(self) -> float:
        if self.per_token:
            return 2.0 * float(sum(self.per_token))
        return max(self.sums) if self.sums else 0.0  # a floor of null ablations only (ctxlite.logformat)

    @property
    def mean(self) -> float:
        """The mean Σ_t |δ_t| of one probe."""
        return float(np.mean(self.sums)) if self.sums else 0.0

    def to_dict(self) -> dict:
        """The log form: the probes, and the floor's ``mean`` and ``max`` for readers of the JSON."""
        return {
            "split_points": list(self.split_points),
            "sums": list(self.sums),
            "per_token": list(self.per_token),
            "kinds": list(self.kinds),
            "method": self.method,
            "mean": self.mean,
            "max": self.max,
        }

    @classmethod
    def from_dict(cls, d: dict) -> NoiseFloor:
        """The inverse of :meth:`to_dict` (``mean`` and ``max`` are computed again, not read)."""
        return cls(list(d["split_points"]), list(d["sums"]), list(d["per_token"]), list(d["kinds"]), d["method"])


def floor_from_probes(split_points: Sequence[int], kinds: Sequence[str], deltas: Sequence[np.ndarray]) -> NoiseFloor:
    """The floor of one result from its probes' per-token differences δ (probe − canonical)."""
    rows = np.abs(np.asarray(deltas, dtype=np.float64)).reshape(len(deltas), -1)
    per_token = rows.max(axis=0).tolist() if len(deltas) else []
    return NoiseFloor(list(split_points), [float(r.sum()) for r in rows], per_token, list(kinds))


def probe_spans(costs: Sequence[int], starts: Sequence[int], most: int, extra: int = 0) -> list[int]:
    """Indices of the spans to probe: those of latest start first (their re-decodes are the
    shortest), a pair per span, as many pairs as fit in ``BUDGET`` of the run's tokens
    (``sum(costs) + extra``; a pair costs about twice its span's ablation), but at least
    ``MIN_PAIRS`` and at most ``most``.

    ``costs``: decoded tokens of each span's ablation; ``starts``: each span's start in D;
    ``extra``: the run's other tokens (its base decode)."""
    if most <= 0 or not costs:
        return []
    order = sorted(range(len(costs)), key=lambda i: (-starts[i], i))
    budget, spent, picks = BUDGET * (sum(costs) + extra), 0, []
    for i in order[:most]:
        if len(picks) >= MIN_PAIRS and spent + 2 * costs[i] > budget:
            break
        picks.append(i)
        spent += 2 * costs[i]
    return picks


def tilings_for(pair: int) -> tuple[Tiling, Tiling]:
    """The tilings of the null probe and the ablation probe of the ``pair``-th pair."""
    return TILINGS[(2 * pair) % len(TILINGS)], TILINGS[(2 * pair + 1) % len(TILINGS)]
