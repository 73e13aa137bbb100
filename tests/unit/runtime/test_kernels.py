"""C kernels vs. their slow float64 references (tests/reference/kernels_reference.py), plus error paths."""

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from reference import kernels_reference as ref

from ctxlite.errors import InvalidParameter
from ctxlite.runtime import kernels
from tests.paths import REPO

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ATOL, RTOL = 1e-4, 1e-6  # float32 logits vs. a float64 reference


@st.composite
def logits_case(draw, two_sided=False):
    """Random rows (1-4) x V (1-3000) with extreme values, -inf entries, bans and targets."""
    n_rows = draw(st.integers(1, 4))
    V = draw(st.one_of(st.integers(1, 40), st.integers(1, 3000)))
    seed = draw(st.integers(0, 2**32 - 1))
    scale = draw(st.sampled_from([1.0, 10.0, 100.0, 1e4]))
    p_ninf = draw(st.sampled_from([0.0, 0.1, 0.5, 0.95]))
    rng = np.random.default_rng(seed)

    def rows():
        x = (rng.standard_normal((n_rows, V)) * scale).astype(np.float32)
        x[rng.random((n_rows, V)) < 0.01] = np.float32(1e4) * rng.choice([-1, 1])
        x[rng.random((n_rows, V)) < p_ninf] = -np.inf
        return x

    a = rows()
    b = rows() if two_sided else None
    banned = None
    if draw(st.booleans()) and V > 1:
        banned = np.unique(rng.integers(0, V, size=draw(st.integers(1, min(V - 1, 20)))))
    ban_rows = None if banned is None or draw(st.booleans()) else rng.random(n_rows) < 0.5
    # every row needs a finite allowed logit on each side
    for r in range(n_rows):
        allowed = np.ones(V, bool)
        if banned is not None and (ban_rows is None or ban_rows[r]):
            allowed[banned] = False
        v = rng.choice(np.flatnonzero(allowed))
        for x in (a, b) if two_sided else (a,):
            if not np.isfinite(x[r]).any() or not np.isfinite(x[r][allowed]).any():
                x[r, v] = np.float32(rng.standard_normal() * scale)
    targets = rng.integers(0, V, size=n_rows)
    if banned is not None and draw(st.booleans()):
        targets[0] = banned[0]  # target a banned token (gives -inf on banned rows)
    T = draw(st.floats(0.05, 5.0))
    return a, b, targets, T, banned, ban_rows


def assert_close(got, want):
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)


# --------------------------------------------------------------------------
# logprob_gather


@SETTINGS
@given(logits_case())
def test_logprob_gather_matches_reference(case):
    a, _, targets, T, banned, ban_rows = case
    got = kernels.logprob_gather(a, targets, T, banned, ban_rows)
    assert got.dtype == np.float64 and got.shape == (a.shape[0],)
    assert_close(got, ref.logprob_gather(a, targets, T, banned, ban_rows))


def test_logprob_gather_banned_target_is_minus_inf_and_vocabulary_not_compacted():
    x = np.log(np.array([[0.1, 0.2, 0.3, 0.4]], np.float32))
    # ban id 0: ids 1..3 keep their own index and are renormalised over 0.9
    got = kernels.logprob_gather(np.repeat(x, 4, 0), [0, 1, 2, 3], banned_ids=[0])
    assert got[0] == -np.inf
    assert_close(got[1:], np.log(np.array([0.2, 0.3, 0.4]) / 0.9))
    # ban only on row 1
    got = kernels.logprob_gather(np.repeat(x, 2, 0), [0, 0], banned_ids=[0], ban_rows=[False, True])
    assert_close(got[0], np.log(0.1))
    assert got[1] == -np.inf


def test_logprob_gather_full_gemma_width_row():
    V = 262_144
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, V)) * 4).astype(np.float32)
    x[:, ::7] = -np.inf
    targets = [V - 1, 12345]
    for T in (0.8, 1.0):
        assert_close(kernels.logprob_gather(x, targets, T), ref.logprob_gather(x, targets, T))
    banned = [1, 2, V - 1]
    assert_close(kernels.logprob_gather(x, targets, 0.8, banned), ref.logprob_gather(x, targets, 0.8, banned))


