"""The trial log of the game (``ctxlite.audit.game.run_audit`` with a ``RecordLog``) on the FakeBackend:
a torn log resumes to the same rows and the same lines, a finished one runs no trial, a changed game
is refused, and report-only settings may change on resume -- the logic of tests/test_audit.py's
``test_trial_log_resumes``, without a model."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from importlib import resources

import pytest

from ctxlite.audit.dataset import load_records
from ctxlite.audit.game import run_audit
from ctxlite.audit.settings import AuditSettings, EstimateSettings, audit_identity
from ctxlite.errors import DataError
from ctxlite.records import RecordLog
from ctxlite.runtime.fake import FakeBackend

CLASSIFY = str(resources.files("ctxlite").joinpath("data", "classify_sample.jsonl"))
GAME = AuditSettings(
    task="classify",
    mechanism="rnm",
    epsilons=(2.0, math.inf),
    canary="hex",
    trials=12,
    shots=2,
    ensembles=3,
    reference_runs=2,
    utility_queries=0,
    seed=4,
)


def records():
    return load_records(CLASSIFY, "classify")


def open_log(path, backend, s):
    return RecordLog(path, audit_identity(backend.identity(), s, records()), kind="audit")


def test_a_torn_trial_log_resumes_to_the_same_rows_and_lines(tmp_path):
    backend, path = FakeBackend(9), tmp_path / "audit.jsonl"
    with open_log(path, backend, GAME) as log:
        full = run_audit(backend, records(), GAME, log)
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + 2 * (12 + 2 * 2)
    keys = [json.loads(line)["key"] for line in lines[1:]]
    assert "eps=2/trial=0" in keys and "eps=inf/ref=in/1" in keys
    path.write_text("\n".join(lines[:9]) + "\n" + lines[9][:20])  # Ctrl-C: a few records and a torn line
    with open_log(path, FakeBackend(9), GAME) as log:
        assert len(log) == 8
        resumed = run_audit(FakeBackend(9), records(), GAME, log)
    assert resumed.rows == full.rows
    assert path.read_text().splitlines() == lines  # the replayed trials are the ones that were lost
    with open_log(path, backend, GAME) as log:  # finished: a re-run reuses every record
        again = run_audit(backend, records(), GAME, log)
    assert again.rows == full.rows and path.read_text().splitlines() == lines
    with pytest.raises(DataError, match="settings.trials"):
        open_log(path, backend, replace(GAME, trials=13))
    estimates = replace(GAME, estimates=EstimateSettings(accounting_queries=100, sampling_rate=0.1))
    with open_log(path, backend, estimates) as log:  # report-only settings: the same trials, no new line
        sub = run_audit(backend, records(), estimates, log)
    assert path.read_text().splitlines() == lines
    same = lambda row: replace(row, epsilon_subsampled=None, accounting=None)  # noqa: E731
    assert [same(r) for r in sub.rows] == [same(r) for r in full.rows]
    assert sub.rows[0].epsilon_subsampled is not None and sub.rows[1].epsilon_subsampled == math.inf
