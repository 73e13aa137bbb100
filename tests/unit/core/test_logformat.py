"""The log format is code: typed results round-trip their log form (hypothesis), the log form follows the
shipped JSON Schema, and a log of an older format is read by the one policy of ``ctxlite.logformat``
(reported and verified, upgraded as it is read, never resumed); a newer one is refused. No model."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.audit.canaries import Canary, CanaryKind
from ctxlite.audit.queries import AuditQuery
from ctxlite.audit.report import GRID_WAS_EXACT, Accounting, AuditReport, AuditRow, BoundChoice, BoundCounts
from ctxlite.audit.settings import AuditSettings, EstimateSettings
from ctxlite.cli import main
from ctxlite.errors import DataError
from ctxlite.influence import analysis
from ctxlite.influence.noise import NoiseFloor
from ctxlite.influence.regurgitation import Regurgitation
from ctxlite.influence.results import (
    Block,
    ExampleResult,
    Generation,
    LambdaResult,
    NgramInfluence,
    SearchRecord,
    Utility,
)
from ctxlite.logformat import NOT_RESUMABLE, SCHEMA_VERSION, schema, upgrade_example, upgrade_report
from ctxlite.records import RecordLog, read_run_log
from tests.logschema import problems, sweep
from tests.logtools import edit_log
from tests.paths import REPO

LEGACY = REPO / "tests" / "reference" / "legacy"
GOLDEN = REPO / "tests" / "golden"
FAST = settings(max_examples=40, deadline=None)

real = st.floats(-1e6, 1e6, allow_nan=False)
pos = st.floats(0, 1e6, allow_nan=False)
small = st.integers(0, 10_000)
text = st.text(max_size=12)
floats = st.lists(real, max_size=4)


def _defs(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{kind}", "$defs": schema()["$defs"]})


ngrams = st.builds(
    NgramInfluence, small, small, small, small, text, pos, floats, st.none() | st.booleans(), st.none() | pos
)
floors = st.builds(
    NoiseFloor, st.lists(small, max_size=3), st.lists(pos, max_size=3), st.lists(pos, max_size=3),
    st.lists(st.sampled_from(["null", "ablation"]), max_size=3), st.just("retiled probes"),
)  # fmt: skip
blocks = st.builds(Block, small, small, small, small, text, pos)
searches = st.builds(SearchRecord, st.just("exhaustive"), small, small, st.none() | small, small, st.none() | small) | (
    st.builds(
        SearchRecord, st.just("adaptive"), small, small, st.none() | small, small, st.none() | small, small, pos,
        st.integers(2, 8), small, small, st.booleans(), st.booleans(), st.none() | small, st.lists(blocks, max_size=2),
    )
)  # fmt: skip
lambda_results = st.builds(
    LambdaResult,
    lam=pos,
    response=text,
    response_ids=st.lists(small, max_size=4),
    generated=st.booleans(),
    token_logprob=floats,
    token_logprob_without=floats,
    token_pmi=floats,
    token_influence=floats,
    response_token_chars=st.lists(st.tuples(small, small), max_size=3),
    document_influence=pos,
    ngrams=st.lists(ngrams, max_size=3),
    noise_floor=st.none() | floors,
    regurgitation=st.none() | st.builds(Regurgitation, small, pos, pos),
    generation=st.none() | st.builds(Generation, text, st.none() | pos, st.none() | floats, st.none() | floats, small),
    utility=st.none() | st.builds(Utility, pos, pos, pos),
    context_tokens=small,
    context_size=st.none() | small,
    search=st.none() | searches,
    epsilon=st.none() | pos,
    top=st.lists(ngrams, max_size=2),
)
examples = st.builds(ExampleResult, text, small, text, st.lists(lambda_results, max_size=3))


@FAST
@given(examples)
def test_an_example_result_round_trips_its_log_form_which_follows_the_schema(result):
    logged = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert ExampleResult.from_dict(logged) == result
    assert not list(_defs("example_result").iter_errors(logged))


def _row_strategy():
    maybe_real = st.none() | real | st.just(math.inf)
    return st.builds(
        AuditRow,
        epsilon=maybe_real, epsilon_per_trial=maybe_real, sigma=st.none() | pos, sensitivity=st.none() | pos,
        n_in=small, n_out=small, audit_accuracy=pos, threshold=st.none() | real, tpr=pos, fpr=pos,
        epsilon_point=maybe_real, epsilon_lower_bound=pos, lower_bound_method=text,
        lower_bound_counts=st.builds(BoundCounts, small, small, small, small, st.none() | real), confidence=pos,
        mu_lower_bound=pos, epsilon_gdp_bound=maybe_real, epsilon_from_mu_lb=maybe_real,
        epsilon_from_mu_lb_kind=text, gaussian_mu=st.none() | pos, auroc=pos, tpr_interpolated=pos,
        accuracy_upper_bound=pos, epsilon_gdp=maybe_real, epsilon_gdp_kind=text, epsilon_upper_bound=maybe_real,
        epsilon_exact=maybe_real, privacy_profile_kind=st.sampled_from([None, "exact", "upper bound"]),
        privacy_profile_method=st.none() | text,
        privacy_profile=st.none() | st.lists(st.lists(pos, min_size=2, max_size=2), max_size=3),
        audit_tightness=st.none() | pos, audit_tightness_at_least=st.none() | pos,
        reasons=st.dictionaries(st.sampled_from(["epsilon_point", "epsilon_gdp"]), text),
        epsilon_subsampled=maybe_real,
        accounting=st.none() | st.builds(Accounting, small, pos, pos),
        utility=st.none() | pos,
        withheld_rate=st.none() | st.fixed_dictionaries({"in": st.none() | pos, "out": st.none() | pos}),
        utility_chance=st.none() | st.tuples(pos, small).map(list), contradictions=st.lists(text, max_size=2),
    )  # fmt: skip


@FAST
@given(st.lists(_row_strategy(), min_size=1, max_size=3), st.booleans(), st.sampled_from([0.9, 0.95]))
def test_an_audit_report_round_trips_its_log_form_which_follows_the_schema(rows, dp, confidence):
    s = AuditSettings(
        mechanism="rnm" if dp else "none", estimates=EstimateSettings(confidence=confidence, bound="split")
    )
    report = AuditReport(
        s, Canary(CanaryKind.HEX, "ab", "objective", "hex-1"), AuditQuery("input-output", 0, "T: {x}", "T: ab"),
        rows, "per-query", "accuracy", 20, 3, ["a note"], None, "prompt", BoundChoice("split", 0.95), None,
    )  # fmt: skip
    logged = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert AuditReport.from_dict(logged) == report
    assert not list(_defs("audit_report").iter_errors(logged))
    assert AuditSettings.from_params(s.params()) == s and set(s.game_params()) < set(s.params())


@FAST
@given(st.lists(examples, min_size=1, max_size=3))
def test_a_summary_round_trips_its_log_form_which_follows_the_schema(results):
    summary = analysis.summarize(results)
    logged = json.loads(json.dumps(summary.to_dict(), allow_nan=False))
    assert analysis.Summary.from_dict(logged) == summary
    for entry in logged.values():
        assert not list(_defs("summary_entry").iter_errors(entry))


def test_the_schema_is_a_valid_json_schema_and_the_golden_logs_follow_it():
    jsonschema.Draft202012Validator.check_schema(schema())
    for name in ("score.jsonl", "classify_audit.jsonl"):
        assert json.loads((GOLDEN / name).read_text().splitlines()[0])["schema_version"] == 1  # no units: format 1
        assert problems(GOLDEN / name) == []


def test_the_sweep_sees_a_log_of_another_shape(tmp_path):
    """What the conftest hook relies on: a chained log of this format whose record has the wrong shape is
    named, line and field; an edit that breaks the chain leaves it to the chain's own checks."""
    log = tmp_path / "a.jsonl"
    shutil.copy(GOLDEN / "classify_audit.jsonl", log)
    assert sweep(tmp_path) == []
    edit_log(log, lambda lines: [*lines[:3], {**lines[3], "z": "yes"}, *lines[4:]])
    [found] = sweep(tmp_path)
    assert found.startswith(f"{log}:4: ") and "'yes'" in found
    edit_log(log, lambda lines: [*lines[:3], {**lines[3], "z": 1}, *lines[4:]], chain=False)
    assert sweep(tmp_path) == []  # the chain breaks: not a run's log any more, refused when read


