"""Gates, JUnit files and run logs read back (no model): the verdict logic on hand-made records."""

from __future__ import annotations

import json
import math
import os
import stat
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
import xmlschema
from hypothesis import given
from hypothesis import strategies as st

from ctxlite.audit.report import AuditRow, BoundCounts
from ctxlite.audit.settings import AuditSettings
from ctxlite.cli.options import conclude
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.gates import (
    Basis,
    Case,
    Outcome,
    Verdict,
    audit_verdict,
    check_epsilon_unit,
    epsilon_case,
    epsilon_cases,
    influence_cases,
    ngram_uncertainty,
    score_verdict,
)
from ctxlite.influence.noise import NoiseFloor
from ctxlite.privacy.power import trials_to_certify
from ctxlite.records import RecordLog, read_run_log
from ctxlite.reporting.junit import write_junit
from ctxlite.reporting.page import verdict_html
from tests.paths import REFERENCE
from tests.results import adaptive, example, floor, gram, report, result, row

SCHEMA = xmlschema.XMLSchema(REFERENCE / "junit.xsd")


def _gram(start, influence, above, n=4):
    return gram(start, influence, above, n)


def _record(*results):
    return example(*(result(lam, grams, noise) for lam, grams, noise in results))


FLOOR = floor(0.5)
"""A floor measured as the scorer logs it: one probe pair re-decoded in other batch tilings, 2 Σ_t r_t = 0.5."""


def test_an_ngram_fails_only_beyond_its_uncertainty_and_passes_only_within_it():
    """fail: τ_i − u > Y for some n-gram; pass: τ_i + u ≤ Y for every one; inconclusive between."""
    rec = _record(
        (1.0, [_gram(0, 3.0, True), _gram(4, 9.0, True), _gram(8, 4.0, True)], FLOOR),  # u = 0.5 everywhere
        (0.5, [_gram(0, 2.0, True)], FLOOR),
    )
    [case] = influence_cases([("ex-1", rec)], threshold=8.0)
    assert case.outcome is Outcome.FAIL and case.basis is Basis.MEASURED
    assert "τ_i 9.000 − floor 0.500 nats" in case.message and "tokens 4–8" in case.message
    assert case.message.startswith(f"fail ({Basis.MEASURED.value}): ")
    assert "λ=1" in case.message and "private" not in case.message  # positions, never the text
    assert influence_cases([("ex-1", rec)], threshold=8.5)[0].outcome is Outcome.INCONCLUSIVE  # 8.5 ≤ 9 − 0.5
    assert influence_cases([("ex-1", rec)], threshold=9.4)[0].outcome is Outcome.INCONCLUSIVE  # 9 + 0.5 > 9.4
    passed = influence_cases([("ex-1", rec)], threshold=9.5)[0]
    assert passed.outcome is Outcome.PASS and "τ_i + floor 9.500" in passed.message
    assert not influence_cases([("ex-1", rec)], threshold=None)[0].failed  # no gate, nothing fails


def test_a_per_ngram_uncertainty_overrides_the_results_floor():
    gram = _gram(0, 5.0, True)
    rec = _record((1.0, [gram], FLOOR))
    assert ngram_uncertainty(rec.results[0], gram) == 0.5
    assert influence_cases([("a", rec)], 4.0)[0].outcome is Outcome.FAIL
    gram.uncertainty = 2.0  # this n-gram moved more under another batch tiling than the floor says
    assert ngram_uncertainty(rec.results[0], gram) == 2.0
    assert influence_cases([("a", rec)], 4.0)[0].outcome is Outcome.INCONCLUSIVE
    assert influence_cases([("a", rec)], 7.0)[0].outcome is Outcome.PASS


UNMEASURED = {
    "no floor (a server backend, or --null-ablations 0)": None,
    # what a log of 2b1529b holds: null ablations in the canonical tiling, which read 0 by construction
    "an older floor": NoiseFloor([8, 4], [0.0, 0.0], [], [], "null ablations"),  # as ctxlite.logformat reads it
    "probes that saw no rounding": replace(FLOOR, sums=[0.0, 0.0], per_token=[0.0]),
}


