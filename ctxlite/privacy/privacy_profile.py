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

Losses are rounded *up* to the discretisation grid (pessimistic: ε is over-stated by at most
``queries × discretization``). For σ > 0 the loss of the Gaussian mixture,

    L(x) = log Σ_v p_v exp(x_v / σ²) − log Σ_v q_v exp(x_v / σ²),

depends on x only through its projection s on the (k−1)-dimensional plane orthogonal to
(1, …, 1), where s ~ Σ_v p_v N(B^T e_v, σ² I); its distribution is integrated on a grid of that
plane (midpoint rule, spacing σ·min(σ, 1)/16 or as fine as ``MAX_GRID_CELLS`` allows, at most
σ·min(σ, 1)/4; ±7σ around the vote points), which is exact for
the Gaussian mechanism (p, q point masses) to the grid's error: tests/test_privacy_profile.py
checks it against the closed form of Balle & Wang (2018) and every other pair against a Monte
Carlo integral in the full k dimensions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ctxlite.errors import InvalidParameter
from ctxlite.privacy.estimators import check_delta

__all__ = ["VotePair", "PairProfile", "vote_pld", "pair_profile", "MAX_GRID_CELLS"]

MAX_GRID_CELLS = 4_000_000
"""The largest integration grid :func:`vote_pld` builds for one pair (cells of the (k−1)-dim plane)."""

_SPAN = 7.0  # the grid covers ±_SPAN σ around every vote point: mass outside is < 3e-12 per dimension


@dataclass(frozen=True)
class VotePair:
    """One mixture component: with probability ``weight``, the vote is drawn from ``p`` (one
    neighbour) or ``q`` (the other), distributions over the same k outcomes."""

    weight: float
    p: np.ndarray
    q: np.ndarray


@dataclass(frozen=True)
class PairProfile:
    """ε(δ) of ``queries`` independent releases of a vote pair (or mixture), both directions."""

    pld: object  # dp_accounting's PrivacyLossDistribution of the composed release
    queries: int
    sigma: float
    discretization: float

    def epsilon(self, delta: float) -> float:
        """The smallest ε with δ(ε) ≤ ``delta`` (+inf when the pair is distinguishable with more
        probability than ``delta`` at every ε)."""
        return float(self.pld.get_epsilon_for_delta(check_delta(delta)))

    def delta(self, epsilon: float) -> float:
        return float(self.pld.get_delta_for_epsilon(float(epsilon)))

    def curve(self, deltas: Sequence[float]) -> list[tuple[float, float]]:
        """(δ, ε(δ)) at each of ``deltas``."""
        return [(float(d), self.epsilon(d)) for d in deltas]


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


