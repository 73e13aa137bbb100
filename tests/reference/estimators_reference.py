"""Deliberately slow, obviously-right versions of :mod:`ctxlite.privacy.estimators`.

Only for tests: each function re-derives a quantity the simplest way (Python
loops over thresholds, inverting the binomial CDF with a root finder instead of
``Beta.ppf``, dense grids instead of Brent's method) so the fast code can be
checked against it by property-based tests. Not part of the public API.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
from scipy import optimize, stats

__all__ = [
    "tpr_fpr_loop",
    "thresholds_loop",
    "threshold_at_fpr_loop",
    "audit_accuracy_loop",
    "point_epsilon_plain",
    "clopper_pearson_epsilon_by_binomial",
    "best_clopper_pearson_loop",
    "corner_grid_loop",
    "mu_lower_by_binomial",
    "roc_hull_brute",
    "auroc_pairs",
    "accuracy_upper_loop",
    "gdp_mu_plain",
    "gdp_epsilon_grid",
    "gaussian_delta_by_integration",
    "one_run_epsilon_grid",
]


def tpr_fpr_loop(in_scores: Sequence[float], out_scores: Sequence[float], threshold: float) -> tuple[float, float]:
    """Count, one score at a time, how many are >= threshold."""
    tp = 0
    for s in in_scores:
        if s >= threshold:
            tp += 1
    fp = 0
    for s in out_scores:
        if s >= threshold:
            fp += 1
    return tp / len(in_scores), fp / len(out_scores)


def thresholds_loop(in_scores, out_scores) -> list[float]:
    """Every observed score, ascending, then +inf."""
    return sorted(set(float(s) for s in in_scores) | set(float(s) for s in out_scores)) + [math.inf]


def threshold_at_fpr_loop(in_scores, out_scores, fpr: float) -> float:
    """Walk the candidates upwards; the first with FPR <= fpr wins."""
    for t in thresholds_loop(in_scores, out_scores):
        if tpr_fpr_loop(in_scores, out_scores, t)[1] <= fpr + 1e-12:
            return t
    raise AssertionError("unreachable: +inf has FPR 0")


def audit_accuracy_loop(in_scores, out_scores) -> float:
    best = 0.0
    for t in thresholds_loop(in_scores, out_scores):
        tpr, fpr = tpr_fpr_loop(in_scores, out_scores, t)
        best = max(best, 0.5 * (tpr + 1.0 - fpr))
    return best


def _log_or_inf(num: float, den: float) -> float:
    if num <= 0:
        return -math.inf
    if den <= 0:
        return math.inf
    return math.log(num / den)


def point_epsilon_plain(tpr: float, fpr: float, delta: float = 0.0) -> float:
    return max(_log_or_inf(tpr - delta, fpr), _log_or_inf(1 - fpr - delta, 1 - tpr), 0.0)


def _binomial_lower(k: int, n: int, a: float) -> float:
    """The p at which P[Bin(n, p) >= k] = a (0 if k = 0)."""
    if k == 0:
        return 0.0
    return optimize.brentq(lambda p: stats.binom.sf(k - 1, n, p) - a, 0.0, 1.0, xtol=1e-15, rtol=1e-14)


def _binomial_upper(k: int, n: int, a: float) -> float:
    """The p at which P[Bin(n, p) <= k] = a (1 if k = n)."""
    if k == n:
        return 1.0
    return optimize.brentq(lambda p: stats.binom.cdf(k, n, p) - a, 0.0, 1.0, xtol=1e-15, rtol=1e-14)


def clopper_pearson_epsilon_by_binomial(tp, n_in, fp, n_out, alpha=0.05, delta=0.0) -> float:
    """Clopper--Pearson by its definition: invert the binomial tail with brentq."""
    a = alpha / 2
    tpr_lo = _binomial_lower(tp, n_in, a)
    fpr_hi = _binomial_upper(fp, n_out, a)
    tnr_lo = _binomial_lower(n_out - fp, n_out, a)
    fnr_hi = _binomial_upper(n_in - tp, n_in, a)
    return max(_log_or_inf(tpr_lo - delta, fpr_hi), _log_or_inf(tnr_lo - delta, fnr_hi), 0.0)


def best_clopper_pearson_loop(in_scores, out_scores, alpha, delta, thresholds) -> float:
    """Max over thresholds of the Clopper--Pearson bound at level alpha."""
    best = 0.0
    for t in thresholds:
        tpr, fpr = tpr_fpr_loop(in_scores, out_scores, t)
        tp = round(tpr * len(in_scores))
        fp = round(fpr * len(out_scores))
        best = max(best, clopper_pearson_epsilon_by_binomial(tp, len(in_scores), fp, len(out_scores), alpha, delta))
    return best


def _grid(n: int, ratio: float) -> list[int]:
    counts, power = [0], 1.0
    while round(power) <= n // 2:
        if round(power) not in counts:
            counts.append(round(power))
        power *= ratio
    return counts


def corner_grid_loop(in_scores, out_scores, alpha, delta, ratio=2.0, seed=0) -> float:
    """The corner grid by its definition: rank the pooled scores (ties by the seeded uniform draws),
    walk the rank thresholds for each grid count, bound at alpha / K with the grid count on the side
    that fixed the corner."""
    n_in, n_out = len(in_scores), len(out_scores)
    u = np.random.default_rng(seed).random(n_in + n_out)
    pooled = sorted((float(s), float(u[i]), i) for i, s in enumerate(list(in_scores) + list(out_scores)))
    rank = {i: r for r, (_, _, i) in enumerate(pooled)}
    in_scores = [rank[i] for i in range(n_in)]
    out_scores = [rank[n_in + j] for j in range(n_out)]
    thresholds = thresholds_loop(in_scores, out_scores)  # ascending, then +inf
    out_grid, in_grid = _grid(n_out, ratio), _grid(n_in, ratio)
    a = alpha / (len(out_grid) + len(in_grid))
    best = 0.0
    for c in out_grid:  # the lowest threshold with at most c OUT scores at or above it
        t = next(t for t in thresholds if sum(s >= t for s in out_scores) <= c)
        tp = sum(s >= t for s in in_scores)
        best = max(best, clopper_pearson_epsilon_by_binomial(tp, n_in, c, n_out, a, delta))
    for c in in_grid:  # the highest threshold with at most c IN scores below it
        t = [t for t in thresholds if sum(s < t for s in in_scores) <= c][-1]
        fp = sum(s >= t for s in out_scores)
        best = max(best, clopper_pearson_epsilon_by_binomial(n_in - c, n_in, fp, n_out, a, delta))
    return best


def mu_lower_by_binomial(tp, n_in, fp, n_out, alpha) -> float:
    """Phi^-1(TPR_lo) - Phi^-1(FPR_hi), both limits by binomial inversion, floored at 0."""
    tpr_lo = _binomial_lower(tp, n_in, alpha / 2)
    fpr_hi = _binomial_upper(fp, n_out, alpha / 2)
    if tpr_lo == 0.0 or fpr_hi == 1.0:
        return 0.0
    return max(float(stats.norm.ppf(tpr_lo) - stats.norm.ppf(fpr_hi)), 0.0)


def roc_hull_brute(fpr: Sequence[float], tpr: Sequence[float]) -> list[tuple[float, float]]:
    """The upper hull by its definition: a distinct ROC point stays unless it lies on or below the
    segment between two others on either side of it (O(n^3); jax_privacy's test uses the same rule),
    decided in exact rational arithmetic (rates are counts over at most 10^4 trials)."""
    exact = {
        (Fraction(x).limit_denominator(10**4), Fraction(y).limit_denominator(10**4)): (x, y) for x, y in zip(fpr, tpr)
    }
    points = sorted(exact)
    keep = []
    for j, (xj, yj) in enumerate(points):
        dominated = False
        for i in range(j):
            for k in range(j + 1, len(points)):
                (xi, yi), (xk, yk) = points[i], points[k]
                if (xj - xi) * (yk - yi) - (yj - yi) * (xk - xi) >= 0:
                    dominated = True
        if not dominated:
            keep.append(exact[xj, yj])
    return keep


def auroc_pairs(in_scores, out_scores) -> float:
    """P[IN > OUT] + P[IN = OUT] / 2 over all pairs."""
    total = 0.0
    for a in in_scores:
        for b in out_scores:
            total += 1.0 if a > b else (0.5 if a == b else 0.0)
    return total / (len(in_scores) * len(out_scores))


def accuracy_upper_loop(in_scores, out_scores, alpha, prevalence=0.5) -> float:
    """Max over thresholds of pi * TPR_hi + (1 - pi) * TNR_hi, each limit by binomial inversion at alpha / 2."""
    n_in, n_out = len(in_scores), len(out_scores)
    best = 0.0
    for t in thresholds_loop(in_scores, out_scores):
        tp = sum(s >= t for s in in_scores)
        tn = sum(s < t for s in out_scores)
        value = prevalence * _binomial_upper(tp, n_in, alpha / 2) + (1 - prevalence) * _binomial_upper(
            tn, n_out, alpha / 2
        )
        best = max(best, value)
    return best


def gdp_mu_plain(tpr: float, fpr: float) -> float:
    return float(stats.norm.ppf(1 - fpr) - stats.norm.ppf(1 - tpr))


def _gdp_delta_plain(mu: float, eps: np.ndarray) -> np.ndarray:
    return stats.norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


def gdp_epsilon_grid(mu: float, delta: float, step: float = 1e-4, eps_max: float = 40.0) -> float:
    """First epsilon on a dense grid whose delta(epsilon) <= delta (accurate to ``step``)."""
    if mu <= 0:
        return 0.0
    grid = np.arange(0.0, eps_max, step)
    ok = _gdp_delta_plain(mu, grid) <= delta
    if not ok.any():
        raise AssertionError(f"grid too short for mu={mu}")
    return float(grid[np.argmax(ok)])


def gaussian_delta_by_integration(
    sigma: float, epsilon: float, sensitivity: float = 1.0, points: int = 400_001
) -> float:
    """Hockey-stick divergence of N(sensitivity, sigma^2) from N(0, sigma^2) on a grid.

    delta(eps) = integral of max(0, p(x) - e^eps q(x)) dx, the definition of
    the smallest delta for which the pair satisfies (eps, delta)-DP.
    """
    lo = min(0.0, sensitivity) - 40 * sigma
    hi = max(0.0, sensitivity) + 40 * sigma
    x = np.linspace(lo, hi, points)
    p = stats.norm.pdf(x, loc=sensitivity, scale=sigma)
    q = stats.norm.pdf(x, loc=0.0, scale=sigma)
    f = np.maximum(p - math.exp(epsilon) * q, 0.0)
    return float(np.trapezoid(f, x) if hasattr(np, "trapezoid") else np.trapz(f, x))


def one_run_epsilon_grid(
    m: int, r: int, v: int, alpha: float = 0.05, delta: float = 0.0, step: float = 1e-3, eps_max: float = 20.0
) -> float:
    """Largest grid epsilon whose one-run p-value (pure-Python binomial sums) is <= alpha.

    Walks up the grid and stops at the first epsilon that is not rejected.
    """

    def pmf(k: int, q: float) -> float:
        return math.comb(r, k) * q**k * (1 - q) ** (r - k)

    def p_value(eps: float) -> float:
        q = 1.0 / (1.0 + math.exp(-eps))
        pm = [pmf(k, q) for k in range(r + 1)]
        p = sum(pm[v:])
        if delta > 0:
            best = 0.0
            for i in range(1, v + 1):
                best = max(best, sum(pm[max(v - i, 0) : v]) / i)
            p += 2 * m * delta * best
        return p

    last_rejected = 0.0
    eps = 0.0
    while eps < eps_max:
        if p_value(eps) > alpha:
            return last_rejected
        last_rejected = eps
        eps += step
    return last_rejected
