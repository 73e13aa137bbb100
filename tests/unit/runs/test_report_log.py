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
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.influence.scorer import Example, InfluenceSettings
from ctxlite.runs import report_log, run_audit, run_score
from ctxlite.runs.report import verify_log
from ctxlite.runtime.fake import FakeBackend
from tests.logtools import edit_log

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
    run_audit(FakeBackend(5), load_records(CLASSIFY, "classify"), AUDIT, out=out)
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


# ----- chain-valid records that no run wrote ---------------------------------------------------------
def _insert_before_end(record: dict):
    """An edit that adds ``record`` before the end line (the log re-chained after: the chain holds)."""
    return lambda lines: [*lines[:-1], record, lines[-1]]


FOREIGN_SCORE = [
    {"key": "zz", "type": "trial", "z": 1, "score": 0.5},
    {"key": "zz", "result": {}},
    {"key": "zz", "type": "note", "text": "hello"},
]


@pytest.mark.hand_made_logs
@pytest.mark.parametrize("record", FOREIGN_SCORE, ids=["trial", "no-type", "note"])
def test_a_score_log_refuses_a_record_no_score_run_writes(score_log, record):
    """Chain-valid (re-chained) records of a kind a score run never writes were ignored without a word:
    report showed the run and verify called the log intact."""
    edit_log(score_log, _insert_before_end(record))
    for args in (["report", score_log], ["verify", score_log]):
        r = cli(*args)
        assert r.exit_code == 4, (args, r.output)
        assert f"{score_log}:4: record 'zz' is not one a score run writes" in r.stderr, r.stderr
    with pytest.raises(DataError, match="not one a score run writes"):
        report_log(score_log)


FOREIGN_AUDIT = [
    ("eps=inf/trial=99", "trial"),  # past the run's trials
    ("eps=7/trial=0", "trial"),  # an ε the run did not audit
    ("eps=inf/ref=in/5", "reference"),  # past the run's reference runs
    ("eps=inf/trial=0x", "trial"),  # no key of the game's
    ("extra", "trial"),
]


@pytest.mark.hand_made_logs
@pytest.mark.parametrize("key, kind", FOREIGN_AUDIT, ids=[k for k, _ in FOREIGN_AUDIT])
def test_an_audit_log_refuses_a_record_no_audit_run_writes(audit_log, key, kind):
    """The recomputed report reads the trials 0..trials-1 and reference runs 0..reference_runs-1 of the
    audited ε: any other record was ignored, and a partial run counted it as a trial."""
    record = {"key": key, "type": kind, "epsilon": "inf", "z": 1, "signal": [0.5, 0.5], "score": 0.9}
    edit_log(audit_log, _insert_before_end(record))
    for args in (["report", audit_log], ["verify", audit_log]):
        r = cli(*args)
        assert r.exit_code == 4, (args, r.output)
        assert f"record {key!r} is not one an audit run writes" in r.stderr, r.stderr
    edit_log(audit_log, lambda lines: lines[:-1])  # the end line cut too: a partial run
    assert cli("report", audit_log).exit_code == 4


@pytest.mark.hand_made_logs
def test_an_audit_record_of_the_wrong_type_is_refused(audit_log):
    """A trial's key holding a record of another type (a reference run's)."""

    def retype(lines):
        lines[3]["type"] = "reference" if lines[3]["type"] == "trial" else "trial"
        return lines

    edit_log(audit_log, retype)
    r = cli("verify", audit_log)
    assert r.exit_code == 4 and f"{audit_log}:4: record" in r.stderr and "an audit run writes" in r.stderr, r.stderr


def test_the_logs_runs_write_are_accepted(score_log, single_log, audit_log):
    for log in (score_log, single_log, audit_log):
        assert cli("verify", log).exit_code == 0
        assert cli("report", log).exit_code == 0


# ----- an end line re-chained without its summary ----------------------------------------------------
@pytest.mark.hand_made_logs
@pytest.mark.parametrize("how", ["null", "absent"])
def test_an_end_line_without_the_data_sets_summary_is_refused(score_log, how):
    """A re-chained ``"summary": null`` end line was accepted for a data set (only a single example's
    run writes null): the end line's summary went unchecked and the report showed none."""

    def drop(lines):
        if how == "null":
            lines[-1]["end"]["summary"] = None
        else:
            del lines[-1]["end"]["summary"]
        return lines

    edit_log(score_log, drop)
    r = cli("report", score_log)
    assert r.exit_code == 4 and "Traceback" not in r.stderr, r.output
    assert f"{score_log}:4: the end line has no summary" in r.stderr and "2 example(s)" in r.stderr, r.stderr


@pytest.mark.hand_made_logs
def test_a_single_examples_end_line_must_say_null_or_hold_its_summary(single_log):
    """A single example's run writes ``"summary": null`` (accepted); without the key it is refused."""
    assert cli("report", single_log).exit_code == 0
    edit_log(single_log, lambda lines: [*lines[:-1], {"end": {"examples": ["a"]}}])
    r = cli("report", single_log)
    assert r.exit_code == 4 and "the end line has no summary" in r.stderr, r.output
