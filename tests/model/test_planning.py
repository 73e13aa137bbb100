"""``--plan``: a run's decode counts without running it (:mod:`ctxlite.runtime.planning`).

The dry run must issue exactly the decodes the real run issues (calls and tokens, after KV
reuse) when nothing is sampled, an upper bound when responses are generated, and leave the
engine as it was: llama.cpp's own dry run, one score case (λ = 0.5 and 1: rows and reuse) and one
small audit; tests/unit/runtime/test_plan_on_fake.py checks the planning logic, generated responses'
upper bound included, on the FakeBackend."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from ctxlite.audit.dataset import load_records
from ctxlite.audit.game import run_audit
from ctxlite.audit.settings import AuditSettings
from ctxlite.cli import main
from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings
from ctxlite.runtime.planning import plan_run
from ctxlite.runtime.sampling import SamplingSettings

pytestmark = pytest.mark.model

NOTE = (
    "Clinic note. Patient: Dana Whitcombe, DOB 04/09/1971, MRN 5521-8830, 42 Alder Row, Ketterby. "
    "Prescribed lisinopril 10 mg daily for hypertension; follow up in four weeks."
)


def _real(engine, job):
    engine.clear()
    calls, tokens = engine.decode_calls, engine.tokens_decoded
    job()
    return engine.decode_calls - calls, engine.tokens_decoded - tokens


def test_score_plan_counts_exactly_what_the_run_decodes(engine):
    scorer = InfluenceScorer(engine, "qa", InfluenceSettings(lambdas=(0.5, 1.0), ngram=4))
    example = Example(NOTE, "What was prescribed?", "Lisinopril 10 mg daily.")
    plan = plan_run([engine], lambda: scorer.score(example), sampled=False)
    assert plan.exact and plan.estimated_seconds > 0
    assert (plan.decode_calls, plan.tokens_decoded) == _real(engine, lambda: scorer.score(example))
    assert engine.dry_run is False and np.abs(engine.next_logits(engine.tokenize("Hi", add_bos=True))).max() > 0


def test_audit_plan_counts_exactly_what_the_run_decodes(engine):
    s = AuditSettings(
        task="classify",
        mechanism="rnm",
        epsilons=(1.0,),
        trials=4,
        shots=2,
        ensembles=3,
        utility_queries=1,
        reference_runs=1,
    )
    records = load_records("ctxlite/data/classify_sample.jsonl", "classify")
    job = lambda: run_audit(engine, records, s)  # noqa: E731
    plan = plan_run([engine], job, sampled=False)
    assert (plan.decode_calls, plan.tokens_decoded) == _real(engine, job)


def test_cli_plan_runs_nothing_and_writes_no_log(tmp_path):
    note = tmp_path / "note.txt"
    note.write_text(NOTE, encoding="utf-8")
    out = tmp_path / "run.jsonl"
    args = ["score", "--context", str(note), "-q", "What?", "-r", "Lisinopril.", "--out", str(out), "--plan"]
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)["plan"]
    assert plan["exact"] is True and plan["decode_calls"] > 0 and plan["tokens_decoded"] > plan["decode_calls"]
    assert not out.exists()


def test_an_epsilon_sweep_is_planned_with_a_response_per_lambda_and_epsilon(engine):
    """--plan counts the ε sweep: a second ε adds a generated and scored response at every λ."""

    def plan(epsilons):
        sampling = SamplingSettings(max_new_tokens=6, min_new_tokens=2)
        settings = InfluenceSettings(lambdas=(1.0, 1.5), ngram=8, epsilons=epsilons, sampling=sampling)
        scorer = InfluenceScorer(engine, "qa", settings)
        return plan_run([engine], lambda: scorer.score(Example(NOTE, "What was prescribed?")), sampled=True)

    one, two = plan((1.0,)), plan((1.0, 4.0))
    assert two.decode_calls > one.decode_calls and two.tokens_decoded > one.tokens_decoded
