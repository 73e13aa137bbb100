"""The power calculation behind an inconclusive verdict, against a slow obviously-right reference:
Clopper–Pearson limits from scipy's beta quantiles at the expected counts, the corner grid's K from
``CornerGrid`` itself, and a plain loop over the number of trials."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ctxlite.privacy.estimators import CornerGrid, point_epsilon
from ctxlite.privacy.power import corner_grid_k, dp_corner, trials_to_certify


def _cp_epsilon(tp: int, n_in: int, fp: int, n_out: int, a: float, delta: float) -> float:
    """ε_lb = max(log((TPR_lo − δ)/FPR_hi), log((TNR_lo − δ)/FNR_hi), 0), each limit one-sided at a/2."""

    def lower(k, n):
        return 0.0 if k == 0 else stats.beta.ppf(a / 2, k, n - k + 1)

    def upper(k, n):
        return 1.0 if k == n else stats.beta.ppf(1 - a / 2, k + 1, n - k)

    def log_ratio(num, den):
        if num <= 0:
            return -math.inf
        return math.inf if den <= 0 else math.log(num / den)

    a_term = log_ratio(lower(tp, n_in) - delta, upper(fp, n_out))
    b_term = log_ratio(lower(n_out - fp, n_out) - delta, upper(n_in - tp, n_in))
    return max(a_term, b_term, 0.0)


def _reference(budget, tpr, fpr, alpha, delta, max_per_side):
    for n in range(2, max_per_side + 1):
        k = CornerGrid().k(n, n)
        tp, fp = int(np.rint(tpr * n)), int(np.rint(fpr * n))
        if _cp_epsilon(tp, n, fp, n, alpha / k, delta) > budget:
            return 2 * n
    return None


def test_the_corner_count_is_the_corner_grids():
    n = np.arange(1, 3000)
    assert corner_grid_k(n).tolist() == [CornerGrid().k(int(m), int(m)) for m in n]


def test_the_corner_is_on_both_dp_inequalities():
    for eps, delta in [(0.0, 0.0), (1.0, 1e-5), (5.0, 0.01), (40.0, 1e-5)]:
        tpr, fpr = dp_corner(eps, delta)
        assert tpr == pytest.approx(math.exp(eps) * fpr + delta, rel=1e-12, abs=1e-300)
        assert tpr == 1 - fpr  # symmetric: FNR = FPR, so TNR = e^ε·FNR + δ is the same equation
        assert 1 - fpr == pytest.approx(math.exp(eps) * fpr + delta, rel=1e-12, abs=1e-300)


@settings(max_examples=25, deadline=None)
@given(
    eps=st.floats(0.5, 12.0),
    budget=st.floats(0.0, 4.0),
    alpha=st.sampled_from([0.05, 0.1, 0.2]),
    delta=st.sampled_from([0.0, 1e-5, 1e-3]),
)
def test_trials_to_certify_matches_the_loop_at_a_dp_corner(eps, budget, alpha, delta):
    tpr, fpr = dp_corner(eps, delta)
    fast = trials_to_certify(budget, tpr, fpr, alpha=alpha, delta=delta, max_per_side=400)
    assert fast == _reference(budget, tpr, fpr, alpha, delta, 400)


@settings(max_examples=25, deadline=None)
@given(tpr=st.floats(0.0, 1.0), fpr=st.floats(0.0, 1.0), budget=st.floats(0.0, 3.0))
def test_trials_to_certify_matches_the_loop_at_any_rates(tpr, fpr, budget):
    fast = trials_to_certify(budget, tpr, fpr, alpha=0.05, delta=1e-5, max_per_side=300)
    assert fast == _reference(budget, tpr, fpr, 0.05, 1e-5, 300)
    if point_epsilon(tpr, fpr, 1e-5) <= budget:
        assert fast is None  # the bound never passes the plug-in value


def test_the_issues_reproducer_needed_more_trials_than_it_had():
    """Exact ε 26.6, budget 1: even an optimal test needs ~40 trials before ε_lb can exceed 1, and the
    bound it reaches there is what the reference gives at those counts."""
    tpr, fpr = dp_corner(26.6, 1e-5)
    n = trials_to_certify(1.0, tpr, fpr, alpha=0.05, delta=1e-5)
    assert n == 40
    k = CornerGrid().k(20, 20)
    assert (
        _cp_epsilon(20, 20, 0, 20, 0.05 / k, 1e-5)
        > 1.0
        >= _cp_epsilon(19, 19, 0, 19, 0.05 / CornerGrid().k(19, 19), 1e-5)
    )


def test_an_audit_at_the_computed_size_certifies_the_budget_about_half_the_time():
    """At the expected counts the bound is the one a typical audit reaches: simulated audits of that
    many trials (a fixed threshold test with the corner's rates, corner-grid level α/K) exceed the
    budget in a good part of runs, and audits of a quarter of that size almost never do."""
    rng = np.random.default_rng(0)
    budget, alpha, delta = 1.0, 0.05, 1e-5
    tpr, fpr = dp_corner(2.0, delta)
    n = trials_to_certify(budget, tpr, fpr, alpha=alpha, delta=delta) // 2

    def share(m):
        hits = 0
        for _ in range(400):
            tp, fp = rng.binomial(m, tpr), rng.binomial(m, fpr)
            hits += _cp_epsilon(int(tp), m, int(fp), m, alpha / CornerGrid().k(m, m), delta) > budget
        return hits / 400

    assert 0.3 < share(n) < 0.8
    assert share(max(2, n // 4)) < 0.05


def _simulated_share(mu, n, budget, alpha, delta, runs, seed):
    """The share of ``runs`` simulated audits of ``n`` trials a side that certify more than ``budget``:
    the pair's optimal test (scores N(μ, 1) with the canary, N(0, 1) without), the corner-grid bound."""
    from ctxlite.privacy.estimators import CanaryScoreAuditor

    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(runs):
        auditor = CanaryScoreAuditor(rng.normal(mu, 1.0, n), rng.normal(0.0, 1.0, n))
        hits += auditor.epsilon_clopper_pearson(alpha=alpha, delta=delta, selection=CornerGrid()).epsilon > budget
    return hits / runs


def test_a_gaussian_pair_needs_the_trials_of_its_own_shape():
    """Issue 46: Gaussian μ = 2 (exact ε(1e-5) ≈ 10), budget 1. The (ε, δ) corner said 40 trials, where
    simulated audits certify more than 1 one time in a hundred. The pair's own shape gives [lo, hi]:
    at hi trials the simulated audits certify it at least half the time, below lo at most half the
    time (each within 3 binomial standard errors of the simulation: 400 runs, ±0.075)."""
    from ctxlite.privacy.power import gaussian_trials_to_certify

    budget, alpha, delta, mu = 1.0, 0.05, 1e-5, 2.0
    lo, hi = gaussian_trials_to_certify(budget, mu, alpha=alpha, delta=delta)
    assert 40 < lo <= hi
    tol = 3 * math.sqrt(0.25 / 400)
    assert _simulated_share(mu, hi // 2, budget, alpha, delta, 400, 1) >= 0.5 - tol
    assert _simulated_share(mu, lo // 2 - 1, budget, alpha, delta, 400, 2) <= 0.5 + tol
    assert _simulated_share(mu, 20, budget, alpha, delta, 400, 3) <= 0.05  # the corner's 40 trials
