"""Tests for ctxlite.privacy.calibration: the analytic sigma table (Balle & Wang 2018; values
recomputed independently, docs/design.md#reference-values-in-the-tests), the forward
delta formula against brute-force integration, sensitivities, and the PLD
accountant (dp-accounting) against the analytic per-query Gaussian."""

import math

import dp_accounting  # noqa: E402,F401  (a hard dependency: a broken install must fail here, never skip)
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import estimators_reference as ref

from ctxlite.errors import InvalidParameter
from ctxlite.privacy.calibration import (
    Neighbouring,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
    calibrate_subsampled_sigma,
    esa_l2_sensitivity,
    gaussian_delta,
    rnm_l2_sensitivity,
    subsampled_gaussian_epsilon,
)

# ---------------------------------------------------------------------------
# Analytic Gaussian sigma for sensitivity 1 (Balle & Wang 2018): the smallest sigma with
# Phi(1/(2 sigma) - eps sigma) - e^eps Phi(-1/(2 sigma) - eps sigma) <= delta, solved
# independently with scipy (docs/design.md#reference-values-in-the-tests).


@pytest.mark.parametrize(
    "epsilon, delta, sigma",
    [
        (0.5, 1e-5, 7.0318),
        (1.0, 1e-5, 3.7306),
        (3.0, 1e-5, 1.3906),
        (8.0, 1e-5, 0.6002),
        (1.0, 1e-4, 3.1857),
        (3.0, 1e-4, 1.2232),
        (8.0, 1e-4, 0.5431),
    ],
)
def test_analytic_sigma_spec_table(epsilon, delta, sigma):
    got = analytic_gaussian_sigma(epsilon, delta, sensitivity=1.0)
    assert round(got, 4) == sigma
    # it is the *smallest* such sigma: the constraint holds at it and fails just below
    assert gaussian_delta(got, epsilon) <= delta
    assert gaussian_delta(got * (1 - 1e-9), epsilon) > delta


def test_analytic_sigma_scales_with_sensitivity():
    base = analytic_gaussian_sigma(3.0, 1e-5)
    assert analytic_gaussian_sigma(3.0, 1e-5, sensitivity=math.sqrt(2)) == pytest.approx(math.sqrt(2) * base, rel=1e-12)
    assert analytic_gaussian_sigma(
        3.0, 1e-5, sensitivity=esa_l2_sensitivity(0.5, Neighbouring.REPLACE)
    ) == pytest.approx(base, rel=1e-12)


def test_analytic_sigma_infinite_epsilon_is_zero():
    assert analytic_gaussian_sigma(math.inf, 1e-5) == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(epsilon=0.0, delta=1e-5),
        dict(epsilon=-1.0, delta=1e-5),
        dict(epsilon=float("nan"), delta=1e-5),
        dict(epsilon=1.0, delta=0.0),
        dict(epsilon=1.0, delta=1.0),
        dict(epsilon=1.0, delta=-1e-5),
        dict(epsilon=1.0, delta=1e-5, sensitivity=0.0),
        dict(epsilon=1.0, delta=1e-5, sensitivity=-2.0),
    ],
)
def test_analytic_sigma_rejects_bad_parameters(kwargs):
    with pytest.raises(InvalidParameter):
        analytic_gaussian_sigma(**kwargs)


def test_error_names_bad_value():
    with pytest.raises(InvalidParameter, match="epsilon.*-1.0"):
        analytic_gaussian_sigma(-1.0, 1e-5)
    with pytest.raises(InvalidParameter, match="delta.*1.5"):
        analytic_gaussian_sigma(1.0, 1.5)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.01, 20.0), st.floats(1e-12, 0.5))
def test_analytic_sigma_inverts_forward_formula(epsilon, delta):
    sigma = analytic_gaussian_sigma(epsilon, delta)
    assert gaussian_delta(sigma, epsilon) <= delta
    assert gaussian_delta(sigma * (1 - 1e-7), epsilon) >= delta * (1 - 1e-6)
    # the inverse in epsilon gives back epsilon
    assert analytic_gaussian_epsilon(sigma, delta) == pytest.approx(epsilon, rel=1e-6, abs=1e-9)


