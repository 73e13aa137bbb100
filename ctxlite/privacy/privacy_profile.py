"""The privacy profile of a known pair of output distributions: what an audit's lower bound estimates.

An audit bounds ε from below by testing which of two neighbouring inputs produced each release.
When the release's distribution under both is known, the best any test can do is known too: the
privacy profile (Balle, Barthe & Gaboardi 2018)

    δ(ε) = max(E_P[(1 − e^{ε − L})_+], E_Q[(1 − e^{ε + L})_+]),   L(o) = log P(o) / Q(o),

and its inverse ε(δ). Every valid (ε_lb, δ) lower bound from such trials satisfies ε_lb ≤ ε(δ)
up to the bound's confidence, so ε_lb / ε(δ) is how tight the audit is.

:func:`vote_pld` builds the privacy loss distribution (PLD) of one release of a *vote*: an
outcome v ∈ {0, …, k−1} drawn from p (one neighbour) or q (the other), released as is
(σ = 0) or as e_v + N(0, σ² I_k), the one-hot vote under Gaussian noise (report-noisy-max's
noisy histogram, Dwork & Roth 2014, minus the votes that do not depend on the pair). A
*mixture* of pairs with public weights (which ensemble the record joined) gives the mixture of
their PLDs: exact for a release that reveals the mixture component, an upper bound (joint
convexity of the hockey-stick divergence) for one that hides it. ``dp_accounting`` composes the
PLD over the queries of a trial and inverts it (Koskela et al. 2020; Doroshenko et al. 2022).

Every δ(ε) :func:`vote_pld` gives is an upper bound on the release's, at every ε, by construction.
Losses are rounded *up* to the discretisation grid (ε over-stated by at most ``queries ×
discretization`` for a discrete release). :func:`vote_plds` also gives the PLD with every loss
rounded *down* (a lower bound on the release's δ(ε), at every ε), so :class:`PairProfile` brackets
ε(δ); and where the value has a closed form (the Gaussian mechanism) or the composed discrete
release can be enumerated, it gives that exact value instead of the grid's.
For σ > 0 the loss of the Gaussian mixture,

    L(x) = log Σ_v p_v exp(⟨s, b_v⟩ / σ²) − log Σ_v q_v exp(⟨s, b_v⟩ / σ²),

depends on x only through its projection s on the (k−1)-dimensional plane orthogonal to
(1, …, 1) (b_v = B^T e_v, all of one length), where s ~ Σ_v p_v N(b_v, σ² I). That plane is cut
into boxes out to ±9σ around the vote points (finest, at σ·min(σ, 1)/1000 on one axis or /32 on
more, within ±5σ; as fine as ``MAX_GRID_CELLS`` allows, at most /4). Each box gets its exact
Gaussian mass (products of normal CDF differences) at the *largest* loss it can hold: for any
reference point b̄, L(s) is the same expression with b_v − b̄ in place of b_v, and over the box
⟨s, b_v − b̄⟩ lies within ⟨c, b_v − b̄⟩ ± Σ_j (w_j/2)|b_vj − b̄_j| (c its centre, w its widths),
which bounds the numerator from above and the denominator from below. The mass beyond the boxes
(< 1e-18) gets the largest loss the pair has anywhere, max_v log p_v/q_v (+inf if some q_v = 0).
tests/unit/privacy/test_privacy_profile.py checks the result against the closed form of Balle & Wang (2018)
for the Gaussian mechanism (p, q point masses) and the exact two-outcome profile down to
δ = 1e-12, and every other pair against a Monte Carlo integral in the full k dimensions.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy import special

from ctxlite.errors import InvalidParameter
from ctxlite.privacy.estimators import check_delta, gdp_delta, gdp_epsilon

__all__ = [
    "VotePair",
    "PairProfile",
    "vote_pld",
    "vote_plds",
    "pair_profile",
    "gaussian_mu",
    "MAX_GRID_CELLS",
    "MAX_EXACT_SEQUENCES",
]

MAX_GRID_CELLS = 4_000_000
"""The largest integration grid :func:`vote_pld` builds for one pair (cells of the (k−1)-dim plane)."""

MAX_EXACT_SEQUENCES = 200_000
"""The most outcome counts (multisets of a trial's released votes) :func:`pair_profile` enumerates,
per direction, to give a discrete release's composed profile exactly; beyond, the grid's bracket."""

_SPAN = 9.0  # the grid covers ±_SPAN σ around the vote points: mass outside is < 2.3e-19 per dimension
_FINE_SPAN = 5.0  # with two or more dimensions, cells are finest within ±_FINE_SPAN σ, wider beyond
_CHUNK = 1 << 16  # grid cells processed at a time
_LOWEST_LOSS = -60.0  # losses below are rounded up to it (they add nothing to δ at any ε >= 0)


@dataclass(frozen=True)
class VotePair:
    """One mixture component: with probability ``weight``, the vote is drawn from ``p`` (one
    neighbour) or ``q`` (the other), distributions over the same k outcomes."""

    weight: float
    p: np.ndarray
    q: np.ndarray


Direction = tuple[np.ndarray, np.ndarray, float]
"""One direction's composed loss distribution: (losses descending, their masses, mass at +inf)."""


@dataclass(frozen=True)
class PairProfile:
    """ε(δ) of ``queries`` independent releases of a vote pair (or mixture), both directions.

    Where the value is known exactly it is given exactly: the Gaussian mechanism (``gaussian_mu``,
    the closed form of μ-GDP, Dong, Roth & Su 2022, solved to float precision) and a discrete
    release (σ = 0) whose composed outcome counts can be enumerated (``exact``). Elsewhere the
    value is bracketed by two discretised PLDs: ``pld`` rounds every loss *up* (its ε(δ) is an
    upper bound) and ``lower_pld`` rounds it *down* and drops what it cannot place (its ε(δ) a
    lower bound); :meth:`bracket` gives both, :meth:`epsilon` the upper end."""

    pld: object  # dp_accounting's PrivacyLossDistribution of the composed release, losses rounded up
    queries: int
    sigma: float
    discretization: float
    gaussian_mu: float | None = None  # μ when the composed release's trade-off curve is exactly G_μ
    lower_pld: object | None = None  # the same release, losses rounded down (None: none computed)
    exact: tuple[Direction, Direction] | None = None  # the composed loss distributions, enumerated

    @property
    def is_exact(self) -> bool:
        """Whether :meth:`epsilon` and :meth:`delta` are the profile's exact values (to float
        precision), not the grid's upper bracket."""
        return self.gaussian_mu is not None or self.exact is not None

    @property
    def method(self) -> str:
        """How the values are computed, in words."""
        if self.gaussian_mu is not None:
            return f"exact: the Gaussian mechanism's closed form (mu = {self.gaussian_mu:.6g})"
        if self.exact is not None:
            return "exact: every count of released outcomes over the trial's queries enumerated"
        return (
            f"computed on a grid: losses in steps of {self.discretization:g} nats, rounded up for the upper "
            "end and down for the lower end"
        )

    @functools.cached_property
    def _directions(self) -> list[Direction]:
        """Each direction's composed PLD, losses rounded up (an upper bound)."""
        return _pld_directions(self.pld)

    @functools.cached_property
    def _lower_directions(self) -> list[Direction] | None:
        """Each direction's composed PLD, losses rounded down (a lower bound), if computed."""
        return None if self.lower_pld is None else _pld_directions(self.lower_pld)

    def grid_bracket(self, delta: float) -> tuple[float, float]:
        """(lower, upper) bounds on ε(δ) from the discretised PLDs alone (0 for the lower end where no
        rounded-down PLD was computed), whatever closed form or enumeration applies."""
        delta = check_delta(delta)
        upper = max(_epsilon_for_delta(*d, delta) for d in self._directions)
        lower_dirs = self._lower_directions
        lower = 0.0 if lower_dirs is None else max(_epsilon_for_delta(*d, delta) for d in lower_dirs)
        return min(lower, upper), upper

    def bracket(self, delta: float) -> tuple[float, float]:
        """(lower, upper) bounds on the release's ε(δ); equal where :attr:`is_exact`."""
        delta = check_delta(delta)
        if self.gaussian_mu is not None:
            eps = gdp_epsilon(self.gaussian_mu, delta)
            return eps, eps
        if self.exact is not None:
            eps = max(_epsilon_for_delta(*d, delta) for d in self.exact)
            return eps, eps
        return self.grid_bracket(delta)

    def epsilon(self, delta: float) -> float:
        """The smallest ε with δ(ε) ≤ ``delta`` (+inf when the pair is distinguishable with more
        probability than ``delta`` at every ε): exact where :attr:`is_exact`, else the upper end of
        :meth:`bracket`. δ(ε) = m_∞ + Σ_{l > ε} P(l)(1 − e^{ε − l}) is U − e^ε M between consecutive
        losses (U, M the masses and e^{−l}-weighted masses above), so ε solves U − e^ε M = δ in the
        first gap where δ(ε) drops to ``delta`` (what ``dp_accounting``'s loop computes, in arrays)."""
        return self.bracket(delta)[1]

    def delta(self, epsilon: float) -> float:
        """δ(ε), the larger of the two directions' hockey-stick divergences: exact where
        :attr:`is_exact` (the closed form at ε ≥ 0), else an upper bound."""
        epsilon = float(epsilon)
        if self.gaussian_mu is not None and epsilon >= 0:
            return gdp_delta(self.gaussian_mu, epsilon)
        return _delta_of(self.exact or self._directions, epsilon)

    def grid_delta(self, epsilon: float, *, lower: bool = False) -> float:
        """δ(ε) of the rounded-up PLD (an upper bound), or with ``lower`` of the rounded-down one (a
        lower bound; 0 where none was computed), whatever closed form or enumeration applies."""
        directions = self._lower_directions if lower else self._directions
        return 0.0 if directions is None else _delta_of(directions, float(epsilon))

    def curve(self, deltas: Sequence[float]) -> list[tuple[float, float]]:
        """(δ, ε(δ)) at each of ``deltas`` (:meth:`epsilon`: exact, or the upper end of the bracket)."""
        return [(float(d), self.epsilon(d)) for d in deltas]


def _delta_of(directions: Sequence[Direction], epsilon: float) -> float:
    """δ(ε) of loss distributions: the larger of the directions' hockey-stick divergences."""
    out = 0.0
    for losses, probs, infinite in directions:
        above = losses > epsilon
        out = max(out, infinite + float(np.sum(probs[above] * -np.expm1(epsilon - losses[above]))))
    return out


def _pld_directions(pld) -> list[Direction]:
    """Each direction of a dp_accounting PLD as (losses descending, their masses, mass at +inf)."""
    out = []
    for pmf in (pld._pmf_remove, pld._pmf_add):  # dp_accounting's two directions
        if hasattr(pmf, "_loss_probs"):  # sparse: {loss index: mass}
            items = sorted(pmf._loss_probs.items())
            index = np.array([i for i, _ in items], float)
            probs = np.array([m for _, m in items], float)
        else:
            index = pmf._lower_loss + np.arange(len(pmf._probs), dtype=float)
            probs = np.asarray(pmf._probs, float)
        keep = probs > 0
        losses = index[keep] * pmf._discretization
        out.append((losses[::-1].copy(), probs[keep][::-1].copy(), float(pmf._infinity_mass)))
    return out


def _epsilon_for_delta(losses: np.ndarray, probs: np.ndarray, infinite: float, delta: float) -> float:
    """ε(δ) of one direction's PLD, ``losses`` descending (see :meth:`PairProfile.epsilon`)."""
    if infinite > delta:
        return math.inf
    upper = infinite + np.concatenate([[0.0], np.cumsum(probs)])  # mass strictly above losses[i]: upper[i]
    with np.errstate(over="ignore", divide="ignore"):
        lower = np.concatenate([[0.0], np.cumsum(probs * np.exp(-losses))])
        at_loss = upper[:-1] - np.exp(losses + np.log(lower[:-1]))  # δ(losses[i])
    crossed = np.flatnonzero(at_loss > delta)
    i = int(crossed[0]) if crossed.size else len(losses)  # δ(ε) <= delta on (losses[i], losses[i − 1]]
    if lower[i] <= 0 or upper[i] <= delta:
        return max(0.0, float(losses[i - 1])) if i > 0 and upper[i] > delta else 0.0
    # in logs: lower[i] may be subnormal (a loss beyond ~708 nats), where the quotient overflows to inf;
    # the crossing lies in (losses[i], losses[i - 1]] (δ(losses[i]) > delta >= δ(losses[i - 1])), which
    # bounds what rounding may do
    eps = math.log(upper[i] - delta) - math.log(lower[i])
    top = float(losses[i - 1]) if i > 0 else math.inf
    bottom = float(losses[i]) if i < len(losses) else 0.0
    return max(0.0, bottom, min(eps, top))


def _check_pairs(pairs: Sequence[VotePair]) -> tuple[list[VotePair], int]:
    if not pairs:
        raise InvalidParameter("need at least one vote pair")
    out, k = [], None
    for pair in pairs:
        p, q = (np.asarray(x, dtype=np.float64) for x in (pair.p, pair.q))
        if p.ndim != 1 or p.shape != q.shape or p.size < 2:
            raise InvalidParameter(
                f"p and q must be distributions over the same >= 2 outcomes, got {p.shape}, {q.shape}"
            )
        if k is not None and p.size != k:
            raise InvalidParameter(f"every pair must have the same {k} outcomes, got {p.size}")
        k = p.size
        for name, x in (("p", p), ("q", q)):
            if not np.all(np.isfinite(x)) or np.any(x < 0) or abs(x.sum() - 1.0) > 1e-6:
                raise InvalidParameter(f"{name} must be a probability vector, got {x.tolist()}")
        if not (math.isfinite(pair.weight) and pair.weight > 0):
            raise InvalidParameter(f"mixture weights must be > 0, got {pair.weight}")
        out.append(VotePair(float(pair.weight), p / p.sum(), q / q.sum()))
    total = sum(pair.weight for pair in out)
    return [VotePair(pair.weight / total, pair.p, pair.q) for pair in out], k


def _simplex_basis(k: int) -> np.ndarray:
    """(k, k−1): an orthonormal basis of the plane orthogonal to (1, …, 1) (Helmert's columns)."""
    basis = np.zeros((k, k - 1))
    for j in range(1, k):
        basis[:j, j - 1] = 1.0
        basis[j, j - 1] = -j
        basis[:, j - 1] /= math.sqrt(j * (j + 1))
    return basis


class _Axis(NamedTuple):
    """One axis of the integration grid: its cells' edges (n + 1,) and, for each vote, the exact
    N(coordinate, σ²) mass of each cell (k, n) and outside the axis's range (k,)."""

    edges: np.ndarray
    mass: np.ndarray
    outside: np.ndarray


def _normal_mass(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """P(lo < Z < hi) for Z ~ N(0, 1), elementwise, from the nearer tail (no cancellation far out)."""
    upper = lo > 0
    return np.where(upper, special.ndtr(-lo) - special.ndtr(-hi), special.ndtr(hi) - special.ndtr(lo))


def _axis_edges(lo: float, hi: float, sigma: float, h: float, fine_span: float, cap: float) -> np.ndarray:
    """Edges from lo − _SPAN σ to hi + _SPAN σ: spacing ``h`` within ``fine_span`` σ of [lo, hi], then
    widths growing by a quarter per cell (at most ``cap``) out to the ends."""
    a, b = lo - fine_span * sigma, hi + fine_span * sigma
    n = max(1, math.ceil((b - a) / h))
    fine = np.linspace(a, b, n + 1)
    step, outer, reach = (b - a) / n, [], (_SPAN - fine_span) * sigma
    while reach > 1e-12 * sigma and sum(outer) < reach:
        step = min(step * 1.25, cap)
        outer.append(min(step, reach - sum(outer)))
    steps = np.cumsum(outer) if outer else np.zeros(0)
    return np.concatenate([a - steps[::-1], fine, b + steps])


def _axes(points: np.ndarray, sigma: float) -> list[_Axis]:
    """The grid's axes: as fine as :data:`MAX_GRID_CELLS` allows, between ``σ·min(σ, 1)/1000`` (one
    axis) or ``/32`` and ``/4`` of the loss's scale; refused when even ``/4`` needs more cells."""
    dims = points.shape[1]
    loss_scale = sigma * min(sigma, 1.0)
    lo, hi = points.min(axis=0), points.max(axis=0)
    fine_span = _SPAN if dims == 1 else _FINE_SPAN

    def edges(h):
        return [_axis_edges(a, b, sigma, h, fine_span, 4.0 * h) for a, b in zip(lo, hi)]

    spans = (hi - lo) + 2 * _SPAN * sigma
    h = max(loss_scale / (1000.0 if dims == 1 else 32.0), 0.9 * (math.prod(spans) / MAX_GRID_CELLS) ** (1 / dims))
    grid = edges(h)
    while math.prod(len(e) - 1 for e in grid) > MAX_GRID_CELLS:
        h *= 1.05
        if h > loss_scale / 4.0:
            raise InvalidParameter(
                f"the privacy profile of {dims + 1} outcomes at sigma = {sigma:.3g} needs more than "
                f"{MAX_GRID_CELLS:.0e} grid cells: too many outcomes or too little noise for the exact computation"
            )
        grid = edges(h)
    axes = []
    for j, e in enumerate(grid):
        z = (e[None, :] - points[:, j : j + 1]) / sigma  # (k, n + 1) standardised edges per vote
        mass = _normal_mass(z[:, :-1], z[:, 1:])
        outside = special.ndtr(z[:, 0]) + special.ndtr(-z[:, -1])
        axes.append(_Axis(e, mass, outside))
    return axes


def _cells(axes: list[_Axis], points: np.ndarray, sigma: float):
    """Chunks of the grid's cells, each as (centre (cells, dims), half-widths (cells, dims), mass
    (cells, k): vote v's exact Gaussian mass in the cell, ⟨c, b_v⟩/σ² (cells, k))."""
    shape = tuple(len(a.edges) - 1 for a in axes)
    total = math.prod(shape)
    for start in range(0, total, _CHUNK):
        index = np.unravel_index(np.arange(start, min(total, start + _CHUNK)), shape)
        centre = np.stack([(a.edges[i] + a.edges[i + 1]) / 2 for a, i in zip(axes, index)], axis=1)
        half = np.stack([(a.edges[i + 1] - a.edges[i]) / 2 for a, i in zip(axes, index)], axis=1)
        mass = np.ones((len(centre), len(points)))
        for a, i in zip(axes, index):
            mass *= a.mass[:, i].T
        yield centre, half, mass, centre @ points.T / sigma**2


def _posterior_bounds(prior: np.ndarray, points, sigma, centre, half, proj) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds (cells, k) over each cell on the posterior π_v(s) ∝ prior_v e^{⟨s, b_v⟩/σ²}.

    For any reference point b̄, π_v(s) ∝ prior_v e^{x_v} with x_v = ⟨s, b_v − b̄⟩/σ², and over the
    cell x_v lies within ⟨c, b_v − b̄⟩/σ² ± Σ_j (w_j/2)|b_vj − b̄_j|/σ² (c the centre, w the widths);
    π_v is largest where x_v is and every other x_u is smallest. b̄ is the posterior mean at the
    centre, where the bounds are narrowest. Votes outside the prior's support get 0."""
    support = prior > 0
    with np.errstate(divide="ignore"):
        log_prior = np.where(support, np.log(np.where(support, prior, 1.0)), -np.inf)
    logw = log_prior[None, :] + proj
    w = np.exp(logw - logw.max(axis=1, keepdims=True))
    ref = (w / w.sum(axis=1, keepdims=True)) @ points  # b̄, (cells, dims)
    mid = proj - (centre * ref).sum(axis=1, keepdims=True) / sigma**2
    radius = (np.abs(points[None, :, :] - ref[:, None, :]) * half[:, None, :]).sum(axis=2) / sigma**2
    lo, hi = log_prior[None, :] + mid - radius, log_prior[None, :] + mid + radius
    low, high = np.zeros_like(lo), np.zeros_like(lo)
    for v in np.flatnonzero(support):
        rest = np.delete(np.flatnonzero(support), np.flatnonzero(np.flatnonzero(support) == v))
        others_lo = np.logaddexp.reduce(lo[:, rest], axis=1) if rest.size else np.full(len(lo), -np.inf)
        others_hi = np.logaddexp.reduce(hi[:, rest], axis=1) if rest.size else np.full(len(lo), -np.inf)
        high[:, v] = np.exp(hi[:, v] - np.logaddexp(hi[:, v], others_lo))
        low[:, v] = np.exp(lo[:, v] - np.logaddexp(lo[:, v], others_hi))
    return low, high


def _largest_loss(a: np.ndarray, b: np.ndarray, prior: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """An upper bound per cell on the loss log Σ a_v e^{x_v} / Σ b_v e^{x_v} over the cell, with
    prior = (a + b)/2: the loss is log E_π[a/prior] − log E_π[b/prior] = log A − log(2 − A) with
    A = E_π[a/prior], increasing in A, so its supremum is at the largest A that posteriors within
    the cell's bounds allow: the linear programme over the box [low, high] ∩ simplex, solved
    greedily (all at their lower bounds, the rest of the mass to the votes with the largest
    a_v/prior_v first). Identical a and b give 0 exactly; the Gaussian mechanism, the cell's exact
    supremum."""
    support = np.flatnonzero(prior > 0)
    ratio_a, ratio_b = a[support] / prior[support], b[support] / prior[support]
    pi = low[:, support].copy()
    left = 1.0 - pi.sum(axis=1)
    for j in np.argsort(-ratio_a, kind="stable"):
        add = np.clip(np.minimum(left, high[:, support[j]] - pi[:, j]), 0.0, None)
        pi[:, j] += add
        left -= add
    with np.errstate(divide="ignore"):
        return np.maximum(np.log(pi @ ratio_a) - np.log(pi @ ratio_b), _LOWEST_LOSS)


def _sup_loss(a: np.ndarray, b: np.ndarray) -> float:
    """sup over all releases of log A(x)/B(x): max_v log a_v / b_v over a's support (+inf where b_v = 0).
    The loss is a ratio of two mixtures of the same Gaussians, so it never exceeds this."""
    support = a > 0
    if np.any(b[support] == 0):
        return math.inf
    return float(np.max(np.log(a[support]) - np.log(b[support])))


class _LossHistogram:
    """One direction's PLD being built: mass per loss bin ⌈L / discretization⌉ (losses rounded *up*)
    and the mass at +inf, accumulated piece by piece as sorted (bin, mass) arrays, merged now and
    then, so neither a grid-sized array nor a dense range of bins is kept. With ``down``, the
    bin is ⌊L / discretization⌋ (rounded *down*) and a loss below ``_LOWEST_LOSS`` is dropped:
    every δ(ε) of that PLD, composed or not, is at most the release's (δ is a sum of non-negative
    terms, each increasing in the losses)."""

    def __init__(self, discretization: float, down: bool = False):
        self.discretization, self.down = discretization, down
        self.bins, self.mass = np.zeros(0, np.int64), np.zeros(0)
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []
        self.infinite = 0.0

    def add(self, losses: np.ndarray, masses: np.ndarray) -> None:
        keep = masses > 0
        losses, masses = losses[keep], masses[keep]
        if self.down:
            keep = losses >= _LOWEST_LOSS
            losses, masses = losses[keep], masses[keep]
        inf = np.isposinf(losses)
        self.infinite += float(masses[inf].sum())
        if np.any(~inf):
            rounding = np.floor if self.down else np.ceil
            self.pending.append((rounding(losses[~inf] / self.discretization).astype(np.int64), masses[~inf]))
        if sum(len(b) for b, _ in self.pending) > 1 << 20:
            self._merge()

    def _merge(self) -> None:
        bins = np.concatenate([self.bins] + [b for b, _ in self.pending])
        mass = np.concatenate([self.mass] + [m for _, m in self.pending])
        self.bins, inverse = np.unique(bins, return_inverse=True)
        self.mass = np.bincount(inverse, weights=mass, minlength=self.bins.size)
        self.pending = []

    def pmf(self):
        from dp_accounting.pld import pld_pmf

        self._merge()
        probs = {int(b): float(m) for b, m in zip(self.bins, self.mass) if m > 0} or {0: 0.0}
        return pld_pmf.create_pmf(
            probs, self.discretization, min(self.infinite, 1.0), pessimistic_estimate=not self.down
        )


def _add_discrete(hist: list[_LossHistogram], pair: VotePair) -> None:
    """A vote released as is: loss log a_v / b_v at mass a_v, +inf where b_v = 0."""
    for side, (a, b) in enumerate(((pair.p, pair.q), (pair.q, pair.p))):
        both = (a > 0) & (b > 0)
        hist[side].add(np.log(a[both]) - np.log(b[both]), pair.weight * a[both])
        hist[side].infinite += pair.weight * float(a[(a > 0) & (b == 0)].sum())


def _add_noisy(
    hist: list[_LossHistogram], pairs: Sequence[VotePair], sigma: float, k: int, low: list[_LossHistogram]
) -> None:
    """The one-hot vote under N(0, σ²I), both directions, for every pair of the mixture: each grid
    cell's exact mass at a rigorous upper bound of the loss over the cell (the cell's bounds on
    ⟨s, b_v − b̄⟩ put in the numerator's and the denominator's worst case), and the mass outside the
    grid at the largest loss the pair can have anywhere. Pessimistic by construction. ``low`` gets
    each cell's mass at a lower bound of the loss over it: one direction's loss is minus the
    other's (log P/Q = −log Q/P at every point), so minus the other direction's upper bound; the
    mass outside the grid is dropped there."""
    points = _simplex_basis(k)  # row v: the vote e_v projected on the plane, B^T e_v
    axes = _axes(points, sigma)
    outside = -np.expm1(sum(np.log1p(-a.outside) for a in axes))  # (k,) each vote's mass off the grid
    for pair in pairs:
        for side, (a, b) in enumerate(((pair.p, pair.q), (pair.q, pair.p))):
            hist[side].add(np.array([_sup_loss(a, b)]), np.array([pair.weight * float(a @ outside)]))
    for centre, half, mass, proj in _cells(axes, points, sigma):
        for pair in pairs:
            p, q = pair.p, pair.q
            prior = (p + q) / 2.0
            lo_pi, hi_pi = _posterior_bounds(prior, points, sigma, centre, half, proj)
            up_p, up_q = _largest_loss(p, q, prior, lo_pi, hi_pi), _largest_loss(q, p, prior, lo_pi, hi_pi)
            hist[0].add(up_p, pair.weight * (mass @ p))  # ≥ L over the cell
            hist[1].add(up_q, pair.weight * (mass @ q))  # ≥ −L over it
            low[0].add(-up_q, pair.weight * (mass @ p))  # ≤ L over the cell
            low[1].add(-up_p, pair.weight * (mass @ q))  # ≤ −L over it


def vote_pld(pairs: Sequence[VotePair], sigma: float = 0.0, *, discretization: float = 1e-4):
    """The PLD (both directions) of one release of a vote drawn from a mixture of ``pairs``,
    released as is (``sigma = 0``) or one-hot under N(0, σ² I) noise; the component is public.
    Pessimistic: every δ(ε) it gives is at least the release's."""
    return vote_plds(pairs, sigma, discretization=discretization)[0]


def vote_plds(pairs: Sequence[VotePair], sigma: float = 0.0, *, discretization: float = 1e-4):
    """(pessimistic, optimistic): :func:`vote_pld`, and the same release's PLD with every loss
    rounded down, whose every δ(ε) is at most the release's (the bracket's lower end)."""
    pairs, k = _check_pairs(pairs)
    if not (math.isfinite(sigma) and sigma >= 0):
        raise InvalidParameter(f"sigma must be finite and >= 0, got {sigma}")
    if not (math.isfinite(discretization) and discretization > 0):
        raise InvalidParameter(f"discretization must be > 0, got {discretization}")
    from dp_accounting.pld import privacy_loss_distribution

    hist = [_LossHistogram(discretization), _LossHistogram(discretization)]
    low = [_LossHistogram(discretization, down=True), _LossHistogram(discretization, down=True)]
    if sigma == 0:
        for pair in pairs:
            _add_discrete(hist, pair)
            _add_discrete(low, pair)
    else:
        # a coordinate no pair ever votes for is pure noise under both neighbours: dropping it is exact
        used = np.flatnonzero(sum(pair.p + pair.q for pair in pairs) > 0)
        if used.size < 2:  # every vote the same outcome under both: nothing to tell apart
            for h in (*hist, *low):
                h.add(np.zeros(1), np.ones(1))
        else:
            pairs = [VotePair(pair.weight, pair.p[used], pair.q[used]) for pair in pairs]
            _add_noisy(hist, pairs, sigma, used.size, low)
    make = privacy_loss_distribution.PrivacyLossDistribution
    return make(hist[0].pmf(), hist[1].pmf()), make(low[0].pmf(), low[1].pmf())


def gaussian_mu(pairs: Sequence[VotePair], sigma: float, queries: int = 1) -> float | None:
    """μ when ``queries`` noisy releases of the mixture have a Gaussian trade-off curve G_μ exactly,
    else None. That is when every component's votes are certain (p and q point masses): the release
    is then N(e_a, σ²I) against N(e_b, σ²I), the Gaussian mechanism, μ = ‖e_a − e_b‖/σ (√2/σ or 0),
    and all components share that μ (a public mixture of different μ is not Gaussian); composed,
    μ·√queries (Dong, Roth & Su 2022, Corollary 3.3). A vote that is not certain makes the release
    a Gaussian mixture, whose curve is not Gaussian (its ε(δ) can be far below the GDP conversion's)."""
    pairs, _ = _check_pairs(pairs)
    if not (math.isfinite(sigma) and sigma > 0):
        return None
    mus = set()
    for pair in pairs:
        if np.count_nonzero(pair.p) != 1 or np.count_nonzero(pair.q) != 1:
            return None
        mus.add(0.0 if int(np.argmax(pair.p)) == int(np.argmax(pair.q)) else math.sqrt(2.0) / sigma)
    return mus.pop() * math.sqrt(queries) if len(mus) == 1 else None


def pair_profile(
    pairs: Sequence[VotePair], sigma: float = 0.0, queries: int = 1, *, discretization: float = 1e-4
) -> PairProfile:
    """The privacy profile of ``queries`` independent releases (each a fresh draw from the mixture
    of ``pairs``), composed by ``dp_accounting``; an upper bound on the true profile at every δ."""
    if isinstance(queries, bool) or not isinstance(queries, int) or queries < 1:
        raise InvalidParameter(f"queries must be an integer >= 1, got {queries!r}")
    plds = vote_plds(pairs, sigma, discretization=discretization)
    # δ at a huge ε is the mass of infinite loss: all of it means the neighbours are told apart by every
    # release with certainty, and composing (which dp_accounting cannot do without finite mass) adds nothing
    pld, lower = (
        _self_compose(x, queries) if queries > 1 and x.get_delta_for_epsilon(1e6) < 1.0 - 1e-12 else x for x in plds
    )
    exact = _enumerated(_check_pairs(pairs)[0], queries) if sigma == 0 else None
    return PairProfile(
        pld, queries, float(sigma), discretization, gaussian_mu(pairs, sigma, queries), lower_pld=lower, exact=exact
    )


def _self_compose(pld, queries: int):
    """``pld`` composed ``queries`` times. dp_accounting truncates tails of at most 1e-15 as it
    composes; a rounded-down PLD whose finite part is all below that (a tail of 1e-12 beside
    infinite loss) leaves it nothing to put the truncated mass on (IndexError), so that one is
    composed without truncation."""
    try:
        return pld.self_compose(queries)
    except IndexError:
        return pld.self_compose(queries, tail_mass_truncation=0.0)


def _enumerated(pairs: Sequence[VotePair], queries: int) -> tuple[Direction, Direction] | None:
    """The exact composed loss distributions of ``queries`` releases of a vote as is (σ = 0), both
    directions, or None where the counts are more than :data:`MAX_EXACT_SEQUENCES`.

    One release is an outcome (component c, vote v) with mass w_c a_v and loss log a_v / b_v
    (+inf where b_v = 0); outcomes of equal loss are merged. ``queries`` releases have the loss
    Σ_j n_j ℓ_j of their counts n (Σ n_j = queries over the finite-loss outcomes), with the
    multinomial mass queries!/Π n_j! Π p_j^{n_j}; a trial with any infinite-loss release has
    infinite loss (mass 1 − (1 − m_∞)^queries). Counts of zero mass, or of a loss below
    ``_LOWEST_LOSS``, are left out: they add nothing to δ(ε) at any ε ≥ 0, where the values are exact."""
    out = []
    for side in (0, 1):
        losses, probs, infinite = [], [], 0.0
        for pair in pairs:
            a, b = (pair.p, pair.q) if side == 0 else (pair.q, pair.p)
            both = (a > 0) & (b > 0)
            losses.append(np.log(a[both]) - np.log(b[both]))
            probs.append(pair.weight * a[both])
            infinite += pair.weight * float(a[(a > 0) & (b == 0)].sum())
        atoms, inverse = np.unique(np.concatenate(losses), return_inverse=True)
        p = np.bincount(inverse, weights=np.concatenate(probs), minlength=atoms.size)
        atoms, p = atoms[p > 0], p[p > 0]
        m = atoms.size
        if m == 0:
            out.append((np.zeros(0), np.zeros(0), 1.0))
            continue
        if math.comb(queries + m - 1, m - 1) > MAX_EXACT_SEQUENCES:
            return None
        bars = np.array(list(itertools.combinations(range(queries + m - 1), m - 1)), dtype=np.int64)
        bars = bars.reshape(-1, m - 1) if m > 1 else np.zeros((1, 0), np.int64)
        edges = np.concatenate([np.full((len(bars), 1), -1), bars, np.full((len(bars), 1), queries + m - 1)], axis=1)
        counts = np.diff(edges, axis=1) - 1  # stars between consecutive bars: each count, summing to queries
        log_mass = special.gammaln(queries + 1) - special.gammaln(counts + 1).sum(axis=1) + counts @ np.log(p)
        loss, mass = counts @ atoms, np.exp(log_mass)
        keep = (mass > 0) & (loss >= _LOWEST_LOSS)  # a loss below adds nothing to δ(ε) at any ε >= 0
        loss, mass = loss[keep], mass[keep]
        order = np.argsort(-loss, kind="stable")
        composed_inf = -math.expm1(queries * math.log1p(-min(infinite, 1.0))) if infinite < 1 else 1.0
        out.append((loss[order], mass[order], composed_inf))
    return out[0], out[1]
