"""What k releases, each ε-DP, guarantee together (composition of pure differential privacy).

Basic composition: the k-fold adaptive composition of ε-DP mechanisms is (kε, 0)-DP. The optimal
composition theorem (Kairouz, Oh and Viswanath, "The Composition Theorem for Differential Privacy",
ICML 2015) gives, for every ε' ≥ 0, the smallest δ for which it is (ε', δ)-DP: k-fold randomized
response with p = e^ε / (1 + e^ε), q = 1 − p, is the worst case, and δ is its hockey-stick
divergence between neighbouring inputs,

    δ_k(ε') = Σ_{i : (k−2i)ε > ε'} C(k, i) (p^{k−i} q^i − e^{ε'} p^i q^{k−i}),

continuous and decreasing in ε'. :func:`composed_epsilon` returns the smallest ε' with δ_k(ε') ≤ δ
(never more than kε, where δ_k = 0): an (ε', δ) guarantee, tight for this composition. At
δ = 1e-5 it is a tenth below kε from 14 releases at ε = 0.05, 53 at ε = 1 and 315 at ε = 2; over
1,000 releases it is 7.5 against 50 at ε = 0.05 and 578 against 1,000 at ε = 1.
:func:`max_compositions` is the largest k whose ε' stays within a budget.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln, logsumexp

from ctxlite.errors import InvalidParameter

__all__ = ["MAX_COUNTED", "composed_delta", "composed_epsilon", "max_compositions"]


def _check(k: int, epsilon: float, delta: float | None = None) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise InvalidParameter(f"the number of compositions must be an integer >= 0, got {k!r}")
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise InvalidParameter(f"epsilon must be a finite number > 0, got {epsilon}")
    if delta is not None and not 0 < delta < 1:
        raise InvalidParameter(f"delta must be in (0, 1), got {delta}")


def composed_delta(k: int, epsilon: float, eps_total: float) -> float:
    """δ_k(ε'): the smallest δ for which k ε-DP releases are (``eps_total``, δ)-DP (module docstring)."""
    _check(k, epsilon)
    if math.isnan(eps_total):
        raise InvalidParameter("eps_total must be a number, got nan")
    i = np.arange(k + 1)
    active = (k - 2 * i) * epsilon > eps_total
    if not active.any():
        return 0.0
    i = i[active]
    log_p, log_q = -np.logaddexp(0.0, -epsilon), -np.logaddexp(0.0, epsilon)
    log_binom = gammaln(k + 1) - gammaln(i + 1) - gammaln(k - i + 1)
    first = log_binom + (k - i) * log_p + i * log_q  # the larger of each term's two parts
    gap = eps_total - (k - 2 * i) * epsilon  # < 0 on the active terms: log(second / first)
    return float(min(1.0, np.exp(logsumexp(first + np.log(-np.expm1(gap))))))


def composed_epsilon(k: int, epsilon: float, delta: float) -> float:
    """The smallest ε' with δ_k(ε') ≤ ``delta``: k ε-DP releases are (ε', δ)-DP, ε' ≤ kε.

    δ_k is continuous and decreasing, so bisection on [0, kε] brackets ε'; the upper end is
    returned (a guarantee, within 1e-9·kε of the exact ε')."""
    _check(k, epsilon, delta)
    lo, hi = 0.0, k * epsilon
    if k == 0 or composed_delta(k, epsilon, 0.0) <= delta:
        return 0.0
    while hi - lo > 1e-9 * max(hi, 1e-12):
        mid = 0.5 * (lo + hi)
        if composed_delta(k, epsilon, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


MAX_COUNTED = 10**7
"""The most releases :func:`max_compositions` counts with a δ (each :func:`composed_delta` is a sum
of k terms): a budget that would allow more is held to this many, fewer than it allows."""


def max_compositions(budget: float, epsilon: float, delta: float | None = None) -> int:
    """The most ε-DP releases whose composition stays within ``budget``: ⌊budget / ε⌋ by basic
    composition (``delta`` None), else the largest k ≤ :data:`MAX_COUNTED` with
    :func:`composed_epsilon` ≤ budget (composed ε' grows with k, so a doubling then bisection finds
    it)."""
    if not (budget >= 0 and math.isfinite(budget)):
        raise InvalidParameter(f"the budget must be a finite number >= 0, got {budget}")
    _check(0, epsilon, delta)
    basic = int(math.floor(budget / epsilon + 1e-9))
    if delta is None:
        return basic
    fits = lambda k: composed_epsilon(k, epsilon, delta) <= budget  # noqa: E731
    lo = min(basic, MAX_COUNTED)
    if not fits(lo):  # ⌊budget/ε⌋ rounded up by its 1e-9 slack: one fewer then
        return lo - 1
    hi = min(max(2 * lo, 1), MAX_COUNTED + 1)
    while hi <= MAX_COUNTED and fits(hi):
        lo, hi = hi, min(2 * hi, MAX_COUNTED + 1)
    if hi > MAX_COUNTED:
        if fits(MAX_COUNTED):
            return MAX_COUNTED
        hi = MAX_COUNTED
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