def test_logprob_gather_accepts_other_float_dtypes_and_views():
    rng = np.random.default_rng(1)
    x64 = rng.standard_normal((3, 100))
    want = ref.logprob_gather(x64, [0, 1, 2])
    assert_close(kernels.logprob_gather(x64, [0, 1, 2]), want)
    assert_close(
        kernels.logprob_gather(x64.astype(np.float16), [0, 1, 2]), ref.logprob_gather(x64.astype(np.float16), [0, 1, 2])
    )
    wide = np.zeros((3, 200), np.float32)
    wide[:, ::2] = x64
    assert_close(kernels.logprob_gather(wide[:, ::2], [0, 1, 2]), want)  # non-contiguous view


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("where", [0, 2049, 4999])
def test_logprob_gather_rejects_nan_and_plus_inf(bad, where):
    x = np.zeros((2, 5000), np.float32)
    x[1, where] = bad
    with pytest.raises(InvalidParameter, match=rf"logits\[1, {where}\]"):
        kernels.logprob_gather(x, [0, 0])
    with pytest.raises(InvalidParameter):  # also when the bad entry is banned
        kernels.logprob_gather(x, [0, 0], banned_ids=[where])


def test_logprob_gather_rejects_nan_among_minus_inf():
    x = np.full((1, 4100), -np.inf, np.float32)
    x[0, 0] = 0.0
    x[0, 3000] = np.nan
    with pytest.raises(InvalidParameter, match="NaN"):
        kernels.logprob_gather(x, [0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(targets=[0, 5]), r"targets\[1\] = 5"),
        (dict(targets=[-1, 0]), r"targets\[0\] = -1"),
        (dict(targets=[0, 2**40]), r"targets\[1\]"),
        (dict(targets=[0]), "length 2"),
        (dict(targets=[0.0, 1.0]), "integer"),
        (dict(targets=[0, 1], temperature=0.0), "temperature"),
        (dict(targets=[0, 1], temperature=-1.0), "temperature"),
        (dict(targets=[0, 1], temperature=float("nan")), "temperature"),
        (dict(targets=[0, 1], banned_ids=[7]), "banned_ids contains 7"),
        (dict(targets=[0, 1], banned_ids=[1], ban_rows=[1]), "ban_rows"),
        (dict(targets=[0, 1], ban_rows=[1, 1]), "ban_rows"),
    ],
)
def test_logprob_gather_rejects_bad_parameters(kwargs, match):
    x = np.zeros((2, 5), np.float32)
    with pytest.raises(InvalidParameter, match=match):
        kernels.logprob_gather(x, **kwargs)


@pytest.mark.parametrize(
    "logits, match",
    [
        (np.zeros(5, np.float32), "2-D"),
        (np.zeros((2, 0), np.float32), "empty"),
        (np.zeros((2, 5), np.int32), "floating"),
        (np.zeros((2, 5), np.complex64), "floating"),
    ],
)
def test_logprob_gather_rejects_bad_arrays(logits, match):
    with pytest.raises(InvalidParameter, match=match):
        kernels.logprob_gather(logits, [0, 0])


def test_logprob_gather_rejects_rows_with_no_allowed_finite_logit():
    x = np.array([[0.0, 0.0], [-np.inf, -np.inf]], np.float32)
    with pytest.raises(InvalidParameter, match="row 1"):
        kernels.logprob_gather(x, [0, 0])
    x = np.array([[0.0, -np.inf]], np.float32)
    with pytest.raises(InvalidParameter, match="row 0"):
        kernels.logprob_gather(x, [1], banned_ids=[0])


# --------------------------------------------------------------------------
# mixed_logprob


@SETTINGS
@given(logits_case(two_sided=True), st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 3.0)), st.booleans())
def test_mixed_logprob_matches_reference(case, lam, want_pmi):
    a, b, targets, T, banned, ban_rows = case
    z_rows_ok = all(np.isfinite(ref._mix(a[r].astype(float), b[r].astype(float), lam)).any() for r in range(a.shape[0]))
    assume(z_rows_ok)
    if banned is not None:  # every row must keep a finite mixed logit among allowed tokens
        mask = ref._ban_mask(a.shape[1], a.shape[0], banned, ban_rows)
        mixed = np.stack([ref._mix(a[r].astype(float), b[r].astype(float), lam) for r in range(a.shape[0])])
        assume(np.isfinite(np.where(mask, -np.inf, mixed)).any(axis=1).all())
    got = kernels.mixed_logprob(a, b, targets, lam, T, banned, ban_rows, want_max_abs_pmi=want_pmi)
    want = ref.mixed_logprob(a, b, targets, lam, T, banned, ban_rows, want_max_abs_pmi=want_pmi)
    assert_close(got.logprob, want.logprob)
    if want_pmi:
        assert_close(got.max_abs_pmi, want.max_abs_pmi)
    else:
        assert got.max_abs_pmi is None


