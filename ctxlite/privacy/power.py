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
"""

from __future__ import annotations

import math

import numpy as np

from ctxlite.errors import InvalidParameter
from ctxlite.privacy.estimators import (
    check_delta,
    check_open_unit,
    check_rate,
    check_real,
    clopper_pearson_epsilon_array,
    point_epsilon,
)

__all__ = ["MAX_TRIALS_PER_SIDE", "corner_grid_k", "dp_corner", "trials_to_certify"]

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
