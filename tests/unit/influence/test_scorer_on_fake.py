"""The scorer on the FakeBackend: its prefix reuse equals the exact path bit for bit, a broken reuse is
caught, every backend shape gives the same numbers where it can give them, and the adaptive search and
the noise floor keep their bookkeeping -- all without a model."""

from __future__ import annotations

import numpy as np
import pytest

from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings
from ctxlite.runtime.backend import LogitRows, TeacherForcing
from ctxlite.runtime.fake import FakeBackend

EXAMPLE = Example(
    context="Alice Smith was born on 1970-01-02 in Springfield; her account number is 4411-2233 at First Bank.",
    query="When was Alice Smith born?",
    response="Alice Smith was born on 1970-01-02.",
    id="alice",
)


def numbers(result) -> list:
    """Everything a result measured, per λ: the per-token log-probabilities and every n-gram's τ."""
    return [
        (r.lam, r.token_logprob, r.token_logprob_without, [(g.start, g.per_token) for g in r.ngrams])
        for r in result.results
    ]


def score(backend, **settings):
    s = {"lambdas": (1.0, 0.5), "ngram": 4, "search": "exhaustive", "null_ablations": 0, **settings}
    return InfluenceScorer(backend, "qa", InfluenceSettings(**s)).score(EXAMPLE)


@pytest.mark.parametrize("stride", [None, 1, 3])
def test_reuse_equals_exact_bit_for_bit(stride):
    backend = FakeBackend(seed=7)
    reuse, exact = score(backend, stride=stride), score(backend, stride=stride, exact=True)
    assert numbers(reuse) == numbers(exact)
    assert reuse.results[0].search.tokens_decoded < exact.results[0].search.tokens_decoded


class ReusesOneCellTooMany(FakeBackend):
    """A prefix reuse off by one: it keeps the first cell the variant does not share with the base."""

    def _reuse_from(self, shared: int) -> int:
        return min(super()._reuse_from(shared) + 1, len(self._cells))


def test_a_broken_prefix_reuse_is_caught():
    """The check above has teeth: with a reuse that keeps one stale cell, reuse and exact differ."""
    backend = ReusesOneCellTooMany(seed=7)
    assert numbers(score(backend)) != numbers(score(backend, exact=True))


def test_each_backend_shape_gives_the_same_numbers():
    """Rows with reuse, rows without reuse, and teacher forcing alone (a server's shape; λ = 1 only)."""
    full = score(FakeBackend(seed=7))
    rows_only = score(FakeBackend(seed=7, capabilities=(TeacherForcing, LogitRows)))
    assert numbers(rows_only) == numbers(full)
    forced = score(FakeBackend(seed=7, capabilities=(TeacherForcing,)), lambdas=(1.0,))
    assert numbers(forced) == numbers(full)[:1]
    assert forced.results[0].search.tokens_decoded is None  # nothing counted where nothing counts


def test_lambda_needs_rows_and_is_refused_without_them():
    with pytest.raises(Exception, match="full next-token logit rows"):
        score(FakeBackend(capabilities=(TeacherForcing,)), lambdas=(0.5,))


def test_influence_is_where_the_response_copies_the_context():
    """The fake's induction term copies context text: the n-grams the response repeats move it most."""
    top = max(score(FakeBackend(seed=7), lambdas=(1.0,)).results[0].ngrams, key=lambda g: g.influence)
    assert top.text in EXAMPLE.response


def test_without_tiling_noise_the_floor_is_zero_and_with_it_positive():
    clean = score(FakeBackend(seed=7), lambdas=(1.0,), null_ablations=2).results[0]
    assert clean.noise_floor is not None and clean.noise_floor.max == 0.0
    noisy = score(FakeBackend(seed=7, tiling_noise=0.05), lambdas=(1.0,), null_ablations=2).results[0]
    assert noisy.noise_floor.max > 0.0
    assert numbers(score(FakeBackend(seed=7, tiling_noise=0.05))) == numbers(score(FakeBackend(seed=7)))


def test_adaptive_search_measures_windows_exactly_as_exhaustive_search_does():
    backend = FakeBackend(seed=7)
    exhaustive = score(backend, lambdas=(1.0,), ngram=2).results[0]
    adaptive = score(backend, lambdas=(1.0,), ngram=2, search="adaptive", top_spans=2).results[0]
    by_start = {g.start: g.per_token for g in exhaustive.ngrams}
    assert adaptive.ngrams and all(g.per_token == by_start[g.start] for g in adaptive.ngrams)
    record = adaptive.search
    assert record.adaptive and not record.measured_every_window and record.ablations < len(by_start)
    assert record.exhaustive_tokens is None  # the fake cannot run dry: no count to compare with
    assert record.tokens_decoded < exhaustive.search.tokens_decoded
    covered = sorted((b.start, b.end) for b in record.blocks)
    assert covered[0][0] == 0 and covered[-1][1] == exhaustive.ngrams[-1].start + 2


def test_a_generated_response_is_reproducible_and_scored_on_its_own_tokens():
    backend = FakeBackend(seed=7)
    example = Example(context=EXAMPLE.context, query=EXAMPLE.query, id="gen")
    s = InfluenceSettings(lambdas=(1.0, 0.5), ngram=4, epsilons=(2.0,), null_ablations=0)
    first, again = (InfluenceScorer(backend, "qa", s).score(example) for _ in range(2))
    assert numbers(first) == numbers(again)
    for r in first.results:
        assert r.generated and r.epsilon == 2.0 and r.response_ids
        assert max(r.generation.realised_epsilon) <= 2.0 + 1e-9  # each step within the bound
        assert np.isfinite(r.token_logprob).all()


class RecordsSplits(FakeBackend):
    """The fake, recording the split point of every variant it is asked to score."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.splits = []

    def score_variant(self, tokens, shared, *args, **kwargs):
        self.splits.append(shared)
        return super().score_variant(tokens, shared, *args, **kwargs)


def test_variants_come_in_decreasing_split_order():
    """So every shared prefix stays cached (the reuse path's premise)."""
    backend = RecordsSplits(seed=7)
    score(backend, lambdas=(1.0,))
    assert backend.splits and backend.splits == sorted(backend.splits, reverse=True)