@pytest.mark.parametrize("floor", UNMEASURED.values(), ids=UNMEASURED.keys())
def test_without_a_measured_floor_an_influence_case_never_passes(floor):
    """Issue 24 §1: where no rounding was measured the uncertainty was taken as 0, so τ_i ≤ Y passed
    though another build moves τ_i by up to ~2 nats. It is inconclusive, says why and what would
    decide it; what this build computed above the budget still fails, and says on what basis."""
    rec = _record((1.0, [_gram(0, 1.0, None), _gram(4, 2.0, None)], floor))
    [case] = influence_cases([("a", rec)], 5.0)
    assert case.outcome is Outcome.INCONCLUSIVE and case.basis is Basis.NO_PROOF, case.message
    assert case.message.startswith("inconclusive (no proof either way): ")
    assert "not measured" in case.message and "--null-ablations" in case.message  # what would make it conclusive
    assert "τ_i 2.000" in case.message and "at λ=1" in case.message
    mixed = _record((1.5, [_gram(0, 1.0, True)], FLOOR), (1.0, [_gram(0, 1.0, None)], floor))
    [one] = influence_cases([("a", mixed)], 5.0)  # one result without a floor is enough
    assert one.outcome is Outcome.INCONCLUSIVE and "at λ=1:" in one.message
    [tripped] = influence_cases([("a", _record((1.0, [_gram(0, 6.0, None)], floor)))], 5.0)
    assert tripped.outcome is Outcome.FAIL and tripped.basis is Basis.THIS_BUILD
    assert tripped.message.startswith("fail (τ computed on this build; its rounding between builds not measured)")
    assert "τ_i 6.000 > budget 5 nats" in tripped.message
    assert ngram_uncertainty(rec.results[0], rec.results[0].ngrams[0]) is None
    v = score_verdict(["a"], [rec], 5.0, {})
    assert v.outcome is Outcome.INCONCLUSIVE and v.summary().startswith("ctxlite score: inconclusive: 1 of 1")


def test_a_pass_says_its_floor_is_an_estimate_from_probes_not_a_bound(tmp_path):
    """Where the floor was measured, a pass rests on τ computed on this build plus a floor estimated
    from probe pairs in other batch tilings: the message, the JSON, JUnit and HTML say so."""
    two = floor(0.5, pairs=2)
    v = score_verdict(["a"], [_record((1.0, [_gram(0, 1.0, True)], two))], 5.0, {})
    [case] = v.cases
    assert case.outcome is Outcome.PASS and case.basis is Basis.MEASURED
    basis = "τ computed on this build, plus a noise floor estimated by probes (an estimate, not a bound)"
    assert case.basis.value == basis and case.message.startswith(f"pass ({basis}): ")
    assert "τ_i + floor 1.500 nats" in case.message
    assert "floor estimated from 2 probe pairs re-decoded in other batch tilings" in case.message
    assert "not a bound on another build's rounding" in case.message
    assert basis in v.summary()
    one = influence_cases([("a", _record((1.0, [_gram(0, 1.0, True)], FLOOR), (1.5, [_gram(0, 1.0, True)], two)))], 5)
    assert "each floor estimated from 1–2 probe pairs" in one[0].message
    assert (
        "from 1 probe pair re-decoded"
        in influence_cases([("a", _record((1.0, [_gram(0, 1.0, True)], FLOOR)))], 5)[0].message
    )
    assert v.to_dict()["results"][0] == {"name": "a", "verdict": "pass", "basis": basis, "message": case.message}
    write_junit(tmp_path / "j.xml", v)
    assert ET.parse(tmp_path / "j.xml").getroot().find("testsuite/testcase/system-out").text == case.message
    page = verdict_html(v)
    assert "an estimate, not a bound" in page and "2 probe pairs" in page


def test_no_ngrams_prove_nothing():
    doc_only = _record((1.0, [], None))
    [case] = influence_cases([("b", doc_only)], 0.0)
    assert case.outcome is Outcome.INCONCLUSIVE and "no n-gram measured" in case.message
    assert influence_cases([("b", doc_only)], None)[0].message == "no n-gram above the noise floor"


def test_an_adaptive_search_that_skipped_windows_is_inconclusive_not_refused():
    rec = _record((1.0, [_gram(0, 1.0, True), _gram(4, 2.0, True)], FLOOR))
    rec.results[0].search = adaptive(10)  # 2 of 10 windows measured
    [case] = influence_cases([("ex", rec)], threshold=5.0)
    assert case.outcome is Outcome.INCONCLUSIVE and "measured 2 of 10 n-gram windows" in case.message
    assert influence_cases([("ex", rec)], threshold=1.0)[0].outcome is Outcome.FAIL  # what it measured trips
    rec.results[0].search = adaptive(2, measured_every_window=True)  # a short context: every window measured
    assert rec.results[0].every_window
    assert influence_cases([("ex", rec)], threshold=5.0)[0].outcome is Outcome.PASS