def _grid(k: int, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Each vote's Gaussian density at the grid's cells, as (cells, k) values scaled so each row's
    largest is 1, and the rows' logarithmic scales (cells,): the log-density of vote v at cell c is
    log kernel[c, v] + scale[c], up to a constant shared by all cells and votes."""
    basis = _simplex_basis(k)
    points = basis  # row v: the vote e_v projected on the plane, B^T e_v
    lo, hi = points.min(axis=0) - _SPAN * sigma, points.max(axis=0) + _SPAN * sigma
    # the finest spacing the cell budget allows, between a 16th and a 4th of the loss's scale σ·min(σ, 1)
    loss_scale = sigma * min(sigma, 1.0)
    h = max(loss_scale / 16.0, (math.prod(hi - lo) / MAX_GRID_CELLS) ** (1.0 / (k - 1)))
    if h > loss_scale / 4.0:
        raise InvalidParameter(
            f"the privacy profile of {k} outcomes at sigma = {sigma:.3g} needs more than {MAX_GRID_CELLS:.0e} "
            "grid cells: too many outcomes or too little noise for the exact computation"
        )
    axes = [np.arange(a + h / 2, b, h) for a, b in zip(lo, hi)]
    s = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, k - 1)
    log_phi = -((s[:, None, :] - points[None, :, :]) ** 2).sum(axis=2) / (2 * sigma**2)
    scale = log_phi.max(axis=1)
    return np.exp(log_phi - scale[:, None]), scale


def _losses(pair: VotePair, sigma: float, grid) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """For each direction (P vs Q, then Q vs P): the losses, their masses and the mass at +inf."""
    p, q = pair.p, pair.q
    if sigma == 0:
        out = []
        for a, b in ((p, q), (q, p)):
            both = (a > 0) & (b > 0)
            out.append((np.log(a[both]) - np.log(b[both]), a[both], float(a[(a > 0) & (b == 0)].sum())))
        return out
    kernel, scale = grid
    with np.errstate(divide="ignore"):  # a density that underflows to 0 gives an infinite loss: kept, pessimistic
        log_p, log_q = np.log(kernel @ p) + scale, np.log(kernel @ q) + scale
        loss = log_p - log_q
    mass_p, mass_q = np.exp(log_p - log_p.max()), np.exp(log_q - log_q.max())  # the midpoint rule, normalised
    return [(loss, mass_p / mass_p.sum(), 0.0), (-loss, mass_q / mass_q.sum(), 0.0)]


def _pmf(directions, discretization: float):
    """One direction's pessimistic PLD pmf (losses rounded up to the grid) over the mixture."""
    from dp_accounting.pld import pld_pmf

    losses = np.concatenate([d[0] for d in directions])
    masses = np.concatenate([d[1] for d in directions])
    infinite = (masses > 0) & np.isposinf(losses)
    inf_mass = float(sum(d[2] for d in directions) + masses[infinite].sum())
    keep = (masses > 0) & ~infinite
    idx = np.ceil(losses[keep] / discretization - 1e-9).astype(np.int64)
    if idx.size == 0:
        return pld_pmf.create_pmf({0: 0.0}, discretization, min(inf_mass, 1.0), pessimistic_estimate=True)
    base = int(idx.min())
    summed = np.bincount(idx - base, weights=masses[keep])
    nonzero = np.flatnonzero(summed)
    probs = {base + int(i): float(summed[i]) for i in nonzero}
    return pld_pmf.create_pmf(probs, discretization, min(inf_mass, 1.0), pessimistic_estimate=True)


def vote_pld(pairs: Sequence[VotePair], sigma: float = 0.0, *, discretization: float = 1e-4):
    """The PLD (both directions) of one release of a vote drawn from a mixture of ``pairs``,
    released as is (``sigma = 0``) or one-hot under N(0, σ² I) noise; the component is public."""
    pairs, k = _check_pairs(pairs)
    if not (math.isfinite(sigma) and sigma >= 0):
        raise InvalidParameter(f"sigma must be finite and >= 0, got {sigma}")
    if not (math.isfinite(discretization) and discretization > 0):
        raise InvalidParameter(f"discretization must be > 0, got {discretization}")
    from dp_accounting.pld import privacy_loss_distribution

    grid = _grid(k, sigma) if sigma > 0 else None
    per_pair = [_losses(pair, sigma, grid) for pair in pairs]
    remove, add = (
        _pmf(
            [
                (loss, mass * pair.weight, inf * pair.weight)
                for pair, sides in zip(pairs, per_pair)
                for loss, mass, inf in [sides[side]]
            ],
            discretization,
        )
        for side in (0, 1)
    )
    return privacy_loss_distribution.PrivacyLossDistribution(remove, add)


def pair_profile(
    pairs: Sequence[VotePair], sigma: float = 0.0, queries: int = 1, *, discretization: float = 1e-4
) -> PairProfile:
    """The privacy profile of ``queries`` independent releases (each a fresh draw from the mixture
    of ``pairs``), composed by ``dp_accounting``."""
    if isinstance(queries, bool) or not isinstance(queries, int) or queries < 1:
        raise InvalidParameter(f"queries must be an integer >= 1, got {queries!r}")
    pld = vote_pld(pairs, sigma, discretization=discretization)
    # δ at a huge ε is the mass of infinite loss: all of it means the neighbours are told apart by every
    # release with certainty, and composing (which dp_accounting cannot do without finite mass) adds nothing
    if queries > 1 and pld.get_delta_for_epsilon(1e6) < 1.0 - 1e-12:
        pld = pld.self_compose(queries)
    return PairProfile(pld, queries, float(sigma), discretization)
