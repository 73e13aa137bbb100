"""ctxlite.runs.report (``report`` and ``verify`` without a model), against what an adversary can do
to a log (issue 46, 4): a malformed kept head, chain-valid records no run wrote, a re-chained end line
without its summary. Logs are written by the run layer on the FakeBackend."""

from __future__ import annotations

from importlib import resources

import pytest
from click.testing import CliRunner

from ctxlite.audit.dataset import load_records
from ctxlite.audit.settings import AuditSettings
from ctxlite.cli import main
from ctxlite.errors import InvalidParameter
from ctxlite.influence.scorer import Example, InfluenceSettings
from ctxlite.runs import run_audit, run_score
from ctxlite.runs.report import verify_log
from ctxlite.runtime.fake import FakeBackend

SETTINGS = InfluenceSettings(lambdas=(1.0,), ngram=4, null_ablations=0)
EXAMPLES = [
    Example(context="Bob Jones lives at 12 Elm Street, flat 3.", query="Where?", response="12 Elm Street.", id="a"),
    Example(context="The PIN of card 5521 is 0042, keep it.", query="PIN?", response="The PIN is 0042.", id="b"),
]
CLASSIFY = str(resources.files("ctxlite").joinpath("data", "classify_sample.jsonl"))
AUDIT = AuditSettings(task="classify", trials=6, queries_per_trial=2, reference_runs=1, utility_queries=0)


@pytest.fixture
def score_log(tmp_path):
    out = tmp_path / "scores.jsonl"
    run_score(FakeBackend(3), EXAMPLES, SETTINGS, out=out)
    return out


@pytest.fixture
def single_log(tmp_path):
    out = tmp_path / "single.jsonl"
    run_score(FakeBackend(3), EXAMPLES[0], SETTINGS, out=out)
    return out


@pytest.fixture
def audit_log(tmp_path):
    out = tmp_path / "audit.jsonl"
    run_audit(FakeBackend(5), load_records(CLASSIFY), AUDIT, out=out)
    return out


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# ----- verify --head: the argument is checked before the log is accused -----------------------------
@pytest.mark.parametrize(
    "head",
    ["", "sha256:", "SHA256:{hex}", "sha256:{HEX}", "{hex}", "sha256:{hex}0", "sha256:{short}", " sha256:{hex}"],
    ids=["empty", "prefix-only", "upper-prefix", "upper-hex", "no-prefix", "too-long", "too-short", "space"],
)
def test_a_malformed_kept_head_is_a_usage_error_about_the_argument(score_log, head):
    """The issue's reproducer: uppercase hex, no ``sha256:``, empty -- each said the log was not the one
    whose head was kept (exit 4, 'rewritten, truncated, or another log')."""
    real = verify_log(score_log).head.removeprefix("sha256:")
    head = head.format(hex=real, HEX=real.upper(), short=real[:12])
    r = cli("verify", score_log, "--head", head)
    assert r.exit_code == 2, r.output
    assert r.stderr.count("error") == 1 and "--head" in r.stderr and "64 lowercase hex digits" in r.stderr, r.stderr
    assert "rewritten" not in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(InvalidParameter, match="not a chain head"):
        verify_log(score_log, head)


def test_a_well_formed_kept_head_is_checked_against_the_log(score_log):
    head = verify_log(score_log).head
    assert cli("verify", score_log, "--head", head).exit_code == 0
    other = "sha256:" + "0" * 64
    r = cli("verify", score_log, "--head", other)
    assert r.exit_code == 4 and "not the kept" in r.stderr, r.stderr