def test_classic_formula_is_not_the_analytic_one():
    """sqrt(2 ln(1.25/delta))/eps over-noises at eps = 0.5 (and is invalid for eps >= 1)."""
    classic = math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5
    assert analytic_gaussian_sigma(0.5, 1e-5) < classic


# ---------------------------------------------------------------------------
# forward formula vs brute force


@settings(max_examples=15, deadline=None)
@given(st.floats(0.2, 5.0), st.floats(0.0, 6.0), st.floats(0.5, 3.0))
def test_gaussian_delta_matches_integration(sigma, epsilon, sensitivity):
    fast = gaussian_delta(sigma, epsilon, sensitivity)
    slow = ref.gaussian_delta_by_integration(sigma, epsilon, sensitivity)
    assert fast == pytest.approx(slow, abs=1e-8, rel=1e-5)


def test_gaussian_delta_edge_cases():
    assert gaussian_delta(0.0, 1.0) == 1.0
    assert gaussian_delta(1.0, math.inf) == 0.0
    assert gaussian_delta(2.0, 0.0) == pytest.approx(ref.gaussian_delta_by_integration(2.0, 0.0))
    # large epsilon: log-space evaluation, no overflow, tiny but non-negative
    assert 0.0 <= gaussian_delta(0.1, 200.0) < 1e-30
    with pytest.raises(InvalidParameter):
        gaussian_delta(-1.0, 1.0)


# ---------------------------------------------------------------------------
# sensitivities


def test_sensitivities():
    """m fixed ensembles: one record moves one vote / swaps one clipped vector under either relation
    (brute-forced over neighbouring record sets in test_soundness.py)."""
    assert rnm_l2_sensitivity(Neighbouring.REPLACE) == pytest.approx(math.sqrt(2))
    assert rnm_l2_sensitivity(Neighbouring.ADD_REMOVE) == pytest.approx(math.sqrt(2))
    assert esa_l2_sensitivity(3.0, Neighbouring.REPLACE) == 6.0
    assert esa_l2_sensitivity(3.0, Neighbouring.ADD_REMOVE) == 6.0
    with pytest.raises(InvalidParameter):
        rnm_l2_sensitivity("replace")
    with pytest.raises(InvalidParameter):
        esa_l2_sensitivity(0.0, Neighbouring.REPLACE)
    with pytest.raises(InvalidParameter):
        esa_l2_sensitivity(1.0, None)


# ---------------------------------------------------------------------------
# PLD accountant (dp-accounting)


@settings(max_examples=8, deadline=None)
@given(st.floats(1.0, 8.0), st.sampled_from([1e-6, 1e-5, 1e-3]), st.sampled_from([1.0, math.sqrt(2)]))
def test_pld_single_query_matches_analytic(sigma, delta, sensitivity):
    """q = 1, T = 1 is one Gaussian release: the PLD epsilon is the analytic one, pessimistically rounded."""
    analytic = analytic_gaussian_epsilon(sigma, delta, sensitivity)
    pld = subsampled_gaussian_epsilon(sigma, sensitivity, 1.0, 1, delta)
    assert pld >= analytic - 1e-6
    assert pld <= analytic + 5e-3


def test_pld_composition_of_unsampled_queries_is_one_gaussian():
    """T unsampled releases = one release with sensitivity sqrt(T)."""
    sigma, delta = 4.0, 1e-5
    pld = subsampled_gaussian_epsilon(sigma, 1.0, 1.0, 4, delta)
    assert pld == pytest.approx(analytic_gaussian_epsilon(sigma, delta, sensitivity=2.0), abs=5e-3)