def _row(**fields):
    """An audit row; ``fields`` override the defaults."""
    return row(**fields)


SETTINGS = AuditSettings(queries_per_trial=64)


def _case(budget=1.0, settings=SETTINGS, **fields):
    return epsilon_case(_row(**fields), settings, budget)


def test_an_exact_epsilon_above_the_budget_fails_without_statistics():
    """The issue's reproducer in numbers: certified 0.778, exact 26.6, budget 1 was a pass; it fails."""
    case = _case(epsilon_lower_bound=0.778, epsilon_upper_bound=26.6, epsilon_exact=26.6, privacy_profile_kind="exact")
    assert case.outcome is Outcome.FAIL and case.basis is Basis.EXACT
    assert case.message.startswith("fail (exact epsilon of the audited pair): ε per trial of 64 queries composed")
    assert "exact ε(δ=1e-05) 26.600 > budget 1" in case.message and "certified ε ≥ 0.778" in case.message
    assert "at least about 40 trials" in case.message  # what it would take the lower bound to show it
    ok = _case(epsilon_lower_bound=0.778, epsilon_upper_bound=0.9, epsilon_exact=0.9, privacy_profile_kind="exact")
    assert ok.outcome is Outcome.PASS and ok.basis is Basis.EXACT and "exact ε(δ=1e-05) 0.900 ≤ budget 1" in ok.message


def test_a_pair_epsilon_known_only_within_a_grid_bracket_fails_only_on_its_lower_end():
    """An exact profile whose ε is computed on a grid (a noisy mixed vote) is bracketed: the upper end
    (losses rounded up) is an upper bound, never called exact. The gate fails on the lower end
    only, passes on the upper end, and a bracket around the budget is inconclusive (issue 46: the
    rounded-up 1.000184 of an ε = 1 pair failed a budget of 1)."""
    pair = {"privacy_profile_kind": "exact", "privacy_profile_method": "a grid"}
    above = _case(epsilon_pair_at_least=1.02, epsilon_upper_bound=1.1, **pair)
    assert above.outcome is Outcome.FAIL and above.basis is Basis.PAIR_AT_LEAST
    assert "is at least 1.020 > budget 1" in above.message and "ε in [1.020, 1.100]" in above.message
    straddles = _case(epsilon_pair_at_least=0.999, epsilon_upper_bound=1.0002, **pair)
    assert straddles.outcome is Outcome.INCONCLUSIVE and straddles.basis is Basis.NO_PROOF
    assert "lies in [0.999, 1.000] (its exact profile, computed on a grid), which straddles budget 1" in (
        straddles.message
    )
    below = _case(epsilon_pair_at_least=0.9, epsilon_upper_bound=0.95, **pair)
    assert below.outcome is Outcome.PASS and below.basis is Basis.UPPER_BOUND and "at most 0.950" in below.message
    rnm = {"epsilon": 1.0, "epsilon_per_trial": 1.0}  # within the bracket, the guarantee still decides
    assert _case(epsilon_pair_at_least=0.999, epsilon_upper_bound=1.0002, **pair, **rnm).basis is Basis.GUARANTEE


def test_a_certified_lower_bound_above_the_budget_fails_whatever_else_is_known():
    for extra in ({}, {"epsilon_upper_bound": 0.5, "privacy_profile_kind": "upper bound"},
                  {"epsilon_per_trial": 0.5, "epsilon": 0.5}):  # fmt: skip
        case = _case(epsilon_lower_bound=1.2, **extra)
        assert case.outcome is Outcome.FAIL and case.basis is Basis.LOWER_BOUND, extra
        assert "certified ε ≥ 1.200 at confidence 0.95" in case.message and "> budget 1" in case.message
    assert _case(epsilon_lower_bound=1.0).outcome is not Outcome.FAIL  # strictly above


