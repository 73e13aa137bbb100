"""The audit game and its mechanisms on the FakeBackend: that the game is reproducible, and that every
mechanism and backend shape plays -- without a model (tests/model/test_audit_game.py checks what each prompt holds)."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pytest

import ctxlite.audit.game as game_mod
from ctxlite.audit.dataset import load_records
from ctxlite.audit.game import run_audit
from ctxlite.audit.oracle import ModelOracle
from ctxlite.audit.settings import AuditSettings
from ctxlite.errors import InvalidParameter
from ctxlite.runtime.backend import Embeddings, SampledCompletions, TeacherForcing
from ctxlite.runtime.fake import FakeBackend

DATA = resources.files("ctxlite").joinpath("data")


def classify_records():
    return load_records(str(DATA.joinpath("classify_sample.jsonl")), "classify")


class RecordingOracle(ModelOracle):
    """The real oracle, keeping every prompt whose label distribution it is asked."""

    made: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prompts: list[str] = []
        RecordingOracle.made.append(self)

    def label_distribution(self, prompt):
        self.prompts.append(prompt)
        return super().label_distribution(prompt)


def play(monkeypatch, s: AuditSettings, backend=None):
    """The game on the fake through the recording oracle: (report, the prompts it asked, the trial log)."""
    monkeypatch.setattr(game_mod, "ModelOracle", RecordingOracle)
    RecordingOracle.made.clear()
    report = run_audit(backend or FakeBackend(s.seed), classify_records(), s)
    return report, RecordingOracle.made[-1].prompts


def test_the_game_is_reproducible():
    s = AuditSettings(task="classify", trials=16, queries_per_trial=4, reference_runs=2, utility_queries=2, seed=3)
    first = run_audit(FakeBackend(1), classify_records(), s).to_dict()
    again = run_audit(FakeBackend(1), classify_records(), s).to_dict()
    assert first == again
    other = run_audit(FakeBackend(2), classify_records(), s).to_dict()
    assert other["rows"] != first["rows"]


@pytest.mark.parametrize(
    "mechanism, extra",
    [
        ("none", {}),
        ("prompt-l1", {}),
        ("prompt-l2", {}),
        ("judge", {"judge_model": None}),
        ("rnm", {"epsilons": (1.0, float("inf")), "temperature": 0}),
    ],
)
def test_every_classification_mechanism_plays(mechanism, extra):
    s = AuditSettings(task="classify", mechanism=mechanism, trials=10, reference_runs=2, utility_queries=2, **extra)
    report = run_audit(FakeBackend(5), classify_records(), s)
    assert len(report.rows) == len(s.epsilons)
    for row in report.rows:
        assert 0.0 <= row.epsilon_lower_bound and np.isfinite(row.epsilon_lower_bound)


def test_a_generation_audit_plays_with_an_embedding_model():
    records = load_records(str(DATA.joinpath("dialogue_sample.jsonl")), "generate")
    s = AuditSettings(
        task="generate",
        mechanism="esa",
        epsilons=(1.0,),
        trials=6,
        reference_runs=2,
        utility_queries=0,
        max_new_tokens=6,
    )
    report = run_audit(FakeBackend(5), records, s, embedder=FakeBackend(6, capabilities=(Embeddings,)))
    assert [r.epsilon for r in report.rows] == [1.0]


def test_answers_are_sampled_where_the_backend_has_no_teacher_forcing():
    """A server without log-probabilities: the answers are completions it samples; the report says so."""
    s = AuditSettings(task="classify", trials=8, queries_per_trial=2, reference_runs=2, utility_queries=0)
    report = run_audit(FakeBackend(5, capabilities=(SampledCompletions,)), classify_records(), s)
    assert any("sampled by the server" in note for note in report.notes)
    assert report.rows[0].epsilon_upper_bound is None  # no distribution: no exact ε of the pair


def test_a_text_audit_is_refused_without_rows_or_completions():
    s = AuditSettings(task="generate", trials=4, reference_runs=2, utility_queries=0)
    records = load_records(str(DATA.joinpath("dialogue_sample.jsonl")), "generate")
    with pytest.raises(InvalidParameter, match="full next-token logit rows"):
        run_audit(
            FakeBackend(capabilities=(TeacherForcing,)), records, s, embedder=FakeBackend(capabilities=(Embeddings,))
        )


def test_a_classification_audit_without_rows_reads_the_same_distribution_by_teacher_forcing():
    """Without logit rows the label distribution is read by teacher forcing: the same report as the
    row path."""
    s = AuditSettings(trials=8, utility_queries=0, reference_runs=2)
    forced = run_audit(FakeBackend(5, capabilities=(TeacherForcing,)), classify_records(), s).to_dict()
    rows = run_audit(FakeBackend(5), classify_records(), s).to_dict()
    assert forced["rows"][0]["audit_accuracy"] == rows["rows"][0]["audit_accuracy"]
    assert isinstance(rows["rows"][0]["epsilon_exact"], float)
    assert forced["rows"][0]["epsilon_exact"] == pytest.approx(rows["rows"][0]["epsilon_exact"], abs=1e-3)