def test_mixed_logprob_endpoints_are_exact_and_ignore_the_other_sides_minus_inf():
    a = np.array([[1.0, -np.inf, 2.0]], np.float32)
    b = np.array([[-np.inf, 0.5, 1.5]], np.float32)
    for lam, side in ((0.0, b), (1.0, a)):
        for y in range(3):
            assert kernels.mixed_logprob(a, b, [y], lam, 0.7).logprob[0] == pytest.approx(
                kernels.logprob_gather(side, [y], 0.7)[0], abs=0, rel=1e-15
            ) or np.isneginf(kernels.logprob_gather(side, [y], 0.7)[0])
    # lam > 1: (1 - lam) < 0 must not turn b = -inf into +inf
    r = kernels.mixed_logprob(a, b, [2], 2.5, 1.0)
    assert r.logprob[0] == pytest.approx(0.0)


@SETTINGS
@given(logits_case(two_sided=True), st.floats(0.05, 2.0))
def test_pmi_identities_of_spec_1_5(case, eps):
    """lam=1: log p_1(y) - log p_T(y | empty) = pmi(y); epsilon-bounded CID keeps every token within eps."""
    a, b, targets, T, _, _ = case
    a[~np.isfinite(a)] = 0.0  # finite rows so the bound is finite
    b[~np.isfinite(b)] = 0.0
    a, b = a / 100, b / 100
    base = kernels.logprob_gather(b, targets, T)
    r = kernels.mixed_logprob(a, b, targets, 1.0, T, want_max_abs_pmi=True)
    pmi_y = r.logprob - base
    assert np.all(np.abs(pmi_y) <= r.max_abs_pmi + 1e-6)
    for row in range(a.shape[0]):
        lam = min(3.0, eps / (2 * r.max_abs_pmi[row])) if r.max_abs_pmi[row] > 0 else 3.0
        ys = np.arange(a.shape[1])
        n = len(ys)
        mixed = kernels.mixed_logprob(np.repeat(a[row : row + 1], n, 0), np.repeat(b[row : row + 1], n, 0), ys, lam, T)
        plain = kernels.logprob_gather(np.repeat(b[row : row + 1], n, 0), ys, T)
        assert np.max(np.abs(mixed.logprob - plain)) <= eps + 1e-5


def test_max_abs_pmi_is_inf_when_exactly_one_side_is_minus_inf():
    a = np.array([[0.0, 1.0, -np.inf, -np.inf]], np.float32)
    b = np.array([[0.0, 1.0, 0.0, -np.inf]], np.float32)
    assert kernels.mixed_logprob(a, b, [0], 0.5, want_max_abs_pmi=True).max_abs_pmi[0] == np.inf
    # banning the offending token makes it finite; the both -inf token is skipped
    r = kernels.mixed_logprob(a, b, [0], 0.5, banned_ids=[2], want_max_abs_pmi=True)
    assert r.max_abs_pmi[0] == pytest.approx(0.0, abs=1e-6)


def test_mixed_logprob_full_gemma_width_row():
    V = 262_144
    rng = np.random.default_rng(2)
    a = (rng.standard_normal((2, V)) * 4).astype(np.float32)
    b = (a + rng.standard_normal((2, V))).astype(np.float32)
    a[0, 5] = b[1, 9] = -np.inf
    got = kernels.mixed_logprob(a, b, [3, V - 2], 1.7, 0.8, [0, 100], want_max_abs_pmi=True)
    want = ref.mixed_logprob(a, b, [3, V - 2], 1.7, 0.8, [0, 100], want_max_abs_pmi=True)
    assert_close(got.logprob, want.logprob)
    assert_close(got.max_abs_pmi, want.max_abs_pmi)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(lam=-0.1), "lam"),
        (dict(lam=float("inf")), "lam"),
        (dict(temperature=0.0), "temperature"),
        (dict(targets=[0, 9]), r"targets\[1\] = 9"),
        (dict(without_context=np.zeros((2, 4), np.float32)), "shape"),
        (dict(with_context=np.where(np.eye(2, 5, 3) > 0, np.nan, 0).astype(np.float32)), r"with_context\[0, 3\]"),
        (dict(without_context=np.where(np.eye(2, 5, 3) > 0, np.inf, 0).astype(np.float32)), r"without_context\[0, 3\]"),
    ],
)
def test_mixed_logprob_rejects_bad_parameters(change, match):
    args = dict(
        with_context=np.zeros((2, 5), np.float32),
        without_context=np.zeros((2, 5), np.float32),
        targets=[0, 1],
        lam=0.5,
        temperature=1.0,
    )
    args.update(change)
    with pytest.raises(InvalidParameter, match=match):
        kernels.mixed_logprob(**args)


def test_mixed_logprob_rejects_nan_hidden_behind_minus_inf():
    a = np.array([[0.0, np.nan]], np.float32)
    b = np.array([[0.0, -np.inf]], np.float32)
    with pytest.raises(InvalidParameter, match=r"with_context\[0, 1\]"):
        kernels.mixed_logprob(a, b, [0], 0.5)


# --------------------------------------------------------------------------
# sample_rows


def _ref_boundary_gap(row, u, T, window, banned, got, want):
    """How far u * P is from the running-sum boundary between two differing draws (relative to P)."""
    cand, cum = ref.sample_cdf(row, T, window, banned)
    lo = int(np.searchsorted(cand, min(got, want)))
    return abs(cum[lo] - u * cum[-1]) / cum[-1]


@SETTINGS
@given(logits_case(), st.sampled_from([1.0, 5.0, 30.0, np.inf]), st.integers(0, 2**32 - 1), st.booleans())
def test_sample_rows_matches_reference(case, window, seed, greedy):
    """The same uniform picks the same token as numpy's cumsum + searchsorted
    (or lands within rounding of the boundary between the two)."""
    a, _, _, T, banned, ban_rows = case
    T = 0.0 if greedy else T
    u = np.random.default_rng(seed).random(len(a))
    got = kernels.sample_rows(a, u, T, window, banned, ban_rows)
    want = ref.sample_rows(a, u, T, window, banned, ban_rows)
    for r in np.flatnonzero(got != want):
        assert not greedy
        row_banned = banned if banned is not None and (ban_rows is None or ban_rows[r]) else None
        assert _ref_boundary_gap(a[r], u[r], T, window, row_banned, got[r], want[r]) < 1e-5
    mask = ref._ban_mask(a.shape[1], len(a), banned, ban_rows)
    assert not mask[np.arange(len(a)), got].any()  # never a banned token
    assert np.isfinite(a[np.arange(len(a)), got]).all()


