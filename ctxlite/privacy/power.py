"""How many trials an audit needs before its ε lower bound can exceed a budget (a power calculation).

An audit's Clopper–Pearson lower bound ε_lb (:func:`~ctxlite.privacy.estimators.clopper_pearson_epsilon`,
Jagielski, Ullman & Oprea 2020) can only ever *prove a leak*: ε_lb > budget is evidence that the
budget is exceeded, ε_lb ≤ budget proves nothing. What a budget-holder can still learn is whether
the audit was large enough to see a violation: with n trials a side, a test with rates (TPR, FPR)
gives on average about TP = TPR·n and FP = FPR·n, and ε_lb at those expected counts is the bound
such an audit reaches about half the time. :func:`trials_to_certify` finds the smallest n at which
it exceeds the budget, with each threshold at level α/K, K the corner-grid bound's number of
corners (:class:`~ctxlite.privacy.estimators.CornerGrid`, the default bound).

The rates come from one of two places:

* a pair whose ε at δ is known (exact, or an upper bound) has rates inside the (ε, δ)-DP region
  TPR ≤ e^ε·FPR + δ, TNR ≤ e^ε·FNR + δ (Kairouz, Oh & Viswanath 2015); its corner
  (:func:`dp_corner`), FPR = (1 − δ)/(1 + e^ε) = 1 − TPR, is the most distinguishable point an
  (ε, δ) pair can have, so the trials found there are a lower estimate ("at least about");
* an audit's own observed rates at its bound's threshold (how its detector did).

At rates whose plug-in ε (:func:`~ctxlite.privacy.estimators.point_epsilon`) is ≤ the budget, no
number of trials certifies more: the bound tends to the plug-in value from below.

The corner is a lower estimate, and for a pair of another shape a poor one: a Gaussian pair of
μ = 2 (ε(1e-5) ≈ 10) has no test near the corner's rates, and 40 trials, the corner's answer for
a budget of 1, certify more than 1 in about one audit in a hundred. Where the pair's trade-off
curve is known to be Gaussian (G_μ: the Gaussian mechanism), :func:`gaussian_trials_to_certify`
computes the need for that shape: the probability that the corner-grid bound of an audit with n
trials a side, its detector the pair's optimal test, exceeds the budget. Each corner's threshold is
an order statistic of one side's scores, the other side's count past it binomial at the curve's
rate there; the A corners (fixed false positives) and the B corners (fixed false negatives) are
each simulated exactly, jointly over their corners, and the bound exceeds the budget with a
probability between the larger side's and the two sides' sum. The need is bracketed by the two:
the fewest trials at which the larger side alone reaches the target probability (enough), and the
fewest at which the sum does (fewer are not enough). For μ = 2 and a budget of 1: 76–96 trials for
even odds, where simulated audits of the real estimator certify it in 37 % and 66 % of runs
(tests/unit/privacy/test_power.py checks both ends and the corner's 40 by simulation).
"""

from __future__ import annotations

import math

import numpy as np

from ctxlite.errors import InvalidParameter
from ctxlite.privacy.estimators import (
    CornerGrid,
    check_delta,
    check_open_unit,
    check_rate,
    check_real,
    clopper_pearson_epsilon_array,
    gdp_epsilon,
    point_epsilon,
)

__all__ = ["MAX_TRIALS_PER_SIDE", "corner_grid_k", "dp_corner", "gaussian_trials_to_certify", "trials_to_certify"]

_RUNS = 4000
"""Simulated audits per trial count in :func:`gaussian_trials_to_certify` (each side's probability
to ±0.016 at 2 standard errors)."""

MAX_TRIALS_PER_SIDE = 100_000
"""The most trials a side :func:`trials_to_certify` searches before it answers "more than that"."""


def corner_grid_k(n: np.ndarray) -> np.ndarray:
    """The number of corners K that ``CornerGrid(ratio=2)`` tests with ``n`` trials on each side,
    vectorised: |G(n)| = |{0, 1, 2, 4, …} ∩ [0, n // 2]| per side, two sides.

    >>> corner_grid_k(np.array([2, 3, 4, 100])).tolist()
    [4, 4, 6, 14]
    """
    top = np.asarray(n, dtype=np.int64) // 2
    per_side = np.where(top < 1, 1, 2 + np.floor(np.log2(np.maximum(top, 1))).astype(np.int64))
    return 2 * per_side