def test_an_upper_bound_within_the_budget_passes_and_one_above_it_proves_nothing():
    rnm = {"epsilon": 1.0, "epsilon_per_trial": 1.0, "privacy_profile_method": "the canary's ensemble's vote"}
    case = _case(epsilon_upper_bound=0.8, privacy_profile_kind="upper bound", **rnm)
    assert case.outcome is Outcome.PASS and case.basis is Basis.UPPER_BOUND and "at most 0.800" in case.message
    high = _case(0.9, epsilon_upper_bound=2.5, privacy_profile_kind="upper bound", **rnm)  # guarantee 1 > 0.9
    assert high.outcome is Outcome.INCONCLUSIVE and high.basis is Basis.NO_PROOF
    assert "only known to be at most 2.500 > budget 0.9" in high.message
    assert "no number of trials can prove a pass" in high.message and "at least about" in high.message


def test_a_dp_mechanism_passes_by_its_guarantee_unless_the_audit_contradicts_it():
    dp = {"epsilon": 0.5, "epsilon_per_trial": 0.8}
    case = _case(epsilon_lower_bound=0.3, **dp)
    assert case.outcome is Outcome.PASS and case.basis is Basis.GUARANTEE
    assert "by the mechanism's guarantee" in case.message and "0.800, composed over the trial's queries" in case.message
    contradicted = _case(epsilon_lower_bound=0.9, **dp)  # ε_lb 0.9 > guarantee 0.8 (yet ≤ the budget)
    assert (
        contradicted.outcome is Outcome.INCONCLUSIVE and "contradicts the mechanism's guarantee" in contradicted.message
    )
    weak = _case(epsilon_lower_bound=0.3, epsilon=8.0, epsilon_per_trial=8.0)
    assert weak.outcome is Outcome.INCONCLUSIVE and "guarantee ε 8.000 > budget 1" in weak.message
    sigma0 = _case(epsilon_lower_bound=0.3, epsilon=math.inf, epsilon_per_trial=math.inf)
    assert sigma0.outcome is Outcome.INCONCLUSIVE and sigma0.basis is Basis.NO_PROOF


def test_nothing_known_is_inconclusive_with_a_power_calculation_at_the_observed_rates():
    case = _case(epsilon_lower_bound=0.7)  # a generation audit: no profile, no DP guarantee
    assert case.outcome is Outcome.INCONCLUSIVE and case.basis is Basis.NO_PROOF
    assert "certified ε ≥ 0.700" in case.message and "which proves nothing" in case.message
    assert "the pair's ε is not known (the distribution of generated texts" in case.message
    assert "no number of trials can prove a pass for this mechanism" in case.message
    n = trials_to_certify(1.0, 0.9, 0.2, alpha=0.05, delta=1e-5)
    assert f"observed rates (TPR 0.900, FPR 0.200 at the bound's threshold) about {n:,} trials" in case.message
    weak = _case(3.0, epsilon_lower_bound=0.7)  # plug-in log(0.9 / 0.2) = 1.5 < 3: more trials never show 3
    assert "no number of trials certifies more than 3" in weak.message
    none = _case(epsilon_lower_bound=None, lower_bound_counts=BoundCounts(0, 0, 0, 0, None))
    assert none.outcome is Outcome.INCONCLUSIVE and "certified ε ≥ n/a" in none.message


def test_a_per_query_budget_is_never_compared_with_a_per_trial_epsilon():
    many = report([_row()], SETTINGS)
    with pytest.raises(InvalidParameter, match="compose 64 queries"):
        audit_verdict(many, 1.0, {}, "query")
    check_epsilon_unit("trial", 64)
    one = report([_row()], AuditSettings(queries_per_trial=1))
    v = audit_verdict(one, 1.0, {}, "query")  # one query per trial: the units coincide
    assert v.gate == "ε per trial (1 query, so per query too) at δ = 1e-05 ≤ 1"
    assert audit_verdict(many, 1.0, {}).gate == "ε per trial of 64 queries composed at δ = 1e-05 ≤ 1"


