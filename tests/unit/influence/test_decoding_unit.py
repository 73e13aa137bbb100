"""Unit tests for the pure parts of ctxlite.influence.cid (no model): the CID mixture
against a numpy reference, the ε-bounded λ (after Flemings et al.'s Theorem B.1), top-k / top-p sampling
against a reference filter and by chi-square, and parameter validation."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

from ctxlite.errors import InvalidParameter
from ctxlite.influence.cid import bounded_lambda, check_epsilon, check_lambda, cid_logprobs, mixed_logits
from ctxlite.runtime.sampling import SamplingSettings, sample_token

FAST = settings(max_examples=80, deadline=None)


# ---------------------------------------------------------------------------
# references


def ref_log_softmax(x):
    """log softmax in float64; −inf entries stay −inf."""
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x[np.isfinite(x)])
    return x - (m + math.log(sum(math.exp(v - m) for v in x if np.isfinite(v))))


def ref_cid(a, b, lam, T, banned=()):
    z = np.array([(lam * float(x) + (1 - lam) * float(y)) / T for x, y in zip(a, b)])
    z[list(banned)] = -np.inf
    return ref_log_softmax(z)


def ref_filtered_distribution(logp, top_k, top_p):
    """{token: probability} that sampling must use: the k most likely tokens, then the
    smallest most-likely-first prefix whose (renormalised) mass reaches top_p."""
    p = np.exp(np.asarray(logp, dtype=np.float64))
    order = sorted((v for v in range(len(p)) if p[v] > 0), key=lambda v: -p[v])
    if top_k:
        order = order[:top_k]
    mass = sum(p[v] for v in order)
    if top_p < 1:
        acc, kept = 0.0, []
        for v in order:
            kept.append(v)
            acc += p[v] / mass
            if acc >= top_p:
                break
        order = kept
    mass = sum(p[v] for v in order)
    return {v: p[v] / mass for v in order}


class RecordingRng:
    """Stands in for numpy's Generator: records the distribution sample_token draws from
    and returns a fixed index into it."""

    def __init__(self, pick=0):
        self.pick, self.calls = pick, []

    def choice(self, n, p=None):
        self.calls.append((n, np.asarray(p, dtype=np.float64)))
        return self.pick


def used_distribution(logp, s):
    """The exact {token: probability} sample_token draws from (via RecordingRng)."""
    rec = RecordingRng(0)
    sample_token(logp, s, rec)
    ((n, p),) = rec.calls
    tokens = [sample_token(logp, s, RecordingRng(i)) for i in range(n)]
    assert len(set(tokens)) == n
    out = {}
    for t, q in zip(tokens, p):
        if q > 0:
            out[t] = q
    return out


# ---------------------------------------------------------------------------
# strategies

logit = st.floats(min_value=-30, max_value=30, allow_nan=False, allow_infinity=False)


@st.composite
def logit_pairs(draw, min_v=2, max_v=24):
    v = draw(st.integers(min_v, max_v))
    a = np.array(draw(st.lists(logit, min_size=v, max_size=v)))
    b = np.array(draw(st.lists(logit, min_size=v, max_size=v)))
    return a, b


@st.composite
def distinct_logprobs(draw, max_v=16):
    """Log-probabilities with distinct values (no ties to make "the k best" ambiguous)."""
    ints = draw(st.lists(st.integers(-100, 100), min_size=1, max_size=max_v, unique=True))
    return ref_log_softmax(np.array(ints) / 10.0)


temperatures = st.floats(0.1, 3.0)
lambdas = st.floats(0.0, 4.0)


# ---------------------------------------------------------------------------
# cid_logprobs / mixed_logits


@FAST
@given(logit_pairs(), lambdas, temperatures, st.data())
def test_cid_logprobs_matches_numpy_reference(ab, lam, T, data):
    a, b = ab
    banned = data.draw(st.lists(st.integers(0, len(a) - 1), unique=True, max_size=len(a) - 1))
    got = cid_logprobs(a, b, lam, T, banned_ids=banned or None)
    want = ref_cid(a, b, lam, T, banned)
    assert got.dtype == np.float64 and got.shape == a.shape
    assert np.all(np.isneginf(got[banned]))
    keep = np.setdiff1d(np.arange(len(a)), banned)
    np.testing.assert_allclose(got[keep], want[keep], rtol=1e-10, atol=1e-10)
    assert math.isclose(float(np.exp(got).sum()), 1.0, abs_tol=1e-12)


@FAST
@given(logit_pairs(), temperatures)
def test_lambda_endpoints_are_exact(ab, T):
    a, b = ab
    nan = np.full_like(a, np.nan)
    # λ = 0 ignores the context side entirely, λ = 1 the empty side (even NaN there)
    np.testing.assert_array_equal(cid_logprobs(nan, b, 0.0, T), cid_logprobs(b, nan, 1.0, T))
    np.testing.assert_allclose(cid_logprobs(nan, b, 0.0, T), ref_log_softmax(b / T), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cid_logprobs(a, nan, 1.0, T), ref_log_softmax(a / T), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(mixed_logits(a.astype(np.float32), b, 1.0), a.astype(np.float32).astype(np.float64))
    np.testing.assert_array_equal(mixed_logits(a, b.astype(np.float32), 0.0), b.astype(np.float32).astype(np.float64))


def test_cid_logprobs_does_not_modify_its_inputs():
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    b = np.array([0.5, 0.5, 0.5], dtype=np.float32)
    for lam in (0.0, 1.0, 0.3):
        a0, b0 = a.copy(), b.copy()
        cid_logprobs(a, b, lam, 0.8, banned_ids=[2])
        np.testing.assert_array_equal(a, a0)
        np.testing.assert_array_equal(b, b0)


def test_cid_amplifies_and_mutes_the_context():
    a = np.array([2.0, 0.0, 0.0])  # the context favours token 0
    b = np.zeros(3)
    p = [math.exp(cid_logprobs(a, b, lam, 1.0)[0]) for lam in (0.0, 0.5, 1.0, 2.0)]
    assert p[0] == pytest.approx(1 / 3) and p == sorted(p) and len(set(p)) == 4


# ---------------------------------------------------------------------------
# ε-bounded CID (Flemings et al., ACL 2025, Theorem B.1; docs/design.md#cid)


@FAST
@given(st.floats(0.0, 10.0), st.one_of(st.none(), st.floats(1e-3, 10.0)), st.floats(0.0, 50.0))
def test_bounded_lambda_is_min_of_lambda_and_eps_over_2m(lam, eps, m):
    got = bounded_lambda(lam, eps, m)
    if eps is None or m == 0:
        assert got == lam
    else:
        assert got == pytest.approx(min(lam, eps / (2 * m)), rel=2e-9)  # shrunk by EPSILON_MARGIN
        assert got <= lam and 2 * got * m <= eps


def test_bounded_lambda_hand_values():
    assert bounded_lambda(1.0, 0.5, 2.0) == pytest.approx(0.125, rel=2e-9) and bounded_lambda(1.0, 0.5, 2.0) < 0.125
    assert bounded_lambda(0.1, 0.5, 2.0) == 0.1
    assert bounded_lambda(3.0, None, 100.0) == 3.0
    assert bounded_lambda(3.0, 1.0, 0.0) == 3.0


@settings(max_examples=150, deadline=None)
@given(logit_pairs(), lambdas, st.floats(1e-3, 5.0), temperatures, st.data())
def test_epsilon_bound_holds_for_every_token(ab, lam, eps, T, data):
    a, b = ab
    banned = data.draw(st.lists(st.integers(0, len(a) - 1), unique=True, max_size=len(a) - 1))
    ban = np.zeros(len(a), bool)
    ban[banned] = True
    log_qd = ref_log_softmax(np.where(ban, -np.inf, a / T))
    log_q0 = ref_log_softmax(np.where(ban, -np.inf, b / T))
    pmi = log_qd[~ban] - log_q0[~ban]
    m = float(np.max(np.abs(pmi)))
    lam_star = bounded_lambda(lam, eps, m)
    lp = cid_logprobs(a, b, lam_star, T, banned_ids=banned or None)
    dev = np.abs(lp[~ban] - log_q0[~ban])
    assert float(dev.max()) <= eps + 1e-9
    assert np.all(np.isneginf(lp[ban]))


def test_epsilon_bound_is_needed():
    """Without the bound the deviation exceeds ε; with it, it does not."""
    a, b, T, eps = np.array([5.0, 0.0, -5.0]), np.zeros(3), 1.0, 0.1
    q0 = ref_log_softmax(b / T)
    assert np.abs(cid_logprobs(a, b, 1.0, T) - q0).max() > eps
    pmi = ref_log_softmax(a / T) - q0
    lam_star = bounded_lambda(1.0, eps, float(np.abs(pmi).max()))
    assert lam_star < 1.0
    assert np.abs(cid_logprobs(a, b, lam_star, T) - q0).max() <= eps + 1e-12


# ---------------------------------------------------------------------------
# sample_token: exact filtered distribution


@FAST
@given(distinct_logprobs(), st.integers(0, 20), st.floats(0.05, 1.0), st.randoms(use_true_random=False))
def test_sampling_distribution_matches_reference_filter(logp, top_k, top_p, rnd):
    perm = list(range(len(logp)))
    rnd.shuffle(perm)
    logp = logp[perm]  # best tokens at arbitrary ids
    # avoid top_p landing (numerically) on a cumulative mass boundary
    probs = np.sort(np.exp(logp))[::-1][: top_k or None]
    cum = np.cumsum(probs / probs.sum())
    assume(top_p == 1.0 or np.min(np.abs(cum - top_p)) > 1e-9)
    s = SamplingSettings(top_k=top_k, top_p=top_p)
    got = used_distribution(logp, s)
    want = ref_filtered_distribution(logp, top_k, top_p)
    assert set(got) == set(want)
    for v in want:
        assert got[v] == pytest.approx(want[v], rel=1e-9, abs=1e-12)
    if top_k:
        assert len(got) <= top_k
        worst_kept = min(logp[v] for v in got)
        assert sum(logp > worst_kept) < top_k  # nothing better was dropped
    if top_p < 1:
        # the kept set reaches top_p of the (top-k) mass; without its least likely token it would not
        pool = sorted(np.exp(logp), reverse=True)[: top_k or None]
        kept = [np.exp(logp[v]) for v in got]
        assert sum(kept) / sum(pool) >= top_p - 1e-12
        assert (sum(kept) - min(kept)) / sum(pool) < top_p


@FAST
@given(distinct_logprobs(), st.integers(0, 5), st.sampled_from([1.0, 0.9, 0.5]), st.data())
def test_banned_tokens_are_never_candidates(logp, top_k, top_p, data):
    banned = data.draw(st.lists(st.integers(0, len(logp) - 1), unique=True, max_size=len(logp) - 1))
    lp = cid_logprobs(logp, logp, 1.0, 1.0, banned_ids=banned or None)
    got = used_distribution(lp, SamplingSettings(top_k=top_k, top_p=top_p))
    assert got and not set(got) & set(banned)
    assert sum(got.values()) == pytest.approx(1.0)


def test_top_p_window_ignores_tokens_far_below_the_best():
    logp = ref_log_softmax(np.array([0.0, -0.1, -45.0, -60.0]))
    got = used_distribution(logp, SamplingSettings(top_p=0.999999))
    assert set(got) == {0, 1}


def test_top_k_larger_than_vocab_keeps_everything():
    logp = ref_log_softmax(np.array([1.0, 2.0, 3.0]))
    got = used_distribution(logp, SamplingSettings(top_k=10))
    assert got == pytest.approx({v: math.exp(logp[v]) for v in range(3)})


def test_top_k_one_is_greedy():
    logp = ref_log_softmax(np.array([0.3, 2.0, -1.0, 1.9]))
    rng = np.random.default_rng(0)
    assert {sample_token(logp, SamplingSettings(top_k=1), rng) for _ in range(50)} == {1}


# ---------------------------------------------------------------------------
# sample_token: empirical frequencies (chi-square, seeded)

BASE_P = np.array([0.30, 0.22, 0.15, 0.12, 0.09, 0.06, 0.04, 0.02])
PERM = np.array([5, 2, 7, 0, 3, 6, 1, 4])  # token PERM[i] has probability BASE_P[i]


@pytest.mark.parametrize(
    "top_k, top_p, banned",
    [(0, 1.0, []), (3, 1.0, []), (0, 0.7, []), (5, 0.6, []), (0, 1.0, [5, 7]), (8, 0.8, [2])],
)
def test_empirical_frequencies_match_filtered_distribution(top_k, top_p, banned):
    logits = np.empty(8)
    logits[PERM] = np.log(BASE_P)
    logp = cid_logprobs(logits, np.zeros(8), 1.0, 1.0, banned_ids=banned or None)
    want = ref_filtered_distribution(logp, top_k, top_p)
    s = SamplingSettings(top_k=top_k, top_p=top_p, seed=0)
    rng = np.random.default_rng(2024)
    n = 12000
    counts = np.bincount([sample_token(logp, s, rng) for _ in range(n)], minlength=8)
    kept = sorted(want)
    assert counts[np.setdiff1d(np.arange(8), kept)].sum() == 0  # filtered / banned tokens never drawn
    expected = np.array([want[v] for v in kept]) * n
    assert expected.min() >= 5
    if len(kept) > 1:
        assert stats.chisquare(counts[kept], expected).pvalue > 1e-3
    else:
        assert counts[kept[0]] == n


def test_sampling_is_reproducible_with_the_seed():
    logp = ref_log_softmax(np.log(BASE_P))
    s = SamplingSettings()

    def draws(seed):
        rng = np.random.default_rng(seed)
        return [sample_token(logp, s, rng) for _ in range(40)]

    assert draws(5) == draws(5)
    assert draws(5) != draws(6)


# ---------------------------------------------------------------------------
# parameter validation


@pytest.mark.parametrize(
    "kw",
    [
        {"temperature": 0.0},
        {"temperature": -1.0},
        {"temperature": float("nan")},
        {"top_k": -1},
        {"top_p": 0.0},
        {"top_p": -0.2},
        {"top_p": 1.01},
        {"top_p": float("nan")},
        {"min_new_tokens": 20, "max_new_tokens": 10},
        {"min_new_tokens": -1},
        {"min_new_tokens": 0, "max_new_tokens": 0},
    ],
)
def test_sampling_settings_reject_bad_values(kw):
    with pytest.raises(InvalidParameter):
        SamplingSettings(**kw)


def test_sampling_settings_accept_edge_values():
    SamplingSettings(temperature=1e-3, top_k=0, top_p=1.0, min_new_tokens=0, max_new_tokens=1)
    SamplingSettings(top_p=1e-9, min_new_tokens=50, max_new_tokens=50)
    d = SamplingSettings()
    assert (d.temperature, d.min_new_tokens, d.max_new_tokens) == (0.8, 10, 50)


@pytest.mark.parametrize("lam", [-1e-9, -1.0, float("nan"), float("inf"), float("-inf")])
def test_check_lambda_rejects(lam):
    with pytest.raises(InvalidParameter):
        check_lambda(lam)


@pytest.mark.parametrize("lam", [0, 0.0, 0.5, 1, 1.5, 10.0])
def test_check_lambda_accepts_and_returns_float(lam):
    out = check_lambda(lam)
    assert out == lam and type(out) is float


@pytest.mark.parametrize("eps", [0.0, -0.5, float("nan"), float("-inf"), float("inf")])
def test_check_epsilon_rejects(eps):
    with pytest.raises(InvalidParameter):
        check_epsilon(eps)


def test_check_epsilon_accepts():
    assert check_epsilon(None) is None
    assert check_epsilon(1) == 1.0 and type(check_epsilon(1)) is float
    assert check_epsilon(1e-6) == 1e-6


# ---------------------------------------------------------------------------
# one numeric path: the generation path's numpy mixing agrees with the C kernel


@FAST
@given(st.integers(2, 300), st.floats(0.0, 4.0), st.floats(0.2, 2.0), st.data())
def test_cid_logprobs_agrees_with_the_c_kernel_including_neg_inf_logits(V, lam, T, data):
    """Both sides -inf-guarded: for lam > 1 a -inf logit of l_empty must stay -inf, never become +inf."""
    from ctxlite.runtime import kernels

    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    a = (rng.standard_normal(V) * 3).astype(np.float32)
    b = (rng.standard_normal(V) * 3).astype(np.float32)
    a[rng.random(V) < 0.2] = -np.inf
    b[rng.random(V) < 0.2] = -np.inf
    a[0] = b[0] = 1.0  # one token both sides allow
    got = cid_logprobs(a, b, lam, T)
    want = kernels.mixed_logprob(np.tile(a, (V, 1)), np.tile(b, (V, 1)), np.arange(V, dtype=np.int32), lam, T).logprob
    assert np.all(np.isfinite(got) | np.isneginf(got))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-6)


def test_lam_above_one_keeps_a_barred_token_barred():
    a = np.array([0.0, 1.0, 2.0], np.float32)
    b = np.array([0.0, -np.inf, 2.0], np.float32)
    z = mixed_logits(a, b, 1.5)
    assert np.isneginf(z[1]) and z[0] == 0.0 and z[2] == 2.0
    assert np.isneginf(cid_logprobs(a, b, 1.5, 1.0)[1])


# ---------------------------------------------------------------------------
# ε-bounded CID samples a distribution within ε of p_T(·|∅), every token included


@settings(max_examples=60, deadline=None)
@given(st.integers(8, 64), lambdas, st.floats(0.05, 4.0), st.sampled_from([0.5, 0.8, 1.0, 1.5]), st.data())
def test_bounded_cid_samples_within_epsilon_of_the_empty_context(V, lam, eps, T, data):
    """On float32 rows as the model gives them (a few tokens 40+ nats below the best, where the
    30-nat sampling window used to drop them), the distribution the sampler draws from -- read off
    its rng call -- has |log p − log p_T(·|∅)| <= ε for every token, with no tolerance."""
    from ctxlite.influence.cid import bounded_step

    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    a = (rng.normal(0, 4, V) - np.where(rng.random(V) < 0.2, 45.0, 0.0)).astype(np.float32)
    b = (a + rng.normal(0, data.draw(st.sampled_from([0.1, 1.0, 3.0])), V)).astype(np.float32)
    logp, lam_t, m = bounded_step(a, b, lam, eps, T)
    sampled = used_distribution_full(logp)
    assert set(sampled) == set(range(V))  # every token p_T(·|∅) allows can be drawn
    p = np.array([sampled[v] for v in range(V)])
    log_q0 = ref_log_softmax(b.astype(np.float64) / T)
    assert float(np.max(np.abs(np.log(p) - log_q0))) <= eps
    assert 2 * lam_t * m <= eps  # the realised ε the generation records


def used_distribution_full(logp):
    """{token: probability} that sample_token draws from over the full vocabulary."""
    rec = RecordingRng(0)
    sample_token(logp, SamplingSettings(), rec, full_vocabulary=True)
    ((n, p),) = rec.calls
    tokens = [sample_token(logp, SamplingSettings(), RecordingRng(i), full_vocabulary=True) for i in range(n)]
    return {t: q for t, q in zip(tokens, p) if q > 0}


def test_the_sampling_window_breaks_the_bound_and_the_full_vocabulary_keeps_it():
    """The reproducer: a token 45 nats below the best is outside the 30-nat window, so the windowed
    sampler gives it probability 0 where p_T(·|∅) does not; the full-vocabulary sampler keeps it."""
    from ctxlite.influence.cid import bounded_step

    a = np.array([0.0, -1.0, -45.0, -2.0], np.float32)
    b = np.array([0.0, -1.5, -44.0, -2.0], np.float32)
    logp, _, _ = bounded_step(a, b, 1.0, 1.0, 1.0)
    assert 2 not in used_distribution(logp, SamplingSettings())  # the window drops it: ratio -inf
    assert used_distribution_full(logp)[2] > 0


def test_bounded_cid_draws_follow_the_full_mixed_distribution():
    """Chi-square on seeded draws from the full-vocabulary sampler against exp(log p̄)."""
    from ctxlite.influence.cid import bounded_step

    a = np.log(BASE_P).astype(np.float32)
    b = np.log(BASE_P[::-1]).astype(np.float32)
    logp, lam_t, _ = bounded_step(a, b, 1.0, 0.5, 1.0)
    assert lam_t < 1.0
    rng, n = np.random.default_rng(7), 20000
    counts = np.bincount(
        [sample_token(logp, SamplingSettings(), rng, full_vocabulary=True) for _ in range(n)], minlength=8
    )
    assert stats.chisquare(counts, np.exp(logp) / np.exp(logp).sum() * n).pvalue > 1e-3


def test_bounded_cid_refuses_top_k_and_top_p():
    from ctxlite.influence.cid import check_bounded_sampling

    for s in (SamplingSettings(top_k=5), SamplingSettings(top_p=0.9)):
        with pytest.raises(InvalidParameter, match="full mixed distribution"):
            check_bounded_sampling(s, 1.0)
        check_bounded_sampling(s, None)  # unbounded CID may filter
    with pytest.raises(InvalidParameter, match="full vocabulary"):
        sample_token(np.zeros(3), SamplingSettings(top_k=2), np.random.default_rng(0), full_vocabulary=True)