def dp_corner(epsilon: float, delta: float) -> tuple[float, float]:
    """(TPR, FPR) of the corner of the (ε, δ)-DP region, where both DP inequalities are tight:
    FPR = (1 − δ)/(1 + e^ε), TPR = 1 − FPR.

    >>> [round(x, 4) for x in dp_corner(math.log(4), 0.0)]
    [0.8, 0.2]
    """
    epsilon = check_real("epsilon", epsilon)
    if epsilon < 0:
        raise InvalidParameter(f"epsilon must be >= 0, got {epsilon}")
    delta = check_delta(delta)
    fpr = (1.0 - delta) * math.exp(-epsilon) / (1.0 + math.exp(-epsilon))  # no overflow at large ε
    return 1.0 - fpr, fpr


def trials_to_certify(
    budget: float, tpr: float, fpr: float, *, alpha: float, delta: float, max_per_side: int = MAX_TRIALS_PER_SIDE
) -> int | None:
    """The fewest trials N = 2n (n with the canary, n without) at which a test with rates (``tpr``,
    ``fpr``) gives, at its expected counts round(TPR·n) and round(FPR·n), a Clopper–Pearson ε lower
    bound (confidence 1 − ``alpha``, each corner at α/K) above ``budget``; None when that takes more
    than ``max_per_side`` a side or never happens (plug-in ε at the rates ≤ ``budget``).

    >>> trials_to_certify(1.0, *dp_corner(26.6, 1e-5), alpha=0.05, delta=1e-5)
    40
    >>> trials_to_certify(1.0, 0.6, 0.3, alpha=0.05, delta=1e-5) is None  # plug-in log 2 < 1: never
    True
    """
    budget = check_real("budget", budget)
    if budget < 0:
        raise InvalidParameter(f"budget must be >= 0, got {budget}")
    tpr, fpr = check_rate("tpr", tpr), check_rate("fpr", fpr)
    alpha, delta = check_open_unit("alpha", alpha), check_delta(delta)
    if point_epsilon(tpr, fpr, delta) <= budget:
        return None
    lo = 2
    while lo <= max_per_side:
        n = np.arange(lo, min(2 * lo, max_per_side + 1), dtype=np.int64)
        tp, fp = np.rint(tpr * n).astype(np.int64), np.rint(fpr * n).astype(np.int64)
        bound = clopper_pearson_epsilon_array(tp, n, fp, n, alpha / corner_grid_k(n), delta)
        above = np.flatnonzero(bound > budget)
        if above.size:
            return int(2 * n[above[0]])
        lo *= 2
    return None


def _fewest(holds, n: int) -> int:
    """The smallest k in 0..n with ``holds(k)`` (which, once true, stays true as k rises); n + 1 if none."""
    if not holds(n):
        return n + 1
    lo, hi = -1, n  # holds(hi); not holds(lo) (lo = -1: below the range)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if holds(mid) else (mid, hi)
    return hi


