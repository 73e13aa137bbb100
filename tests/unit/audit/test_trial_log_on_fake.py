"""The trial log of the game (``ctxlite.audit.game.run_audit`` with a ``RecordLog``) on the FakeBackend:
a torn log resumes to the same rows and the same lines, a finished one runs no trial, a changed game
is refused, and report-only settings (the subsampled-over-T accounting) may change on resume."""

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
from ctxlite.privacy.calibration import analytic_gaussian_epsilon, subsampled_gaussian_epsilon
from ctxlite.records import RecordLog
from ctxlite.reporting.terminal import audit_table
from ctxlite.runtime.fake import FakeBackend

SQRT2 = math.sqrt(2)
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
    # report-only settings may change on resume: the subsampled-over-T epsilon from the same trials
    for T, q in ((100, 0.1), (1, 1.0)):
        acc = replace(GAME, estimates=EstimateSettings(accounting_queries=T, sampling_rate=q))
        with open_log(path, backend, acc) as log:
            sub = run_audit(backend, records(), acc, log)
        assert path.read_text().splitlines() == lines  # the same trials, no new line
        r2, rinf = sub.rows
        same = lambda row: replace(row, epsilon_subsampled=None, accounting=None)  # noqa: E731
        assert same(r2) == same(full.rows[0])
        assert rinf.epsilon_subsampled == math.inf
        # add/remove sensitivity with m fixed ensembles: one vote moves, sqrt(2) (as under replacement)
        assert r2.accounting.to_dict() == {
            "queries": T,
            "sampling_rate": q,
            "sensitivity_add_remove": pytest.approx(SQRT2),
            "accountant": "dp_accounting PLD",
        }
        if T == 1:  # one unsubsampled release: the analytic epsilon of the same sigma, i.e. the audited epsilon 2
            assert r2.epsilon_subsampled == pytest.approx(
                analytic_gaussian_epsilon(r2.sigma, GAME.delta, SQRT2), abs=2e-3
            )
            assert r2.epsilon_subsampled == pytest.approx(2.0, abs=2e-3)
        else:
            assert r2.epsilon_subsampled == subsampled_gaussian_epsilon(r2.sigma, SQRT2, q, T, GAME.delta)
            assert "eps_T" in audit_table(sub) and any("T = 100" in n for n in sub.notes)
