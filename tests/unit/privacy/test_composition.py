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


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 10), st.floats(0.01, 3.0), st.floats(0.0, 1.0))
def test_delta_is_the_hockey_stick_divergence_of_k_fold_randomized_response(k, eps, frac):
    eps_total = frac * k * eps
    assert composed_delta(k, eps, eps_total) == pytest.approx(brute_delta(k, eps, eps_total), rel=1e-9, abs=1e-15)


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
