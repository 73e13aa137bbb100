"""The audit row's pair fields (:func:`ctxlite.audit.report.report_row`) and the gate that reads them
(:func:`ctxlite.gates.epsilon_case`), on pairs whose true ε is known by a closed form or a slow
reference (no model)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.audit.mechanisms import ReportNoisyMax
from ctxlite.audit.report import PairReference, report_row
from ctxlite.audit.settings import AuditSettings
from ctxlite.gates import Basis, Outcome, epsilon_case
from ctxlite.privacy.estimators import gdp_epsilon
from ctxlite.privacy.privacy_profile import VotePair, pair_profile

RNM = AuditSettings(mechanism="rnm", epsilons=(1.0,), delta=1e-5, shots=1, ensembles=1)
INS, OUTS = np.linspace(0.0, 1.0, 50), np.linspace(0.0, 1.0, 50) + 0.01  # certify nothing


def _rnm_row(p, q, eps=1.0):
    mech = ReportNoisyMax(1, 1, eps, RNM.delta)
    known = PairReference(pair_profile([VotePair(1.0, p, q)], mech.sigma, 1), "a test pair", True)
    return report_row(RNM, mech, eps, INS, OUTS, None, known=known), mech


def test_a_certain_flip_under_rnm_is_exactly_the_gaussian_mechanism_and_meets_its_budget():
    """The issue's reproducer: RNM at ε = 1, δ = 1e-5, a canary that flips a certain vote,
    --fail-above-epsilon 1. The grid said 1.000184, labelled exact, and the gate failed; the pair is
    the Gaussian mechanism, whose ε is 1 (the calibration's own closed form)."""
    row, mech = _rnm_row(np.eye(3)[0], np.eye(3)[1])
    mu = math.sqrt(2) / mech.sigma
    assert row.epsilon_exact == gdp_epsilon(mu, 1e-5) and f"{row.epsilon_exact:.6f}" == "1.000000"
    assert row.epsilon_exact <= 1.0 and row.epsilon_upper_bound == row.epsilon_exact
    assert row.privacy_profile_kind == "exact"
    case = epsilon_case(row, RNM, 1.0)
    assert case.outcome is Outcome.PASS, case.message
    assert case.basis is Basis.EXACT and "exact ε(δ=1e-05) 1.000 ≤ budget 1" in case.message


@settings(max_examples=10, deadline=None)
@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.sampled_from([0.5, 1.0, 2.0, 4.0]), st.booleans())
def test_the_gate_never_fails_a_mixed_vote_pair_within_its_budget(a, b, eps, third):
    """Mixed votes (a Gaussian mixture, no closed form): the row brackets the pair's ε, the bracket
    holds the true value (the exact two-outcome integral, tests/reference; a label never voted is
    pure noise under both neighbours), a budget at or above the true value is never failed, and one
    below the bracket's lower end always is."""
    from tests.reference.privacy_profile_reference import two_outcome_noisy_vote_epsilon

    p, q = np.array([a, 1 - a, 0.0]), np.array([b, 1 - b, 0.0])
    if third:  # the same votes, the third label first: the labels' order changes nothing
        p, q = p[[2, 0, 1]], q[[2, 0, 1]]
    row, mech = _rnm_row(p, q, eps)
    true = two_outcome_noisy_vote_epsilon([a, 1 - a], [b, 1 - b], mech.sigma, RNM.delta)
    lo, hi = row.epsilon_pair_at_least, row.epsilon_upper_bound
    if row.epsilon_exact is not None:  # certain votes: the closed form
        assert row.epsilon_exact == pytest.approx(true, abs=1e-9) and lo == hi == row.epsilon_exact
    else:
        assert "computed on a grid" in row.reasons["epsilon_exact"]
    assert lo - 1e-9 <= true <= hi + 1e-9, (lo, true, hi)
    for budget in (true, true + 1e-3, (true + hi) / 2, hi):
        assert epsilon_case(row, RNM, budget).outcome is not Outcome.FAIL, (budget, lo, true, hi)
    if lo > 0.01 and row.epsilon_exact is None:
        below = epsilon_case(row, RNM, lo * 0.99)
        assert below.outcome is Outcome.FAIL and below.basis is Basis.PAIR_AT_LEAST, below.message


def test_mixed_votes_over_three_labels_are_bracketed_not_called_exact():
    """The issue's second case: mixed votes over 3 labels, where the grid's rounded-up value
    over-stated ε by up to 0.13 and was labelled exact. The row calls it an upper bound, gives the
    lower end, and a budget between the two is inconclusive, not a failure."""
    row, _ = _rnm_row(np.array([0.6, 0.3, 0.1]), np.array([0.1, 0.3, 0.6]), 1.0)
    lo, hi = row.epsilon_pair_at_least, row.epsilon_upper_bound
    assert row.epsilon_exact is None and row.privacy_profile_kind == "exact" and 0 < lo < hi
    assert row.audit_tightness is None and row.audit_tightness_at_least == pytest.approx(row.epsilon_lower_bound / hi)
    straddled = epsilon_case(row, RNM, (lo + hi) / 2)
    assert straddled.outcome is Outcome.INCONCLUSIVE and "which straddles" in straddled.message, straddled.message
    assert epsilon_case(row, RNM, hi).outcome is Outcome.PASS


@pytest.mark.parametrize("eps, delta", [(3.0, 1e-5), (16.0, 1e-5), (8.0, 1e-6), (5.0, 1e-4), (32.0, 1e-3)])
def test_a_mechanism_calibrated_to_its_budget_meets_it_to_float_precision(eps, delta):
    """RNM calibrated to ε (σ nudged until δ(ε) ≤ δ holds in floating point), a certain flip, and a
    budget of that ε: the closed form solves to ε + ~1e-14 (Brent's method, and μ = √2/σ rounded), so
    "exact 3.000 > budget 3" failed it, and the guarantee read "3.000 > budget 3" too. Values within
    the solve's precision (1e-12 relative) of the budget meet it."""
    s = AuditSettings(mechanism="rnm", epsilons=(eps,), delta=delta, shots=1, ensembles=1)
    mech = ReportNoisyMax(1, 1, eps, delta)
    known = PairReference(pair_profile([VotePair(1.0, np.eye(3)[0], np.eye(3)[1])], mech.sigma, 1), "a pair", True)
    row = report_row(s, mech, eps, INS, OUTS, None, known=known)
    assert row.epsilon_exact == pytest.approx(eps, rel=1e-12)
    case = epsilon_case(row, s, eps)
    assert case.outcome is Outcome.PASS and case.basis is Basis.EXACT, case.message
    assert epsilon_case(row, s, eps * (1 - 1e-9)).outcome is Outcome.FAIL  # beyond the precision: fails
