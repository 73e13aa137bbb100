"""The tight ε-bounded λ_t* of ``ctxlite serve`` (ctxlite.influence.cid.tight_step) against a slow,
obviously right reference: the log-ratio max_v |log p̄_λ(v|D) − log p_T(v|∅)| computed in plain
Python floats on small rows, and the largest λ that keeps it within ε found on a dense grid."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.influence.cid import (
    EPSILON_MARGIN,
    TIGHT_TOLERANCE,
    bounded_lambda,
    cid_logprobs,
    rounding_margin,
    tight_step,
)
from ctxlite.runtime.fake import FakeBackend

GRID = 4000


def log_softmax(z: list[float]) -> list[float]:
    top = max(z)
    log_sum = top + math.log(sum(math.exp(x - top) for x in z))
    return [x - log_sum for x in z]


def ratio(lam: float, a: list[float], b: list[float], T: float) -> float:
    """max_v |log softmax((λa + (1−λ)b)/T)(v) − log softmax(b/T)(v)|, term by term."""
    mixed = log_softmax([(lam * x + (1 - lam) * y) / T for x, y in zip(a, b)])
    empty = log_softmax([y / T for y in b])
    return max(abs(m - e) for m, e in zip(mixed, empty))


def largest_on_grid(a, b, T, lam, eps) -> float:
    """The largest λ' = lam·i/GRID whose log-ratio is within ε (the log-ratio grows with λ')."""
    best = 0.0
    for i in range(1, GRID + 1):
        x = lam * i / GRID
        if ratio(x, a, b, T) > eps:
            break
        best = x
    return best


def spec_lambda(a, b, T, lam, eps) -> float:
    qa, qb = log_softmax([x / T for x in a]), log_softmax([y / T for y in b])
    m = max(abs(x - y) for x, y in zip(qa, qb))
    return bounded_lambda(lam, eps, m)


rows = st.integers(2, 10).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(-12, 12, width=32), min_size=n, max_size=n),
        st.lists(st.floats(-12, 12, width=32), min_size=n, max_size=n),
    )
)


@settings(max_examples=60, deadline=None)
@given(rows, st.sampled_from([0.5, 0.8, 1.0, 2.0]), st.floats(0.1, 3.0), st.floats(0.01, 4.0))
def test_the_tight_lambda_is_the_largest_within_epsilon(ab, T, lam, eps):
    """Its bound holds (the reference's log-ratio at it is within ε), it is within the search's
    tolerance of the largest λ the dense grid finds, never below the SPEC rule's λ, and the
    distribution and realised bound returned are the reference's at that λ."""
    a, b = ab
    logp, lam_t, max_abs_pmi, realised = tight_step(np.float32(a), np.float32(b), lam, eps, T)
    assert 0 <= lam_t <= lam
    assert ratio(lam_t, a, b, T) <= eps * (1 + 1e-12)  # the guarantee
    margin = rounding_margin(np.float32(a), np.float32(b), lam, T)  # both rules at the same float64 margin
    assert lam_t >= spec_lambda(a, b, T, lam, eps - margin) * (1 - 1e-12)
    grid = largest_on_grid(a, b, T, lam, eps)
    assert lam_t >= grid * (1 - 2 * TIGHT_TOLERANCE) - 1e-12, (lam_t, grid)  # λ_max ≥ grid
    assert realised == pytest.approx(ratio(lam_t, a, b, T), abs=1e-9) and realised <= eps
    # the tilt of p_T(·|∅) the server samples is cid_logprobs' distribution, up to float64 rounding
    assert np.allclose(logp, cid_logprobs(np.float32(a), np.float32(b), lam_t, T), atol=1e-12, rtol=0)
    qa, qb = log_softmax([x / T for x in a]), log_softmax([y / T for y in b])
    assert max_abs_pmi == pytest.approx(max(abs(x - y) for x, y in zip(qa, qb)), rel=1e-9, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(rows, st.sampled_from([0.5, 1.0]), st.floats(0.05, 3.0))
def test_the_log_ratio_grows_with_lambda(ab, T, top):
    """What the search relies on (proved in log_ratio_bound's docstring): the log-ratio is
    non-decreasing in λ, here on a grid, up to float64 rounding."""
    a, b = ab
    values = [ratio(top * i / 200, a, b, T) for i in range(201)]
    assert all(later >= earlier - 1e-12 for earlier, later in zip(values, values[1:]))


def test_without_epsilon_lambda_is_kept_and_its_realised_bound_reported():
    a, b = np.float32([1.0, 2.0, -1.0]), np.float32([0.0, 0.5, 0.3])
    logp, lam_t, _, realised = tight_step(a, b, 1.5, None, 1.0)
    assert lam_t == 1.5 and realised == pytest.approx(ratio(1.5, a.tolist(), b.tolist(), 1.0), abs=1e-12)


def test_a_token_only_the_context_forbids_leaves_only_lambda_zero():
    """A token p_T(·|∅) allows but the with-context row forbids (−inf) has probability 0 under any
    mixture with λ > 0: an infinite ratio, so λ_t* = 0, the empty context's own distribution."""
    a, b = np.float32([1.0, -np.inf, 0.0]), np.float32([0.5, 0.2, 0.1])
    logp, lam_t, max_abs_pmi, realised = tight_step(a, b, 1.0, 0.5, 1.0)
    assert lam_t == 0.0 and realised == 0.0 and max_abs_pmi == math.inf
    assert np.array_equal(logp, cid_logprobs(a, b, 0.0, 1.0))  # λ = 0: the empty context's own, exactly


def test_the_server_samples_with_the_tight_lambda_not_the_spec_rules():
    """Issue 46: the serve loop's λ_t* is the tight one (the dense grid's largest, within the search's
    tolerance), above min(λ, ε / (2 max|pmi|)) wherever that binds (the SPEC rule ``ctxlite score``
    keeps: about half the tight λ on a language model's rows, 0.85–0.97 of it on the fake model's
    unrelated random rows), and every step's realised bound is within ε."""
    from ctxlite.serve.decoding import steps

    backend = FakeBackend(seed=3)
    with_ = backend.tokenize("Dana Whitcombe takes lisinopril 10 mg daily. Q: the dose?", add_bos=True)
    without = backend.tokenize(" Q: the dose?", add_bos=True)
    eps, ratios = 0.5, []
    done: list[int] = []
    for s in steps(backend, with_, without, 1.0, eps, 1.0, 8, 1):
        a = np.asarray(backend.next_logits(with_ + done), dtype=np.float32).tolist()
        b = np.asarray(backend.next_logits(without + done), dtype=np.float32).tolist()
        spec = spec_lambda(a, b, 1.0, 1.0, eps)
        assert s.epsilon <= eps and ratio(s.lam, a, b, 1.0) <= eps * (1 + 1e-12)
        if spec < 1.0:
            ratios.append(s.lam / spec)
            assert s.lam >= largest_on_grid(a, b, 1.0, 1.0, eps) * (1 - 2 * TIGHT_TOLERANCE)
        done.append(s.token)
    assert ratios and min(ratios) > 1.01, ratios
    assert EPSILON_MARGIN < TIGHT_TOLERANCE