def test_the_verdict_is_the_worst_case_and_its_exit_code_is_8_0_or_10(tmp_path):
    fail = _row(epsilon_lower_bound=2.0)
    inconclusive, passed = _row(), _row(epsilon_upper_bound=0.5, privacy_profile_kind="exact")
    exits = {}
    for name, rows in {"fail": [passed, inconclusive, fail], "inconclusive": [passed, inconclusive],
                       "pass": [passed]}.items():  # fmt: skip
        v = audit_verdict(report(rows, SETTINGS), 1.0, {})
        assert v.outcome.value == name and v.to_dict()["verdict"] == name
        assert v.summary().startswith(f"ctxlite audit: {name}: ") and v.lines()[0].startswith(
            f"verdict: ctxlite audit: {name}"
        )
        assert [r["verdict"] for r in v.to_dict()["results"]][: len(rows)] == [c.outcome.value for c in v.cases]
        try:
            conclude(v, None)
            exits[name] = 0
        except SystemExit as exc:
            exits[name] = exc.code
    assert exits == {"fail": 8, "inconclusive": 10, "pass": 0}
    v = audit_verdict(report([passed, inconclusive], SETTINGS), 1.0, {})
    write_junit(tmp_path / "j.xml", v)
    SCHEMA.validate(str(tmp_path / "j.xml"))
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite.get("failures") == "0" and suite.get("errors") == "1"  # inconclusive: never counted passed
    error = suite.findall("testcase")[1].find("error")
    assert error.get("type") == "ctxlite.inconclusive" and error.get("message").startswith("inconclusive (")
    assert {p.get("name"): p.get("value") for p in suite.iter("property")}["verdict"] == "inconclusive"


def test_epsilon_gate_reads_strict_json_rows():
    """Rows read back from a log's strict JSON (``"inf"`` for the infinities) through ``AuditRow.from_dict``."""
    logged = [
        {**_row().to_dict(), "epsilon": 1.0, "epsilon_per_trial": 1.0, "epsilon_lower_bound": 0.4,
         "epsilon_point": 0.9, "tpr": 0.5, "fpr": 0.1, "n_in": 100, "n_out": 100},
        {**_row().to_dict(), "epsilon": "inf", "epsilon_per_trial": "inf", "epsilon_lower_bound": 2.5,
         "epsilon_point": "inf", "tpr": 1.0, "fpr": 0.0, "n_in": 100, "n_out": 100},
        {**_row().to_dict(), "epsilon": None, "epsilon_lower_bound": None, "epsilon_point": None, "tpr": None,
         "fpr": None, "n_in": 0, "n_out": 0},
    ]  # fmt: skip
    audit = report([AuditRow.from_dict(r) for r in logged], AuditSettings(queries_per_trial=1))
    assert audit.rows[1].epsilon == math.inf
    cases = epsilon_cases(audit, threshold=1.0)
    assert [c.name for c in cases] == ["epsilon=1", "epsilon=inf (no noise)", "mechanism=none (undefended, no epsilon)"]
    assert [c.outcome.value for c in cases] == ["pass", "fail", "inconclusive"]  # a bound not formed proves nothing
    assert cases[0].basis is Basis.GUARANTEE
    assert "certified ε ≥ 2.500 at confidence 0.95" in cases[1].message and "point inf" in cases[1].message
    v = audit_verdict(audit, 1.0, {"model": {"sha256": "ab"}, "software": {"ctxlite": "0.1.0"}})
    assert v.properties == {"model.sha256": "ab", "software.ctxlite": "0.1.0"}
    assert "fail: 1 of 3 case(s)" in v.summary()


