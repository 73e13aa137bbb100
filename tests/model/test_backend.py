"""The backend seam on the real default model: a backend that declares fewer capabilities gets
the same numbers where it can, and a clear refusal where it cannot."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ctxlite.errors import InvalidParameter
from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings
from ctxlite.runtime.backend import (
    Backend,
    ChatModel,
    CountsDecodes,
    DryRun,
    Embeddings,
    LogitRows,
    PrefixReuse,
    SampledCompletions,
    Streams,
    TeacherForcing,
    Vocabulary,
)
from ctxlite.runtime.sampling import SamplingSettings
from tests.backends import Restricted

pytestmark = pytest.mark.model


class EndsInReverse(Restricted):
    """Teacher forcing only, with a ``logprobs_many`` whose batch ends last to first: the way the
    concurrent requests of a server may end."""

    def logprobs_many(self, requests, temperature=1.0, on_done=None):
        self.calls.append("logprobs_many")
        out = [None] * len(requests)
        for k, i in enumerate(reversed(range(len(requests))), 1):
            out[i] = self._engine.logprobs(*requests[i], temperature)
            if on_done is not None:
                on_done(k)
        return out


NOTE = (
    "Patient Marisol Quintero-Hale, born 3 May 1970, was seen by Dr. Okafor on 12 March. She was prescribed "
    "20 mg of lisinopril daily for hypertension and asked to return in six weeks."
)


def _example(with_response=None):
    """A short real example: every path below decodes each ablation, some of them whole."""
    return Example(NOTE, "What was prescribed?", "20 mg of lisinopril daily.")


def test_the_engine_is_a_backend_with_every_capability_but_embeddings(engine):
    for capability in (Backend, TeacherForcing, Vocabulary, LogitRows, PrefixReuse, Streams):
        assert isinstance(engine, capability), capability
    assert isinstance(engine, CountsDecodes) and isinstance(engine, DryRun) and isinstance(engine, ChatModel)
    assert not isinstance(engine, Embeddings)  # not built with embeddings=True (that makes an EmbeddingEngine)
    assert not isinstance(engine, SampledCompletions)  # it samples with its own streams
    plain = Restricted(engine)
    assert isinstance(plain, TeacherForcing) and not isinstance(plain, LogitRows)
    assert isinstance(Restricted(engine, (LogitRows,)), LogitRows)


def test_ablations_sent_together_are_taken_in_their_order(engine):
    """Without logit rows an example's ablations go to ``logprobs_many`` together (concurrently on a
    server): each n-gram gets its own ablation's numbers -- those of the row path's exact mode --,
    a batch that ends last to first gives the same result as one that ends in order, and the
    progress counts each ablation as it ends."""
    ex, settings = _example(), InfluenceSettings(ngram=8, sampling=SamplingSettings(temperature=1.0))
    exact = InfluenceScorer(engine, "qa", replace(settings, exact=True)).score(ex).to_dict()["results"][0]
    runs = {}
    for backend in (Restricted(engine), EndsInReverse(engine)):
        ticks = []
        result = InfluenceScorer(backend, "qa", settings, progress=lambda *t: ticks.append(t)).score(ex)
        runs[type(backend).__name__] = result.to_dict()["results"][0], ticks, backend.calls
    (in_order, in_order_ticks, _), (reversed_, ticks, calls) = runs["Restricted"], runs["EndsInReverse"]
    assert calls.count("logprobs_many") == 2  # the with/without-context pair, then the ablations
    rows = [np.asarray(g["per_token"]) for g in exact["ngrams"]]
    assert len(rows) > 3 and min(np.max(np.abs(a - b)) for i, a in enumerate(rows) for b in rows[i + 1 :]) > 0.01
    for got in (in_order, reversed_):
        assert [g["start"] for g in got["ngrams"]] == [g["start"] for g in exact["ngrams"]]
        np.testing.assert_allclose([g["per_token"] for g in got["ngrams"]], rows, atol=1e-4)
    assert reversed_ == in_order
    n = len(rows)
    assert ticks == in_order_ticks == [("ablations", k, n) for k in range(n + 1)]


def test_what_needs_a_missing_capability_is_refused_by_name(engine, with_response):
    backend = Restricted(engine)
    with pytest.raises(InvalidParameter, match="lambda != 1.*full next-token logit rows.*restricted test"):
        InfluenceScorer(backend, "qa", InfluenceSettings(lambdas=(0.5,)))
    ex = Example(NOTE, "What was prescribed?")  # no response: generate one
    with pytest.raises(InvalidParameter, match="generating a response needs"):
        InfluenceScorer(backend, "qa", InfluenceSettings(ngram=None)).score(ex)