def test_subsampling_and_composition_are_monotone():
    base = subsampled_gaussian_epsilon(2.0, 1.0, 1.0, 10, 1e-5)
    assert subsampled_gaussian_epsilon(2.0, 1.0, 0.1, 10, 1e-5) < base
    assert subsampled_gaussian_epsilon(2.0, 1.0, 1.0, 20, 1e-5) > base
    assert subsampled_gaussian_epsilon(4.0, 2.0, 1.0, 10, 1e-5) == pytest.approx(base, abs=1e-9)
    assert subsampled_gaussian_epsilon(0.0, 1.0, 1.0, 1, 1e-5) == math.inf


@pytest.mark.parametrize(
    "epsilon, q, T, old, new",
    [
        (1.0, 1.0, 1, 0.684, 1.000),  # one release: the add/remove epsilon is the per-query epsilon
        (4.0, 0.1, 100, 3.43, 6.10),
    ],
)
def test_subsampled_epsilon_uses_the_true_add_remove_sensitivity(epsilon, q, T, old, new):
    """RNM's sigma (calibrated for sqrt(2) under replacement) accounted with the add/remove sensitivity.

    The former add/remove sensitivity 1 under-reported epsilon_subsampled (``old``); with
    sqrt(2) one unsubsampled release gets exactly its per-query epsilon back. ESA's sigma
    for 2C accounted with 2C is the same Gaussian (mu = 2C / sigma), so the same numbers.
    """
    delta = 1e-5
    sigma = analytic_gaussian_sigma(epsilon, delta, rnm_l2_sensitivity(Neighbouring.REPLACE))
    accounted = subsampled_gaussian_epsilon(sigma, rnm_l2_sensitivity(Neighbouring.ADD_REMOVE), q, T, delta)
    assert accounted == pytest.approx(new, abs=5e-3)
    assert subsampled_gaussian_epsilon(sigma, 1.0, q, T, delta) == pytest.approx(old, abs=5e-3)
    esa_sigma = analytic_gaussian_sigma(epsilon, delta, esa_l2_sensitivity(0.5, Neighbouring.REPLACE))
    assert subsampled_gaussian_epsilon(
        esa_sigma, esa_l2_sensitivity(0.5, Neighbouring.ADD_REMOVE), q, T, delta
    ) == pytest.approx(new, abs=5e-3)


@pytest.mark.parametrize(
    "args",
    [
        (1.0, 1.0, 0.0, 1, 1e-5),
        (1.0, 1.0, 1.5, 1, 1e-5),
        (1.0, 1.0, 0.5, 0, 1e-5),
        (1.0, 1.0, 0.5, 2.5, 1e-5),
        (1.0, 1.0, 0.5, 1, 0.0),
        (1.0, 0.0, 0.5, 1, 1e-5),
        (-1.0, 1.0, 0.5, 1, 1e-5),
    ],
)
def test_subsampled_rejects_bad_parameters(args):
    with pytest.raises(InvalidParameter):
        subsampled_gaussian_epsilon(*args)


def test_calibrate_single_query_matches_analytic():
    sigma = calibrate_subsampled_sigma(3.0, 1e-5, 1.0, 1.0, 1, rtol=1e-3)
    assert subsampled_gaussian_epsilon(sigma, 1.0, 1.0, 1, 1e-5) <= 3.0
    assert sigma == pytest.approx(analytic_gaussian_sigma(3.0, 1e-5), rel=2e-3)
    assert sigma >= analytic_gaussian_sigma(3.0, 1e-5) * (1 - 1e-6)


def test_calibrate_subsampled_is_tight():
    eps, delta, q, T, rtol = 2.0, 1e-5, 0.2, 5, 1e-3
    sigma = calibrate_subsampled_sigma(eps, delta, 1.0, q, T, rtol=rtol)
    assert subsampled_gaussian_epsilon(sigma, 1.0, q, T, delta) <= eps
    assert subsampled_gaussian_epsilon(sigma / (1 + 2 * rtol), 1.0, q, T, delta) > eps
    # subsampling buys noise: less than T unsampled queries need
    assert sigma < math.sqrt(T) * analytic_gaussian_sigma(eps, delta)
