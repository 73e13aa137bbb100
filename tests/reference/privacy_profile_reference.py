"""Deliberately slow, obviously-right privacy profiles of vote pairs (:mod:`ctxlite.privacy.privacy_profile`).

The hockey-stick divergence from its definition: by enumerating every outcome sequence of the
composed release (discrete votes), by Monte Carlo over the noisy one-hot vote in all k
dimensions with both mixture densities evaluated by scipy (Gaussian noise), or -- two outcomes
under noise, one release -- exactly: the loss is then monotone in the one coordinate that matters,
so each direction's δ(ε) is two normal tail masses at the point where the loss crosses ε. Only
for tests.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

__all__ = [
    "discrete_delta_by_enumeration",
    "noisy_vote_delta_monte_carlo",
    "two_outcome_noisy_vote_delta",
    "two_outcome_noisy_vote_epsilon",
]


def discrete_delta_by_enumeration(
    pairs: Sequence[tuple[float, Sequence[float], Sequence[float]]], queries: int, epsilon: float
) -> float:
    """max over directions of Σ_o (P(o) − e^ε Q(o))_+ over every sequence o of ``queries`` releases,
    each release the pair (component c, vote v) with P = w_c p_c[v], Q = w_c q_c[v]."""
    total = sum(w for w, _, _ in pairs)
    single = [(w / total * pv, w / total * qv) for w, p, q in pairs for pv, qv in zip(p, q)]
    best = 0.0
    for forward in (True, False):
        delta = 0.0
        for seq in itertools.product(single, repeat=queries):
            a = math.prod(x[0] if forward else x[1] for x in seq)
            b = math.prod(x[1] if forward else x[0] for x in seq)
            delta += max(a - math.exp(epsilon) * b, 0.0)
        best = max(best, delta)
    return best


def noisy_vote_delta_monte_carlo(
    p: Sequence[float], q: Sequence[float], sigma: float, epsilon: float, samples: int, seed: int = 0
) -> tuple[float, float]:
    """δ(ε) of one release e_v + N(0, σ² I_k), v ~ p vs v ~ q, by Monte Carlo in k dimensions:
    max over directions of E_A[(1 − e^ε B(x)/A(x))_+]. Returns (estimate, its standard error)."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    k = len(p)
    rng = np.random.default_rng(seed)
    eye = np.eye(k)

    def density(x, w):
        return sum(w[v] * stats.multivariate_normal(eye[v], sigma**2 * np.eye(k)).pdf(x) for v in range(k))

    best, err = 0.0, 0.0
    for a, b in ((p, q), (q, p)):
        votes = rng.choice(k, size=samples, p=a)
        x = eye[votes] + sigma * rng.standard_normal((samples, k))
        f = np.maximum(1.0 - math.exp(epsilon) * density(x, b) / density(x, a), 0.0)
        if f.mean() > best:
            best, err = float(f.mean()), float(f.std(ddof=1) / math.sqrt(samples))
    return best, err


def _two_outcome_loss(p, q, sigma: float, u: float) -> float:
    """log P(u)/Q(u) of u = (x_0 − x_1)/√2 = ±1/√2 + N(0, σ²) (vote 0: +, vote 1: −), the shared
    factor exp(−(u² + 1/2)/2σ²) cancelled."""
    a = u / (math.sqrt(2.0) * sigma**2)
    return float(
        np.logaddexp(math.log(p[0]) + a if p[0] > 0 else -math.inf, math.log(p[1]) - a if p[1] > 0 else -math.inf)
        - np.logaddexp(math.log(q[0]) + a if q[0] > 0 else -math.inf, math.log(q[1]) - a if q[1] > 0 else -math.inf)
    )


def _tail(w, sigma: float, u: float, upper: bool) -> float:
    """P(U > u) (``upper``) or P(U < u) for U ~ w_0 N(1/√2, σ²) + w_1 N(−1/√2, σ²)."""
    c = 1.0 / math.sqrt(2.0)
    f = stats.norm.sf if upper else stats.norm.cdf
    return float(w[0] * f((u - c) / sigma) + w[1] * f((u + c) / sigma))


def two_outcome_noisy_vote_delta(p: Sequence[float], q: Sequence[float], sigma: float, epsilon: float) -> float:
    """δ(ε) of one release e_v + N(0, σ² I_2), v ~ p vs v ~ q, exactly.

    Only u = (x_0 − x_1)/√2 depends on v (x_0 + x_1 has the same law under both), and the loss
    L(u) = log(p_0 e^{au} + p_1 e^{−au}) − log(q_0 e^{au} + q_1 e^{−au}), a = 1/(√2 σ²), is
    monotone in u (its derivative is a·[tanh(au + ½ log p_0/p_1) − tanh(au + ½ log q_0/q_1)]). So
    the set where L > ε (or −L > ε) is a half-line {u > u*} (or {u < u*}), u* found by bisection,
    and δ_P(ε) = P(L > ε) − e^ε Q(L > ε), δ_Q(ε) = Q(−L > ε) − e^ε P(−L > ε): tail masses of two
    normals. The profile is the larger of the two directions."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    best = 0.0
    for a, b in ((p, q), (q, p)):
        sign = 1.0 if _two_outcome_loss(a, b, sigma, 1.0) >= _two_outcome_loss(a, b, sigma, -1.0) else -1.0

        def g(t, a=a, b=b, sign=sign):  # the loss at u = sign·t: increasing in t
            return _two_outcome_loss(a, b, sigma, sign * t)

        lo, hi = -1.0, 1.0
        while g(hi) <= epsilon and hi < 1e6:
            hi *= 2.0
        if g(hi) <= epsilon:
            continue  # the loss never exceeds ε in this direction: δ = 0
        while g(lo) > epsilon and lo > -1e6:
            lo *= 2.0
        for _ in range(200):  # g(lo) <= ε < g(hi)
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if g(mid) > epsilon else (mid, hi)
        # the set {loss > ε} is {sign·u > hi}: u > hi, or u < −hi
        u_star, upper = sign * hi, sign > 0
        best = max(best, _tail(a, sigma, u_star, upper) - math.exp(epsilon) * _tail(b, sigma, u_star, upper))
    return best


def two_outcome_noisy_vote_epsilon(p: Sequence[float], q: Sequence[float], sigma: float, delta: float) -> float:
    """The smallest ε with :func:`two_outcome_noisy_vote_delta` ≤ ``delta``, by bisection (δ(ε)
    falls with ε); +inf when δ(ε) > ``delta`` up to ε = 200."""
    lo, hi = 0.0, 200.0
    if two_outcome_noisy_vote_delta(p, q, sigma, hi) > delta:
        return math.inf
    if two_outcome_noisy_vote_delta(p, q, sigma, lo) <= delta:
        return 0.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if two_outcome_noisy_vote_delta(p, q, sigma, mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi
