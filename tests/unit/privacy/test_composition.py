"""The optimal composition of pure ε-DP (ctxlite.privacy.composition) against a slow, obviously
right reference: the hockey-stick divergence of k-fold randomized response summed over every one
of its 2^k outcomes, and an independent accountant (Google's dp_accounting, privacy loss
distributions)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.errors import InvalidParameter
from ctxlite.privacy import composition
from ctxlite.privacy.composition import MAX_COUNTED, composed_delta, composed_epsilon, max_compositions


def brute_delta(k: int, eps: float, eps_total: float) -> float:
    """Σ over the 2^k outcomes o of [P(o) − e^{ε'} Q(o)]_+, P and Q k-fold randomized response on
    the two neighbouring inputs (each answer kept with probability e^ε / (1 + e^ε))."""
    p = math.exp(eps) / (1 + math.exp(eps))
    total = 0.0
    for outcome in itertools.product((0, 1), repeat=k):
        flips = sum(outcome)
        a = p ** (k - flips) * (1 - p) ** flips
        b = p**flips * (1 - p) ** (k - flips)
        total += max(a - math.exp(eps_total) * b, 0.0)
    return total


def brute_epsilon(k: int, eps: float, delta: float) -> float:
    """The smallest ε' with brute_delta ≤ δ, by bisection on [0, kε] (brute_delta decreases in ε')."""
    lo, hi = 0.0, k * eps
    if brute_delta(k, eps, 0.0) <= delta:
        return 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if brute_delta(k, eps, mid) <= delta else (mid, hi)
    return hi


def rounding_bound(k: int) -> float:
    """A worst-case bound on the float64 rounding of either side, from an error analysis rather than
    the draws seen (u = 2^-53): p = e^ε / (1 + e^ε) is off by ≤ 3u relative, so a = p^(k−i)(1−p)^i and
    e^{ε'}·b by ≤ (3k + 3)u relative each; a term [a − e^{ε'} b]_+ is then off by ≤ (6k + 6)u·a (up to
    second order) wherever it can be non-zero (e^{ε'} b ≤ a(1 + (6k + 6)u)) and is 0 on both sides
    elsewhere; Σ a = 1, and adding 2^k non-negative terms of sum ≤ 1 adds ≤ 2^k·u. Twice that covers
    the library's sum over flip counts, whose binomial weights round less than 2^k terms do."""
    return 2 * (6 * k + 6 + 2**k) * 2.0**-53


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 10), st.floats(0.01, 3.0), st.floats(0.0, 1.0))
def test_delta_is_the_hockey_stick_divergence_of_k_fold_randomized_response(k, eps, frac):
    """At ε' = kε the divergence is exactly 0, and the reference rounds to ~1e-15 there: the absolute
    tolerance is :func:`rounding_bound`, not a number fitted to the draws (abs=1e-15 failed on k = 2,
    ε = 3, frac = 1 with 1.3e-15)."""
    eps_total = frac * k * eps
    want = brute_delta(k, eps, eps_total)
    assert composed_delta(k, eps, eps_total) == pytest.approx(want, rel=1e-9, abs=rounding_bound(k))


def test_the_draw_that_failed_a_clean_clone():
    """k = 2, ε = 3, ε' = kε: both sides are 0 up to rounding (the reference gave 1.3e-15)."""
    assert composed_delta(2, 3.0, 6.0) == pytest.approx(brute_delta(2, 3.0, 6.0), abs=rounding_bound(2))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), st.floats(0.05, 2.0), st.sampled_from([1e-5, 1e-3, 0.05, 0.3]))
def test_epsilon_is_the_smallest_with_delta_within(k, eps, delta):
    got = composed_epsilon(k, eps, delta)
    assert brute_delta(k, eps, got) <= delta * (1 + 1e-9)  # a guarantee
    assert got <= k * eps
    assert got == pytest.approx(brute_epsilon(k, eps, delta), rel=1e-7, abs=1e-12)  # and the smallest


def test_it_agrees_with_an_independent_accountant():
    """dp_accounting's PLD accountant composing k pure-ε events (its discretisation is pessimistic:
    its ε' is at least ours, and close)."""
    from dp_accounting.pld import common, privacy_loss_distribution

    for k, eps, delta in ((50, 0.1, 1e-5), (200, 0.05, 1e-5), (20, 1.0, 1e-6)):
        one = privacy_loss_distribution.from_privacy_parameters(
            common.DifferentialPrivacyParameters(eps, 0.0), value_discretization_interval=1e-4
        )
        theirs = one.self_compose(k).get_epsilon_for_delta(delta)
        ours = composed_epsilon(k, eps, delta)
        assert ours <= theirs + 1e-6 and theirs - ours <= 0.01 * ours + 1e-3, (k, eps, ours, theirs)


def test_it_beats_basic_composition_only_over_many_releases():
    assert 1.0 - 1e-4 < composed_epsilon(1, 1.0, 1e-5) <= 1.0  # one release: ε, a hair less at δ > 0
    assert composed_epsilon(1000, 0.05, 1e-5) < 0.25 * 1000 * 0.05  # many small ones: far below kε
    assert composed_epsilon(10, 2.0, 1e-5) == pytest.approx(20.0, abs=1e-3)  # few large ones: kε


def test_the_most_releases_within_a_budget():
    for budget, eps, delta in ((10.0, 0.05, 1e-5), (6.0, 1.0, None), (30.0, 1.0, 1e-5), (0.5, 1.0, 1e-5)):
        k = max_compositions(budget, eps, delta)
        spent = (lambda n: n * eps) if delta is None else (lambda n: composed_epsilon(n, eps, delta))
        assert spent(k) <= budget + 1e-9 and spent(k + 1) > budget, (budget, eps, delta, k)
    assert max_compositions(10.0, 0.05, 1e-5) > max_compositions(10.0, 0.05) == 200
    # a budget a hair below k·ε: basic composition's rounding slack must not let k through
    assert max_compositions(1 - 1e-10, 0.5, 1e-15) == 1 and composed_epsilon(2, 0.5, 1e-15) > 1 - 1e-10
    # at most MAX_COUNTED releases are counted with a δ: fewer than allowed, never more
    assert max_compositions(50.0, 1e-5, 0.5) == MAX_COUNTED


@pytest.mark.parametrize(
    "call",
    [
        lambda: composed_delta(-1, 1.0, 0.0),
        lambda: composed_delta(2, 0.0, 0.0),
        lambda: composed_delta(2, 1.0, math.nan),
        lambda: composed_epsilon(2, 1.0, 0.0),
        lambda: composed_epsilon(2, 1.0, 1.0),
        lambda: max_compositions(-1.0, 1.0),
        lambda: max_compositions(math.inf, 1.0),
    ],
)
def test_bad_arguments_are_refused(call):
    with pytest.raises(InvalidParameter):
        call()


def test_the_table_of_docs_serve_md_is_what_max_compositions_gives():
    from tests.docs_pages import REPO

    page = (REPO / "docs" / "serve.md").read_text(encoding="utf-8")
    rows = [line.split("|")[1:5] for line in page.splitlines() if line.startswith("| ") and line.count("|") == 5]
    rows = [[c.strip().replace(",", "") for c in row] for row in rows if row[0].strip()[0].isdigit()]
    assert len(rows) >= 5
    for eps, budget, basic, optimal in rows:
        eps, budget = float(eps), float(budget)
        assert (max_compositions(budget, eps), max_compositions(budget, eps, 1e-5)) == (int(basic), int(optimal))


def bisected_epsilon(k: int, eps: float, delta: float) -> float:
    """The smallest ε' with δ_k(ε') ≤ δ by bisection on the library's exact O(k) sum (composed_delta):
    the obviously right, slow way the closed form replaced."""
    lo, hi = 0.0, k * eps
    if composed_delta(k, eps, 0.0) <= delta:
        return 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (lo, mid) if composed_delta(k, eps, mid) <= delta else (mid, hi)
    return hi


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4000),
    st.floats(1e-3, 4.0),
    st.sampled_from([1e-12, 1e-7, 1e-5, 1e-3, 0.05, 0.3, 0.9]),
)
def test_the_closed_form_is_the_bisection_of_the_exact_sum(k, eps, delta):
    """The per-segment closed form (only the terms near the binomial's centre, the rest paid into δ)
    against bisection on the full O(k) sum: never below it (a guarantee: δ_k at the answer is within
    δ) and above it by no more than what the closed form says it may exceed the exact value by (its
    float64 margin from an error analysis and the tail it paid into δ; a relative 1e-9 failed a
    draw, k = 495, ε = 1e-3, δ = 1e-3, where that is 2.9e-11 on ε' = 0.029),
    plus the reference's rounding, which the same analysis bounds by that margin again (the same
    log-terms, summed over all k: the crossing moves by its δ error over the slope A_j − δ), plus
    the bisection's last step; and that margin is small."""
    got, want = composed_epsilon(k, eps, delta), bisected_epsilon(k, eps, delta)
    _, _, margin = composition._solve(k, eps, delta)
    assert composed_delta(k, eps, got) <= delta
    assert want - 1e-12 * k * eps <= got <= want + 2 * margin + 8 * 2.0**-52 * want, (got, want, margin)
    assert margin <= 1e-7 * max(want, 1e-3), margin


def test_the_draw_where_the_margin_exceeded_a_relative_1e_9():
    """k = 495, ε = 1e-3, δ = 1e-3: within the margin, which is more than 1e-9 of ε' there."""
    got, want = composed_epsilon(495, 1e-3, 1e-3), bisected_epsilon(495, 1e-3, 1e-3)
    margin = composition._solve(495, 1e-3, 1e-3)[2]
    assert margin > 1e-9 * want and want <= got <= want + 2 * margin + 8 * 2.0**-52 * want


def test_the_most_releases_take_few_terms_to_count(monkeypatch):
    """A server counts its budget's tokens at start: ``max_compositions(1000, 0.01, 1e-5)`` (10^7
    tokens, the cap) must not sum O(k) terms per candidate k (a budget of 100 took 51 s, 300 did not
    finish in 250 s). Counted, not timed: every log-binomial term evaluated passes through gammaln,
    and the count stays O(log k · √(k log(1/δ))), here under 2·10^6 (10^7 per candidate before)."""
    from ctxlite.privacy import composition

    counted = [0]
    real = composition.gammaln

    def counting(x):
        counted[0] += max(1, getattr(x, "size", 1))
        if counted[0] > 2_000_000:
            raise AssertionError(f"more than 2e6 terms evaluated ({counted[0]})")
        return real(x)

    monkeypatch.setattr(composition, "gammaln", counting)
    assert max_compositions(1000.0, 0.01, 1e-5) == MAX_COUNTED
    assert counted[0] <= 2_000_000
    counted[0] = 0
    assert max_compositions(100.0, 0.01, 1e-5) == 1_115_792
    one = counted[0]
    counted[0] = 0
    composed_epsilon(1_115_792, 0.01, 1e-5)
    assert counted[0] <= 20 * math.sqrt(1_115_792) and one <= 60 * counted[0]
