"""Deliberately slow, obviously-right privacy profiles of vote pairs (:mod:`ctxlite.privacy.privacy_profile`).

The hockey-stick divergence from its definition: by enumerating every outcome sequence of the
composed release (discrete votes), or by Monte Carlo over the noisy one-hot vote in all k
dimensions with both mixture densities evaluated by scipy (Gaussian noise). Only for tests.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

__all__ = ["discrete_delta_by_enumeration", "noisy_vote_delta_monte_carlo"]


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