def test_a_floor_of_this_format_is_one_measured_by_probes():
    """Only the retiled probes write a floor in this format: an older null-ablation floor (0 by
    construction, issue 24) can only be in an older log, read through ``upgrade_example``."""
    measured = NoiseFloor([8, 8], [0.2, 0.2], [0.25], ["ablation", "null"]).to_dict()
    assert not list(_defs("noise_floor").iter_errors(measured))
    assert list(_defs("noise_floor").iter_errors({**measured, "method": "null ablations"}))


# --------------------------------------------------------------------------
# logs of an older format: the policy


def test_an_older_log_reads_to_the_results_of_the_same_run_in_this_format():
    """tests/reference/legacy/ holds the golden logs as ctxlite wrote them before log formats were
    versioned; tests/golden/ the same runs in this format. ``report`` reads both to the same examples,
    summary and rows (the identity differs: this format names its kv_slots default 4, the older
    score run ran with 2), except the audited pair's ε: the older log holds the grid's value, rounded
    up, as its exact ε, which is read as an upper bound (at least the exact value this format holds)."""
    pair = {"epsilon_exact", "epsilon_pair_at_least", "epsilon_upper_bound", "privacy_profile", "audit_tightness"}
    pair |= {"audit_tightness_at_least"}
    for name in ("score.jsonl", "classify_audit.jsonl"):
        old, new = (_report_json(d / name) for d in (LEGACY, GOLDEN))
        for key in ("examples", "summary", "settings", "canary", "notes", "complete"):
            assert old.get(key) == new.get(key), (name, key)
        for was, now in zip(old.get("rows") or (), new.get("rows") or (), strict=True):
            same = set(now) - pair - {"reasons"}
            assert {k: was[k] for k in same} == {k: now[k] for k in same}, name
            assert was["epsilon_exact"] is None and was["epsilon_upper_bound"] >= now["epsilon_exact"] > 0
            assert was["reasons"]["epsilon_exact"] == GRID_WAS_EXACT
        assert old["chain"]["chained"] and not old.get("verdict")


