"""Planning (``ctxlite.runtime.planning``) on a FakeBackend that runs dry: a plan's counts are exactly
what the run decodes when nothing is sampled, an upper bound when something is, and the backend is
left as it was -- the logic of tests/model/test_planning.py without a model (which checks llama.cpp's own
dry run)."""

from __future__ import annotations

from importlib import resources

import numpy as np

from ctxlite.audit.dataset import load_records
from ctxlite.audit.game import run_audit
from ctxlite.audit.settings import AuditSettings
from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings
from ctxlite.runs.score import DESCENT_PLAN, plan_score
from ctxlite.runtime.backend import DryRun
from ctxlite.runtime.fake import DEFAULT_CAPABILITIES, FakeBackend
from ctxlite.runtime.planning import plan_run
from ctxlite.runtime.sampling import SamplingSettings

NOTE = "Clinic note. Patient: Dana Whitcombe, DOB 04/09/1971. Prescribed lisinopril 10 mg daily."


def dry_fake(seed: int = 0) -> FakeBackend:
    return FakeBackend(seed, capabilities=(*DEFAULT_CAPABILITIES, DryRun))


def real(backend, job):
    backend.clear()
    calls, tokens = backend.decode_calls, backend.tokens_decoded
    job()
    return backend.decode_calls - calls, backend.tokens_decoded - tokens


def test_a_score_plan_counts_exactly_what_the_run_decodes():
    backend = dry_fake()
    scorer = InfluenceScorer(backend, "qa", InfluenceSettings(lambdas=(0.5, 1.0), ngram=4))
    example = Example(NOTE, "What was prescribed?", "Lisinopril 10 mg daily.")
    plan = plan_run([backend], lambda: scorer.score(example), sampled=False)
    assert plan.exact and plan.decode_calls > 0
    assert (plan.decode_calls, plan.tokens_decoded) == real(backend, lambda: scorer.score(example))
    assert backend.dry_run is False and np.abs(backend.next_logits(backend.tokenize("Hi", add_bos=True))).max() > 0


def test_an_audit_plan_counts_exactly_what_the_run_decodes():
    backend = dry_fake(1)
    s = AuditSettings(task="classify", mechanism="rnm", epsilons=(1.0,), trials=8, shots=2, ensembles=3)
    records = load_records(str(resources.files("ctxlite").joinpath("data", "classify_sample.jsonl")), "classify")
    job = lambda: run_audit(backend, records, s)  # noqa: E731
    plan = plan_run([backend], job, sampled=False)
    assert (plan.decode_calls, plan.tokens_decoded) == real(backend, job)


def test_generated_responses_are_planned_at_their_maximum_length():
    backend = dry_fake()
    settings = InfluenceSettings(ngram=8, sampling=SamplingSettings(max_new_tokens=12, min_new_tokens=2))
    scorer = InfluenceScorer(backend, "qa", settings)
    example = Example(NOTE, "What was prescribed?")
    plan = plan_run([backend], lambda: scorer.score(example), sampled=True)
    calls, tokens = real(backend, lambda: scorer.score(example))
    assert not plan.exact and plan.tokens_decoded >= tokens and plan.decode_calls >= calls


def test_adaptive_search_records_what_exhaustive_search_would_have_decoded():
    """With a dry run, the search's record carries exhaustive search's token count (None without one)."""
    context = " ".join(f"word{i}" for i in range(60))
    example = Example(context, "Which word?", "word17 word18", id="w")
    settings = InfluenceSettings(lambdas=(1.0,), ngram=2, search="adaptive", top_spans=2, null_ablations=0)
    record = InfluenceScorer(dry_fake(), "qa", settings).score(example).results[0].search
    exhaustive = InfluenceScorer(dry_fake(), "qa", InfluenceSettings(**{**settings.__dict__, "search": "exhaustive"}))
    assert record.exhaustive_tokens == exhaustive.score(example).results[0].search.tokens_decoded
    assert record.tokens_decoded < record.exhaustive_tokens


def test_a_hierarchical_search_is_planned_as_an_estimate_and_records_exhaustive_searchs_cost():
    """Which passage it descends into depends on the logits, which a plan does not compute: the plan
    says so. Its descent carries what exhaustive n-gram search would have decoded (a dry run)."""
    passages = ["Dana Whitcombe takes lisinopril daily. She lives in Ohio.", "The clinic opens at nine."]
    example = Example("\n\n".join(passages), "What?", "lisinopril", passages=tuple(passages), id="h")
    settings = InfluenceSettings(lambdas=(1.0,), unit="passage", search="adaptive", ngram=4, null_ablations=0)
    plan = plan_score(dry_fake(), [example], settings)
    assert plan.estimate == DESCENT_PLAN and not plan.exact
    (r,) = InfluenceScorer(dry_fake(), "qa", settings).score(example).results
    exhaustive = InfluenceSettings(lambdas=(1.0,), ngram=4, search="exhaustive", null_ablations=0)
    assert (
        r.descent.exhaustive_tokens
        == InfluenceScorer(dry_fake(), "qa", exhaustive).score(example).results[0].search.tokens_decoded
    )
