"""Adaptive ablation search (ctxlite.influence.search) against exhaustive search, on synthetic
influence oracles where the right answer is known. The model tests are in test_search_model.py."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxlite.errors import InvalidParameter
from ctxlite.influence.search import (
    ADAPTIVE_FROM_TOKENS,
    AdaptiveRule,
    adaptive_search,
    children,
    choose_search,
    exhaustive_reference,
)


def additive_oracle(values, calls=None, combine=sum):
    """τ(B) = Σ_{i∈B} v_i (or another monotone ``combine``, e.g. max): removing more never moves
    the response less (a monotone influence)."""

    def measure(nodes):
        if calls is not None:
            calls.append(list(nodes))
        return [{"k": float(combine(values[i:j]))} for i, j in nodes]

    return measure


rules = st.builds(
    AdaptiveRule,
    top=st.integers(1, 5),
    refine_ratio=st.floats(0.05, 1.0),  # ρ ≤ 1: exact for monotone τ (ρ > 1 may prune a top block)
    branching=st.integers(2, 6),
    top_blocks=st.integers(1, 20),
)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.integers(0, 50).map(float), min_size=1, max_size=300),
    rule=rules,
    combine=st.sampled_from([sum, max]),
)
@example(  # a block whose τ lies between the K-th n-gram's τ (7) and twice it hides the second 10 (found by search)
    values=[
        0.0,
        0.0,
        4.0,
        0.0,
        10.0,
        0.0,
        0.0,
        1.0,
        0.0,
        0.0,
        1.0,
        4.0,
        0.0,
        0.0,
        4.0,
        7.0,
        0.0,
        1.0,
        10.0,
        7.0,
        0.0,
        4.0,
    ],
    rule=AdaptiveRule(top=2, refine_ratio=1.0, branching=2, top_blocks=2),
    combine=sum,
)
def test_adaptive_finds_the_exhaustive_top_k_when_influence_is_monotone(values, rule, combine):
    """With a monotone τ every ancestor of a top-K n-gram has τ ≥ the K-th found ≥ ρ times it,
    so it is refined: a converged search's top-K values equal exhaustive search's. (With max,
    a block's τ is exactly its best n-gram's: the tightest case for ρ.)"""
    found = adaptive_search(len(values), ["k"], additive_oracle(values, combine=combine), rule)
    assert found.ablations <= len(values)  # never more than exhaustive search
    if not found.converged:
        return
    k = min(rule.top, len(values))
    top = sorted((found.tau[(i, i + 1)]["k"] for i in found.leaves), reverse=True)[:k]
    truth = sorted(values, reverse=True)[:k]
    if truth[-1] == 0:  # zero-influence windows are never worth refining for
        top, truth = [v for v in top if v], [v for v in truth if v]
    assert top == truth


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.integers(0, 50).map(float), min_size=1, max_size=200),
    rule=rules,
    budget=st.integers(20, 300),
)
def test_budget_is_never_exceeded(values, rule, budget):
    top_level = -(-len(values) // rule.block_size(len(values)))
    if budget < top_level:
        with pytest.raises(InvalidParameter):
            adaptive_search(len(values), ["k"], additive_oracle(values), rule, budget=budget)
        return
    calls = []
    found = adaptive_search(len(values), ["k"], additive_oracle(values, calls), rule, budget=budget)
    assert found.ablations == sum(len(c) for c in calls) <= budget
    assert len({node for c in calls for node in c}) == found.ablations  # nothing measured twice


def test_a_planted_span_is_found_with_a_fraction_of_the_ablations():
    values = [1.0] * 256
    values[137] = 400.0
    found = adaptive_search(256, ["k"], additive_oracle(values), AdaptiveRule(top=1, refine_ratio=0.5))
    assert found.converged
    best = max(found.leaves, key=lambda i: found.tau[(i, i + 1)]["k"])
    assert best == 137
    assert found.ablations <= 256 // 4
    assert exhaustive_reference(256, ["k"], additive_oracle(values), 1) == {"k": [137]}


def test_several_keys_are_searched_at_once():
    """A λ sweep on one response: the union of what each key needs is refined."""
    a, b = [1.0] * 64, [1.0] * 64
    a[5], b[50] = 100.0, 100.0

    def measure(nodes):
        return [{"a": float(sum(a[i:j])), "b": float(sum(b[i:j]))} for i, j in nodes]

    found = adaptive_search(64, ["a", "b"], measure, AdaptiveRule(top=1, top_blocks=4))
    assert {5, 50} <= set(found.leaves)


def test_a_cancelling_block_can_hide_a_top_ngram():
    """The documented failure: τ is not monotone. Window 3 moves the response by 10 alone, but its
    block also holds window 2, which moves it the opposite way, so the block's τ is 1, below
    ρ·τ_(1) = 0.5 · 3 of the other block's best n-gram, and the search never looks inside;
    exhaustive search ranks window 3 first."""
    signed = [0.0, 0.0, -9.0, 10.0, 3.0, 0.5, 0.0, 0.0]

    def measure(nodes):
        return [{"k": abs(sum(signed[i:j]))} for i, j in nodes]

    found = adaptive_search(8, ["k"], measure, AdaptiveRule(top=1, branching=4, top_blocks=2))
    assert exhaustive_reference(8, ["k"], measure, 1) == {"k": [3]}
    assert 3 not in found.leaves and found.converged


@given(i=st.integers(0, 100), size=st.integers(1, 300), branching=st.integers(2, 8))
def test_children_partition_their_parent(i, size, branching):
    kids = children((i, i + size), branching)
    assert kids[0][0] == i and kids[-1][1] == i + size
    assert all(a < b for a, b in kids) and all(kids[t][1] == kids[t + 1][0] for t in range(len(kids) - 1))
    assert len(kids) <= branching and (size == 1 or len(kids) >= 2)


def test_block_size_gives_at_most_top_blocks():
    rule = AdaptiveRule(branching=4, top_blocks=16)
    assert [rule.block_size(w) for w in (1, 16, 17, 64, 65, 256, 257)] == [1, 1, 4, 4, 16, 16, 64]


def test_auto_switches_at_the_documented_length():
    assert choose_search("auto", ADAPTIVE_FROM_TOKENS - 1) == "exhaustive"
    assert choose_search("auto", ADAPTIVE_FROM_TOKENS) == "adaptive"
    assert choose_search("exhaustive", 10_000) == "exhaustive"
    assert choose_search("adaptive", 10) == "adaptive"
    with pytest.raises(InvalidParameter):
        choose_search("greedy", 10)


@pytest.mark.parametrize(
    "kwargs",
    [{"top": 0}, {"refine_ratio": 0}, {"refine_ratio": float("inf")}, {"branching": 1}, {"top_blocks": 0}],
)
def test_bad_rules_are_refused(kwargs):
    with pytest.raises(InvalidParameter):
        AdaptiveRule(**kwargs)
