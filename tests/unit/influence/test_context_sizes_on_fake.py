"""The context-size analysis (``InfluenceSettings.context_sizes``) on the FakeBackend: an example's
sizes share its response's without-context pass, decoded once, and every size's result is the one
of a run at that size alone."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings
from ctxlite.runtime.fake import FakeBackend

CONTEXT = "Dana Whitcombe takes lisinopril every morning and sees Dr. Okafor on Fridays at the clinic."


class CountsWithoutPasses(FakeBackend):
    """Counts the from-scratch row decodes (``logits_rows``: the without-context passes)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.row_decodes = 0

    def logits_rows(self, tokens, targets_from):
        self.row_decodes += 1
        return super().logits_rows(tokens, targets_from)


@settings(max_examples=15)
@given(
    sizes=st.lists(st.integers(2, 14), min_size=1, max_size=4, unique=True),
    lams=st.sampled_from([(1.0,), (0.5, 1.0, 1.5)]),
)
def test_sizes_share_one_without_pass_and_equal_their_runs_alone(sizes, lams):
    example = Example(CONTEXT, "Who?", "Dana takes lisinopril.", id="e")
    eng = CountsWithoutPasses(seed=3)
    together = InfluenceScorer(eng, "qa", InfluenceSettings(lambdas=lams, ngram=2, context_sizes=tuple(sizes)))
    res = together.score(example)
    assert eng.row_decodes == 1  # one l_∅ pass for all the sizes
    for size in sizes:
        alone = InfluenceScorer(
            CountsWithoutPasses(seed=3), "qa", InfluenceSettings(lambdas=lams, ngram=2, context_sizes=(size,))
        ).score(example)
        mine = [r.to_dict() for r in res.results if r.context_size == size]
        assert mine == [r.to_dict() for r in alone.results]


def test_the_shared_rows_are_not_kept_past_the_example():
    """Another example (another response) decodes its own without-context pass."""
    eng = CountsWithoutPasses(seed=3)
    scorer = InfluenceScorer(eng, "qa", InfluenceSettings(ngram=2, context_sizes=(4, 8)))
    scorer.score(Example(CONTEXT, "Who?", "Dana.", id="a"))
    scorer.score(Example(CONTEXT, "Who?", "Dana.", id="b"))
    assert eng.row_decodes == 2
