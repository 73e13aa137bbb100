"""Reading an audit's label distributions ahead (a server's path, here on a FakeBackend of teacher
forcing only): the prompts a mechanism predicts are exactly those its release reads (against the
release itself, on a recording oracle), and an audit that reads ahead reports what one reading a
prompt at a time reports, forward passes included, in fewer, larger batches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxlite.audit.oracle as oracle_mod
from ctxlite.audit.dataset import resolve_format
from ctxlite.audit.game import make_mechanism, run_audit
from ctxlite.audit.oracle import ModelOracle
from ctxlite.audit.settings import AuditSettings
from ctxlite.runtime.backend import TeacherForcing
from ctxlite.runtime.fake import FakeBackend
from tests.unit.audit.test_game_on_fake import RecordingOracle, classify_records

RECORDS = classify_records()
FMT = resolve_format("classify", RECORDS)


@settings(max_examples=40, deadline=None)
@given(
    mechanism=st.sampled_from(["none", "prompt-l2", "rnm"]),
    seed=st.integers(0, 2**32 - 1),
    n_queries=st.integers(1, 3),
    ensembles=st.integers(1, 4),
    shots=st.integers(1, 3),
    epsilon=st.sampled_from([1.0, float("inf")]),
)
def test_the_predicted_prompts_are_the_ones_the_release_reads(mechanism, seed, n_queries, ensembles, shots, epsilon):
    dp = {"epsilons": (epsilon,)} if mechanism == "rnm" else {}
    ensembles = ensembles if mechanism == "rnm" else 1
    s = AuditSettings(task="classify", mechanism=mechanism, ensembles=ensembles, shots=shots, **dp)
    mech = make_mechanism(s, epsilon)
    records = RECORDS[: ensembles * shots]
    labels = [FMT.answer_prefix + label for label in FMT.labels]
    oracle = RecordingOracle(FakeBackend(seed % 7, capabilities=(TeacherForcing,)), labels)
    query = "Is it subjective?"
    predicted = mech.answer_prompts(FMT, records, query, n_queries, np.random.default_rng(seed))
    mech.release(oracle, FMT, records, query, n_queries, np.random.default_rng(seed))
    assert predicted == oracle.prompts


class CountingFake:
    """Every ``logprobs_many`` call's size on a FakeBackend of teacher forcing only."""

    def __init__(self):
        self.backend = FakeBackend(3, capabilities=(TeacherForcing,))
        self.sizes: list[int] = []
        many = self.backend.logprobs_many

        def counted(requests, *args, **kwargs):
            self.sizes.append(len(requests))
            return many(requests, *args, **kwargs)

        self.backend.logprobs_many = counted


@pytest.mark.parametrize("mechanism", ["none", "rnm"])
def test_reading_ahead_reports_what_reading_one_prompt_at_a_time_reports(monkeypatch, mechanism):
    rnm = mechanism == "rnm"
    s = AuditSettings(
        task="classify", mechanism=mechanism, ensembles=4 if rnm else 1, shots=1 if rnm else 4, trials=10,
        queries_per_trial=2, reference_runs=2, utility_queries=4, resample_data=not rnm,
        **({"epsilons": (1.0,)} if rnm else {}),
    )  # fmt: skip
    ahead = CountingFake()
    read_ahead = run_audit(ahead.backend, RECORDS, s).to_dict()
    one_by_one = CountingFake()
    monkeypatch.setattr(oracle_mod.ModelOracle, "reads_ahead", property(lambda self: False))
    assert not ModelOracle(one_by_one.backend, ["a"]).reads_ahead
    alone = run_audit(one_by_one.backend, RECORDS, s).to_dict()
    assert read_ahead == alone  # the forward passes counted too
    labels = len(FMT.labels)
    assert set(one_by_one.sizes) == {labels}  # one prompt's labels a call
    assert max(ahead.sizes) > labels and sum(ahead.sizes) <= sum(one_by_one.sizes) + 4 * labels