def _gaussian_power(n: int, budget: float, mu: float, alpha: float, delta: float) -> tuple[float, float]:
    """(lower, upper) bounds on the probability that a corner-grid bound from ``n`` trials a side
    exceeds ``budget``, the scores N(μ, 1) with the canary and N(0, 1) without: the larger and the
    sum of its two sides' probabilities (the A corners' largest bound, the B corners'), each
    simulated exactly in :data:`_RUNS` seeded runs.

    Corner A_c is the lowest threshold with at most c of the n OUT scores above it: the (c+1)-th
    largest OUT score X, whose survival u_c = P_OUT(score > X) is the (c+1)-th smallest of n
    uniforms (drawn jointly for every c, each the last plus a Beta share of what is left); the IN
    scores above it are those whose OUT survival is below u_c, each with probability
    T(u) = Φ(μ + Φ⁻¹(u)) (drawn jointly as binomial increments); the bound uses FP = c. Corner B_c
    mirrors it: the (c+1)-th smallest IN score, v_c its IN distribution value, the OUT scores at or
    above it each with probability Φ(−μ − Φ⁻¹(v)), TP = n − c."""
    from scipy import special

    rng = np.random.default_rng(0x46)  # the same draws for every n: the search moves smoothly
    grid = CornerGrid()
    counts = grid.counts(n)
    level = alpha / grid.k(n, n)
    sides = []
    for rate in (lambda u: special.ndtr(mu + special.ndtri(u)), lambda v: special.ndtr(-mu - special.ndtri(v))):
        at_u, done, below, prev_rate = np.zeros(_RUNS), 0, np.zeros(_RUNS, dtype=np.int64), np.zeros(_RUNS)
        hit = np.zeros(_RUNS, dtype=bool)
        for c in counts:
            j = int(c) + 1  # the (c+1)-th order statistic
            at_u = at_u + (1.0 - at_u) * rng.beta(j - done, n - j + 1, _RUNS)
            done = j
            r = rate(at_u) if len(sides) == 0 else 1.0 - rate(at_u)  # P(the other side's score is past it)
            step = np.clip((r - prev_rate) / np.maximum(1.0 - prev_rate, 1e-300), 0.0, 1.0)
            below = below + rng.binomial(n - below, step)
            prev_rate = r
            if len(sides) == 0:  # A_c: TP = `below` (the IN scores above the threshold), FP = c
                need = _fewest(lambda k, c=c: clopper_pearson_epsilon_array(k, n, c, n, level, delta) > budget, n)
            else:  # B_c: TP = n − c, FP = n − `below` (the OUT scores at or above the threshold)
                need = _fewest(
                    lambda k, c=c: clopper_pearson_epsilon_array(n - c, n, n - k, n, level, delta) > budget, n
                )
            hit |= below >= need  # the bound rises with `below`: it exceeds the budget from `need` on
        sides.append(float(np.mean(hit)))
    return max(sides), min(1.0, sum(sides))


def gaussian_trials_to_certify(
    budget: float,
    mu: float,
    *,
    alpha: float,
    delta: float,
    power: float = 0.5,
    max_per_side: int = MAX_TRIALS_PER_SIDE,
) -> tuple[int | None, int | None]:
    """(at least, enough): the trials N = 2n at which an audit of a Gaussian pair (trade-off curve
    G_``mu``), its detector the pair's optimal test, gets a corner-grid bound (confidence 1 −
    ``alpha``) above ``budget`` with probability ``power``: below the first, the two sides' summed
    probability is under ``power`` (not enough); at the second, the larger side's alone reaches it
    (:func:`_gaussian_power`; each side's probability simulated in :data:`_RUNS` seeded runs, so the
    ends are found to that simulation's error).
    None for an end beyond ``max_per_side`` a side (or never: the pair's ε(δ) ≤ ``budget``).

    >>> gaussian_trials_to_certify(1.0, 2.0, alpha=0.05, delta=1e-5)
    (76, 96)
    """
    budget = check_real("budget", budget)
    if budget < 0:
        raise InvalidParameter(f"budget must be >= 0, got {budget}")
    mu = check_real("mu", mu)
    if mu < 0:
        raise InvalidParameter(f"mu must be >= 0, got {mu}")
    alpha, delta, power = check_open_unit("alpha", alpha), check_delta(delta), check_open_unit("power", power)
    if mu == 0 or gdp_epsilon(mu, delta) <= budget:
        return None, None
    cache: dict[int, tuple[float, float]] = {}

    def at(n: int) -> tuple[float, float]:
        if n not in cache:
            cache[n] = _gaussian_power(n, budget, mu, alpha, delta)
        return cache[n]

    def fewest(which: int) -> int | None:
        """The fewest n a side with at(n)[which] >= power: doubling, then bisection (the probability
        rises with n, up to the corner grid's steps)."""
        lo, hi = 1, 2
        while at(hi)[which] < power:
            lo, hi = hi, 2 * hi
            if lo >= max_per_side:
                return None
            hi = min(hi, max_per_side)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if at(mid)[which] >= power else (mid, hi)
        return hi

    least, enough = fewest(1), fewest(0)
    return (None if least is None else 2 * least), (None if enough is None else 2 * enough)