def test_junit_file_is_valid_owner_only_and_counts_failures(tmp_path):
    recs = [_record((1.0, [_gram(0, 6.0, True)], FLOOR)), _record((1.0, [_gram(0, 1.0, True)], FLOOR))]
    v = score_verdict(['leaky <&> "one"', "fine"], recs, 5.0, {"model": {"sha256": "ab"}})
    path = tmp_path / "influence.xml"
    write_junit(path, v)
    SCHEMA.validate(str(path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    cases = suite.findall("testcase")
    assert cases[0].get("name") == 'leaky <&> "one"' and cases[0].find("failure") is not None
    assert cases[1].find("failure") is None and "τ_i + floor 1.500" in cases[1].find("system-out").text
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["gate"] == "every n-gram's τ_i + its noise floor ≤ 5 nats" and props["complete"] == "true"
    assert props["verdict"] == "fail"


def test_junit_schema_rejects_what_ci_servers_reject(tmp_path):
    """The schema is not a rubber stamp: a test case without a name, or a count that is not a number, fails it."""
    bad = tmp_path / "bad.xml"
    bad.write_text('<testsuites><testsuite name="s" tests="x" failures="0" errors="0"/></testsuites>')
    assert not SCHEMA.is_valid(str(bad))
    bad.write_text(
        '<testsuites><testsuite name="s" tests="1" failures="0" errors="0"><testcase/></testsuite></testsuites>'
    )
    assert not SCHEMA.is_valid(str(bad))


def test_verdict_without_gate_never_fails():
    v = Verdict("ctxlite score", None, influence_cases([("a", _record((1.0, [_gram(0, 99.0, True)], FLOOR)))], None))
    assert not v.failures and v.summary() == "ctxlite score: 1 case(s), no gate set"


@pytest.mark.hand_made_logs  # toy records of a score/audit kind, not a run's
def test_end_line_marks_a_finished_run_and_a_later_record_reopens_it(tmp_path):
    path = tmp_path / "run.jsonl"
    log = RecordLog(path, {"settings": {"n": 1}}, kind="score-run")
    log.append("a", {"type": "example", "result": {"x": 1}})
    assert not read_run_log(path).complete
    log.finish({"examples": ["a"], "summary": None})
    log.close()
    run = read_run_log(path, "score-run")
    assert run.complete and run.end == {"examples": ["a"], "summary": None} and list(run.records) == ["a"]
    again = RecordLog(path, {"settings": {"n": 1}}, kind="score-run")  # resumed: finished until it appends
    assert again.end == {"examples": ["a"], "summary": None}
    again.finish({"examples": ["a"], "summary": None})  # nothing new: nothing written
    assert path.read_text().count('{"end"') == 1
    again.append("b", {"type": "example", "result": {"x": 2}})
    again.close()
    assert not read_run_log(path).complete
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"end": {"examples": ["a", "b"]')  # torn: the run died writing its end line
    run = read_run_log(path)
    assert not run.complete and run.torn_at is not None and list(run.records) == ["a", "b"]


def test_reading_a_log_that_is_not_one(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps({"hello": 1}) + "\n")
    with pytest.raises(DataError, match="is not a ctxlite result log"):
        read_run_log(p)
    p.write_text(json.dumps({"type": "audit", "identity": {}}) + "\n")
    with pytest.raises(DataError, match="is not a ctxlite score-run log"):
        read_run_log(p, "score-run")


def test_the_message_names_the_epsilon_of_the_worst_result():
    """Two results at one λ that differ only in ε: the message says which one tripped."""
    rec = _record((1.5, [_gram(0, 3.0, True)], FLOOR), (1.5, [_gram(4, 7.0, True)], FLOOR))
    rec.results[0].epsilon, rec.results[1].epsilon = 1.0, 4.0
    [case] = influence_cases([("ex-1", rec)], threshold=5.0)
    assert case.failed and "at λ=1.5, ε=4: context tokens 4–8" in case.message
    assert "ε" not in influence_cases([("ex-1", _record((1.5, [_gram(0, 3.0, True)], FLOOR)))], 1.0)[0].message


@given(
    st.lists(
        st.tuples(
            st.text(max_size=8), st.sampled_from(list(Outcome)), st.text(max_size=20), st.sampled_from(list(Basis))
        ),
        max_size=5,
    ),
    st.sampled_from([None, "2 nats", "epsilon 1"]),
    st.booleans(),
)
def test_a_verdict_reads_back_from_its_dict(cases, gate, complete):
    verdict = Verdict("ctxlite score", gate, [Case(*c) for c in cases], complete)
    back = Verdict.from_dict(json.loads(json.dumps(verdict.to_dict())))
    assert back == verdict and back.outcome == verdict.outcome


def test_the_trials_needed_for_a_gaussian_pair_are_its_own_not_the_corners():
    """Issue 46: a Gaussian pair (μ = 2, exact ε 10.0 at δ = 1e-5), budget 1: the corner of an (ε, δ)
    pair said "at least about 40 trials", where audits of 40 certify more than 1 one time in a
    hundred; the message gives the pair's own need."""
    from ctxlite.privacy.power import gaussian_trials_to_certify

    lo, hi = gaussian_trials_to_certify(1.0, 2.0, alpha=0.05, delta=1e-5)
    pair = {"epsilon_exact": 10.0, "epsilon_upper_bound": 10.0, "privacy_profile_kind": "exact"}
    case = _case(epsilon_lower_bound=0.5, gaussian_mu=2.0, **pair)
    assert case.outcome is Outcome.FAIL and "40 trials" not in case.message, case.message
    assert f"{lo:,}–{hi:,} trials" in case.message and "Gaussian" in case.message