def _report_json(path: Path) -> dict:
    r = CliRunner().invoke(main, ["report", str(path), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_an_older_log_is_verified_and_reported_but_never_resumed(tmp_path):
    log = tmp_path / "old.jsonl"
    shutil.copy(LEGACY / "score.jsonl", log)
    run = read_run_log(log)
    assert run.schema_version is None and run.chained
    r = CliRunner().invoke(main, ["verify", str(log)])
    assert r.exit_code == 0 and r.stdout.strip() == run.head
    with pytest.raises(DataError, match="before result logs had a versioned format"):
        RecordLog(log, run.identity, kind="score-run")
    assert NOT_RESUMABLE in str(
        pytest.raises(DataError, RecordLog.check_existing, log, run.identity, "score-run").value
    )


@pytest.mark.hand_made_logs  # a header of a format that does not exist yet
def test_a_log_of_a_newer_format_is_refused(tmp_path):
    log = tmp_path / "new.jsonl"
    log.write_text(json.dumps({"type": "score-run", "schema_version": SCHEMA_VERSION + 1, "identity": {}}) + "\n")
    r = CliRunner().invoke(main, ["report", str(log)])
    assert r.exit_code == 4 and f"log format {SCHEMA_VERSION + 1}" in r.output and "newer ctxlite" in r.output


def test_upgrading_an_older_score_result_fills_only_what_it_lacks_by_the_older_readers_rule():
    new = json.loads((GOLDEN / "score.jsonl").read_text().splitlines()[1])["result"]
    assert upgrade_example(new) == new  # a result of this format is left as it is
    old = json.loads(json.dumps(new))
    r = old["results"][0]
    r["generation"] = {"stop_reason": "eog", "epsilon": 2.0}
    for key in ("epsilon", "top_spans", "max_ngram_influence", "response_token_chars"):
        del r[key]
    r["search"] = {"method": "adaptive", "windows": len(r["ngrams"]), "ablations": 3}
    up = upgrade_example(old)["results"][0]
    assert up["epsilon"] == 2.0  # older logs kept the ε of ε-bounded CID in the generation record only
    assert up["top_spans"] == sorted(r["ngrams"], key=lambda g: -g["influence"])[:5]
    assert up["response_token_chars"] == [] and up["search"]["measured_every_window"] is True
    res = ExampleResult.from_dict(upgrade_example(old))
    assert res.results[0].epsilon == 2.0 and res.results[0].every_window
    r["search"]["windows"] = len(r["ngrams"]) + 1  # a window it did not measure
    assert not ExampleResult.from_dict(upgrade_example(old)).results[0].every_window


def test_upgrading_an_older_audit_report_reads_the_pairs_epsilon_from_epsilon_exact():
    report = json.loads((GOLDEN / "classify_audit.jsonl").read_text().splitlines()[-1])["end"]["report"]
    assert upgrade_report(report) == report
    old = json.loads(json.dumps(report))
    row = old["rows"][0]
    for key in (
        "epsilon_upper_bound",
        "privacy_profile_kind",
        "lower_bound_method",
        "contradictions",
        "epsilon_pair_at_least",
    ):
        del row[key]
    del old["first_reported_with"]
    up = AuditReport.from_dict(upgrade_report(old))
    assert up.rows[0].epsilon_upper_bound == row["epsilon_exact"] and up.rows[0].privacy_profile_kind == "exact"
    assert up.rows[0].lower_bound_method == "split" and up.first_reported_with is None
    assert up.rows[0].epsilon_exact is None  # the older "exact" value was the grid's: an upper bound


def test_a_row_written_before_exact_values_reads_its_exact_epsilon_as_an_upper_bound():
    """Issue 46: an "exact" ε rounded up on the grid (1.000184 for a Gaussian pair of ε 1) failed a
    budget of 1. A row of this format written before exact values were told from grid ones (no
    epsilon_pair_at_least) holds such a value: it is read as an upper bound, with its reason (the
    gate fails only on an exact value or a bracket's lower end); a row that has the field is read
    as written."""
    report = json.loads((GOLDEN / "classify_audit.jsonl").read_text().splitlines()[-1])["end"]["report"]
    now = report["rows"][0]
    assert AuditRow.from_dict(now).epsilon_exact == now["epsilon_exact"]  # this format: as written
    older = {k: v for k, v in now.items() if k != "epsilon_pair_at_least"}
    row = AuditRow.from_dict(older)
    assert row.epsilon_exact is None and row.epsilon_upper_bound == now["epsilon_upper_bound"]
    assert row.reasons["epsilon_exact"] == GRID_WAS_EXACT


def test_an_audit_row_reads_back_inf_as_a_number_only_where_its_type_holds_numbers():
    """``AuditRow.from_dict`` reads strict JSON's ``"inf"`` as a float by the field's type, not by how
    the annotation is spelled: text-only types keep the word, anything that may hold a number does not."""
    from typing import Literal, Optional

    from ctxlite.audit.report import _TEXT_FIELDS, _holds_text_only

    spelled_old = Optional[str]  # noqa: UP045 (typing.Union, not types.UnionType: both must read as text)
    text = [str, str | None, spelled_old, dict[str, str], list[str], Literal["a", "b"], list[str | None]]
    numeric = [float, float | None, int, list, list | None, dict[str, float | None], list[list[float]], Literal[1]]
    assert all(map(_holds_text_only, text)) and not any(map(_holds_text_only, numeric))
    assert {"epsilon_gdp_kind", "lower_bound_method", "reasons", "contradictions"} <= _TEXT_FIELDS
    assert not {"epsilon", "privacy_profile", "withheld_rate", "utility_chance", "accounting"} & _TEXT_FIELDS