def test_sample_rows_frequencies_match_softmax_chi_square():
    """Empirical frequencies over 20k draws from a Gemma-width row fit softmax(x/T) (seeded)."""
    from scipy.stats import chisquare

    rng = np.random.default_rng(7)
    V, T = 262_144, 0.8
    x = np.full(V, -20.0, np.float32)
    top = rng.choice(V, 6, replace=False)
    x[top] = np.array([2.0, 1.5, 1.0, 0.2, -0.5, -1.0], np.float32)
    banned = np.sort(top[-1:])  # the last one is banned: it must never appear
    n, chunk = 20_000, 40
    rows = np.ascontiguousarray(np.broadcast_to(x, (chunk, V)))
    draws = np.concatenate([kernels.sample_rows(rows, rng.random(chunk), T, 30.0, banned) for _ in range(n // chunk)])
    assert not np.isin(draws, banned).any()
    keep = np.sort(top[:-1])
    p = np.exp(x[keep].astype(np.float64) / T)
    p /= p.sum()  # the 262k-5 tokens at -20 are outside the 30-nat window at T = 0.8
    counts = np.array([(draws == k).sum() for k in keep])
    assert counts.sum() == n
    assert chisquare(counts, p * n).pvalue > 1e-3


def test_sample_rows_edges_and_errors():
    x = np.array([[0.0, 3.0, 3.0, -np.inf]], np.float32)
    assert kernels.sample_rows(x, [0.0], 0.0, 30.0).tolist() == [1]  # greedy: lowest id on ties
    assert kernels.sample_rows(x, [0.0], 0.0, 30.0, banned_ids=[1]).tolist() == [2]
    assert kernels.sample_rows(x, [0.0], 1.0, 30.0).tolist() == [0]  # u = 0: first id with p > 0
    assert kernels.sample_rows(x, [np.nextafter(1.0, 0)], 1.0, 30.0).tolist() == [2]  # never the -inf token
    assert kernels.sample_rows(x, [0.0], 1.0, 1.0).tolist() == [1]  # token 0 is 3 nats out of a 1-nat window
    for kwargs, match in (
        (dict(uniforms=[1.0]), r"uniforms\[0\] = 1.0"),
        (dict(uniforms=[0.1, 0.2]), "shape"),
        (dict(temperature=-1.0), "temperature"),
        (dict(window=0.0), "window"),
        (dict(banned_ids=[0, 1, 2, 3]), "every allowed"),
    ):
        args = dict(logits=x, uniforms=[0.5], temperature=1.0, window=30.0) | kwargs
        with pytest.raises(InvalidParameter, match=match):
            kernels.sample_rows(**args)
    with pytest.raises(InvalidParameter, match="NaN"):
        kernels.sample_rows(np.array([[0.0, np.nan]], np.float32), [0.5], 1.0, 30.0)


# --------------------------------------------------------------------------
# rows spanning several CTX_BLOCK pieces
#
# The C kernels walk a row in pieces of CTX_BLOCK = 2048 floats
# (csrc/simd.h): a running log-sum-exp whose reference point moves
# up when a later piece has a larger maximum, pieces that restart at block
# boundaries after a banned id, and a sampler that skips whole pieces by their
# sums. These cases make every row 2-6 pieces long, put the row maximum in any
# piece (later pieces larger *and* smaller than earlier ones, far enough apart
# that a missed rescale or a wrong reference point is visible), kill whole
# pieces with -inf and ban ids around the boundaries.

BLOCK = 2048  # CTX_BLOCK in csrc/simd.h


def test_block_size_matches_the_c_source():
    import re

    src = (REPO / "csrc" / "simd.h").read_text()
    assert int(re.search(r"#define CTX_BLOCK (\d+)", src).group(1)) == BLOCK


@st.composite
def multiblock_case(draw, two_sided=False):
    n_blocks = draw(st.integers(2, 6))
    V = draw(
        st.one_of(
            st.sampled_from([n_blocks * BLOCK, n_blocks * BLOCK - 1, (n_blocks - 1) * BLOCK + 1]),
            st.integers((n_blocks - 1) * BLOCK + 1, n_blocks * BLOCK),
        )
    )
    n_rows = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    flat = draw(st.booleans())  # comparable mass in every piece (the sampler walks past several)
    scale = 1.0 if flat else draw(st.sampled_from([1.0, 5.0]))
    step = 0.0 if flat else draw(st.sampled_from([8.0, 30.0, 80.0]))
    dead_blocks = draw(st.booleans())

    def rows():
        x = rng.standard_normal((n_rows, V)) * scale
        for r in range(n_rows):
            offsets = rng.permutation(n_blocks) * step  # the largest piece may come first, last or between
            for k in range(n_blocks):
                x[r, k * BLOCK : (k + 1) * BLOCK] += offsets[k]
            if dead_blocks:
                k = rng.integers(n_blocks)
                x[r, k * BLOCK : (k + 1) * BLOCK] = -np.inf
        return x.astype(np.float32)

    a = rows()
    b = rows() if two_sided else None
    banned = None
    if draw(st.booleans()):
        near = [k * BLOCK + d for k in range(1, n_blocks) for d in (-1, 0, 1)]
        banned = np.unique(
            np.concatenate([rng.choice(near, size=min(len(near), 4), replace=False), rng.integers(0, V, size=3)])
        )
        banned = banned[banned < V]
    ban_rows = None if banned is None or draw(st.booleans()) else rng.random(n_rows) < 0.5
    for r in range(n_rows):  # a finite allowed logit on each side of every row
        allowed = np.ones(V, bool)
        if banned is not None and (ban_rows is None or ban_rows[r]):
            allowed[banned] = False
        for x in (a, b) if two_sided else (a,):
            if not np.isfinite(x[r][allowed]).any():
                x[r, rng.choice(np.flatnonzero(allowed))] = np.float32(0.0)
    # targets in a late piece, at a boundary, anywhere
    targets = np.array([rng.choice([V - 1, (V - 1) // BLOCK * BLOCK, int(rng.integers(V))]) for _ in range(n_rows)])
    T = draw(st.sampled_from([0.3, 1.0, 2.5]))
    return a, b, targets, T, banned, ban_rows


MULTI = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@MULTI
@given(multiblock_case())
def test_logprob_gather_matches_reference_across_blocks(case):
    a, _, targets, T, banned, ban_rows = case
    assert a.shape[1] > BLOCK
    assert_close(
        kernels.logprob_gather(a, targets, T, banned, ban_rows), ref.logprob_gather(a, targets, T, banned, ban_rows)
    )


@MULTI
@given(multiblock_case(two_sided=True), st.sampled_from([0.0, 0.5, 1.0, 1.7]))
def test_mixed_logprob_matches_reference_across_blocks(case, lam):
    a, b, targets, T, banned, ban_rows = case
    mask = ref._ban_mask(a.shape[1], a.shape[0], banned, ban_rows)
    mixed = np.stack([ref._mix(a[r].astype(float), b[r].astype(float), lam) for r in range(a.shape[0])])
    assume(np.isfinite(np.where(mask, -np.inf, mixed)).any(axis=1).all())
    got = kernels.mixed_logprob(a, b, targets, lam, T, banned, ban_rows, want_max_abs_pmi=True)
    want = ref.mixed_logprob(a, b, targets, lam, T, banned, ban_rows, want_max_abs_pmi=True)
    assert_close(got.logprob, want.logprob)
    assert_close(got.max_abs_pmi, want.max_abs_pmi)


@MULTI
@given(multiblock_case(), st.sampled_from([5.0, 30.0, np.inf]), st.integers(0, 2**32 - 1))
def test_sample_rows_matches_reference_across_blocks(case, window, seed):
    a, _, _, T, banned, ban_rows = case
    u = np.random.default_rng(seed).random(len(a))
    got = kernels.sample_rows(a, u, T, window, banned, ban_rows)
    want = ref.sample_rows(a, u, T, window, banned, ban_rows)
    for r in np.flatnonzero(got != want):
        row_banned = banned if banned is not None and (ban_rows is None or ban_rows[r]) else None
        assert _ref_boundary_gap(a[r], u[r], T, window, row_banned, got[r], want[r]) < 1e-5


def test_sample_rows_walks_past_whole_pieces():
    """Equal mass in each of 5 pieces: u in the k-th fifth draws from the k-th piece."""
    V = 5 * BLOCK
    x = np.zeros((1, V), np.float32)
    for k in range(5):
        u = (k + 0.5) / 5
        got = int(kernels.sample_rows(x, [u], 1.0, 30.0)[0])
        assert got == int(ref.sample_rows(x, [u], 1.0, 30.0)[0])
        assert k * BLOCK <= got < (k + 1) * BLOCK


def test_logsumexp_rescales_when_a_later_piece_is_larger():
    """Piece 0 at 0, piece 2 at +40, piece 3 at -40: exact log-probs in closed form."""
    V = 4 * BLOCK
    x = np.zeros(V, np.float32)
    x[2 * BLOCK : 3 * BLOCK] = 40.0
    x[3 * BLOCK :] = -40.0
    big = np.log(BLOCK) + np.log1p(2 * np.exp(-40.0) + np.exp(-80.0))  # log Z - 40
    want = np.array([0.0 - 40.0, 40.0 - 40.0, -40.0 - 40.0]) - big
    got = kernels.logprob_gather(np.repeat(x[None], 3, 0), [5, 2 * BLOCK + 7, V - 1])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-6)
    mixed = kernels.mixed_logprob(
        np.repeat(x[None], 3, 0), np.zeros((3, V), np.float32), [5, 2 * BLOCK + 7, V - 1], 1.0, 1.0
    )
    np.testing.assert_allclose(mixed.logprob, want, rtol=1e-9, atol=1e-6)
    half = kernels.mixed_logprob(
        np.repeat(x[None], 3, 0), np.zeros((3, V), np.float32), [5, 2 * BLOCK + 7, V - 1], 0.5, 1.0
    )
    np.testing.assert_allclose(
        half.logprob,
        ref.mixed_logprob(
            np.repeat(x[None], 3, 0), np.zeros((3, V), np.float32), [5, 2 * BLOCK + 7, V - 1], 0.5, 1.0
        ).logprob,
        rtol=1e-9,
        atol=1e-6,
    )


# --------------------------------------------------------------------------
# mechanisms


@SETTINGS
@given(st.integers(1, 30), st.lists(st.integers(0, 29), max_size=60), st.integers(0, 2**32 - 1), st.booleans())
def test_noisy_histogram_matches_reference(n_classes, votes, seed, integer_noise):
    votes = [v % n_classes for v in votes]
    rng = np.random.default_rng(seed)
    noise = rng.integers(-2, 3, n_classes).astype(float) if integer_noise else rng.normal(0, 3, n_classes)
    got = kernels.noisy_histogram(votes, n_classes, noise)
    want = ref.noisy_histogram(votes, n_classes, noise)
    np.testing.assert_array_equal(got.counts, want.counts)
    np.testing.assert_array_equal(got.noisy_counts, want.noisy_counts)
    assert got.argmax == want.argmax  # np.argmax also takes the first of ties


@pytest.mark.parametrize(
    "votes, n_classes, noise, match",
    [
        ([0, 3], 3, [0.0] * 3, r"votes\[1\] = 3"),
        ([-1], 3, [0.0] * 3, r"votes\[0\] = -1"),
        ([0], 0, [], "n_classes"),
        ([0], 3, [0.0] * 2, "noise"),
        ([0], 3, [0.0, np.nan, 0.0], r"noise\[1\]"),
        ([0.5], 3, [0.0] * 3, "integer"),
    ],
)
def test_noisy_histogram_rejects_bad_input(votes, n_classes, noise, match):
    with pytest.raises(InvalidParameter, match=match):
        kernels.noisy_histogram(votes, n_classes, noise)


@SETTINGS
@given(st.integers(1, 20), st.integers(1, 64), st.integers(0, 2**32 - 1), st.floats(1e-3, 1e3))
def test_embed_aggregate_matches_reference(m, d, seed, clip):
    rng = np.random.default_rng(seed)
    E = rng.standard_normal((m, d)) * rng.choice([1e-3, 1.0, 1e3])
    E[rng.random(m) < 0.2] = 0.0  # zero rows stay zero
    noise = rng.normal(0, 1, d)
    got = kernels.embed_aggregate(E, clip, noise)
    np.testing.assert_allclose(got, ref.embed_aggregate(E, clip, noise), rtol=1e-12, atol=1e-12)


def test_embed_aggregate_clips_to_norm_and_handles_huge_entries():
    E = np.array([[1e300, 1e300], [0.0, 0.0]])
    out = kernels.embed_aggregate(E, 2.0, [0.0, 0.0])
    np.testing.assert_allclose(out, [np.sqrt(2) / 2, np.sqrt(2) / 2])


@pytest.mark.parametrize(
    "E, C, noise, match",
    [
        ([[1.0, 2.0]], 0.0, [0.0, 0.0], "clip_norm"),
        ([[1.0, 2.0]], -1.0, [0.0, 0.0], "clip_norm"),
        ([[1.0, 2.0]], np.nan, [0.0, 0.0], "clip_norm"),
        ([[1.0, np.inf]], 1.0, [0.0, 0.0], r"embeddings\[0, 1\]"),
        ([[1.0, 2.0]], 1.0, [np.nan, 0.0], r"noise\[0\]"),
        ([[1.0, 2.0]], 1.0, [0.0], "noise"),
        ([1.0, 2.0], 1.0, [0.0, 0.0], "2-D"),
        ([["a", "b"]], 1.0, [0.0, 0.0], "dtype"),
    ],
)
def test_embed_aggregate_rejects_bad_input(E, C, noise, match):
    with pytest.raises(InvalidParameter, match=match):
        kernels.embed_aggregate(E, C, noise)


@SETTINGS
@given(st.integers(1, 20), st.integers(1, 32), st.integers(0, 2**32 - 1))
def test_nearest_cosine_matches_reference(k, d, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(d)
    cands = rng.standard_normal((k, d))
    cands[rng.random(k) < 0.2] = 0.0
    if k > 1 and rng.random() < 0.5:
        cands[-1] = cands[0] * 2.0  # an exact tie in direction: lowest index wins
    got = kernels.nearest_cosine(q, cands)
    sims = ref.cosine_similarities(q, cands)
    assert sims[got] >= sims.max() - 1e-12
    assert got == ref.nearest_cosine(q, cands) or abs(sims[got] - sims.max()) <= 1e-12


def test_nearest_cosine_ties_zero_candidates_and_zero_query():
    assert kernels.nearest_cosine([1.0, 0.0], [[0.0, 0.0], [0.0, 1.0], [3.0, 0.0], [1.0, 0.0]]) == 2
    assert kernels.nearest_cosine([1.0, 0.0], [[-1.0, 0.0], [0.0, 0.0]]) == 1  # zero beats negative
    assert kernels.nearest_cosine([0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]]) == 0


@pytest.mark.parametrize(
    "q, cands, match",
    [
        ([1.0, np.nan], [[1.0, 0.0]], r"query\[1\]"),
        ([1.0, 0.0], [[1.0, 0.0], [np.inf, 0.0]], r"candidates\[1, 0\]"),
        ([1.0, 0.0, 0.0], [[1.0, 0.0]], "shape"),
        ([1.0, 0.0], np.zeros((0, 2)), "empty"),
    ],
)
def test_nearest_cosine_rejects_bad_input(q, cands, match):
    with pytest.raises(InvalidParameter, match=match):
        kernels.nearest_cosine(q, cands)


def test_status_codes_come_from_the_header():
    assert kernels.lib.CTXLITE_OK == 0
    codes = [getattr(kernels.lib, n) for n in dir(kernels.lib) if n.startswith("CTXLITE_ERR_")]
    assert len(codes) == len(set(codes)) >= 8 and 0 not in codes


_Z = np.zeros((2, 5), np.float32)


@pytest.mark.parametrize(
    "call, function, code, bad_value",
    [
        (
            lambda: kernels.logprob_gather(np.where(np.eye(2, 5, 3) > 0, np.nan, 0).astype(np.float32), [0, 0]),
            "logprob_gather",
            "NONFINITE",
            "logits[0, 3] = nan",
        ),
        (lambda: kernels.logprob_gather(_Z, [0, 5]), "logprob_gather", "BAD_INDEX", "targets[1] = 5, not in [0, 5)"),
        (lambda: kernels.logprob_gather(_Z, [0, 1], 0.0), "logprob_gather", "BAD_TEMPERATURE", "temperature = 0.0"),
        (
            lambda: kernels.logprob_gather(_Z, [0, 1], banned_ids=[7]),
            "logprob_gather",
            "BAD_BANNED",
            "banned_ids contains 7 (V = 5)",
        ),
        (
            lambda: kernels.logprob_gather(np.array([[0.0], [-np.inf]], np.float32), [0, 0]),
            "logprob_gather",
            "EMPTY_ROW",
            "row 1",
        ),
        (lambda: kernels.mixed_logprob(_Z, _Z, [0, 1], float("nan")), "mixed_logprob", "BAD_LAMBDA", "lam = nan"),
        (
            lambda: kernels.mixed_logprob(_Z, np.where(np.eye(2, 5, 1) > 0, np.inf, 0).astype(np.float32), [0, 1], 0.5),
            "mixed_logprob",
            "NONFINITE",
            "without_context[0, 1] = inf",
        ),
        (lambda: kernels.sample_rows(_Z, [0.5, 1.5], 1.0, 30.0), "sample_rows", "BAD_UNIFORM", "uniforms[1] = 1.5"),
        (lambda: kernels.sample_rows(_Z, [0.5, 0.5], 1.0, float("nan")), "sample_rows", "BAD_WINDOW", "window = nan"),
        (
            lambda: kernels.sample_rows(_Z, [0.5, 0.5], float("inf"), 30.0),
            "sample_rows",
            "BAD_TEMPERATURE",
            "temperature = inf",
        ),
        (
            lambda: kernels.noisy_histogram([1, 4], 3, [0.0] * 3),
            "noisy_histogram",
            "BAD_INDEX",
            "votes[1] = 4, not in [0, 3)",
        ),
        (
            lambda: kernels.noisy_histogram([1], 3, [0.0, 0.0, -np.inf]),
            "noisy_histogram",
            "NONFINITE",
            "noise[2] = -inf",
        ),
        (
            lambda: kernels.embed_aggregate([[1.0, 2.0], [3.0, np.nan]], 1.0, [0.0, 0.0]),
            "embed_aggregate",
            "NONFINITE",
            "embeddings[1, 1] = nan",
        ),
        (
            lambda: kernels.embed_aggregate([[1.0, 2.0]], 1.0, [0.0, -np.inf]),
            "embed_aggregate",
            "NONFINITE",
            "noise[1] = -inf",
        ),
        (
            lambda: kernels.embed_aggregate([[1.0, 2.0]], np.inf, [0.0, 0.0]),
            "embed_aggregate",
            "BAD_CLIP",
            "clip_norm = inf",
        ),
        (lambda: kernels.nearest_cosine([np.inf, 0.0], [[1.0, 0.0]]), "nearest_cosine", "NONFINITE", "query[0] = inf"),
        (
            lambda: kernels.nearest_cosine([1.0, 0.0], [[1.0, 0.0], [0.0, -np.inf]]),
            "nearest_cosine",
            "NONFINITE",
            "candidates[1, 1] = -inf",
        ),
    ],
)
def test_error_message_is_function_bad_value_and_the_c_reason(call, function, code, bad_value):
    """``function: bad value: reason``, the reason being ctxlite_strerror of the status the kernel returned."""
    reason = kernels.ffi.string(kernels.lib.ctxlite_strerror(getattr(kernels.lib, f"CTXLITE_ERR_{code}"))).decode()
    with pytest.raises(InvalidParameter) as info:
        call()
    assert str(info.value) == f"{function}: {bad_value}: {reason}"


@pytest.mark.parametrize("status", ["BAD_SIZE", "unknown"])
def test_error_without_a_python_side_value_still_names_the_status(status):
    code = getattr(kernels.lib, f"CTXLITE_ERR_{status}", 99)
    with pytest.raises(InvalidParameter) as info:
        kernels._check(code, kernels.ffi.new("int64_t *", 4), "some_kernel")
    reason = kernels.ffi.string(kernels.lib.ctxlite_strerror(code)).decode()
    assert str(info.value) == f"some_kernel: status {code}, err_at 4: {reason}"
    kernels._check(kernels.lib.CTXLITE_OK, kernels.ffi.new("int64_t *", -1), "some_kernel")  # OK: no raise
