"""Gates, JUnit files and run logs read back (no model): the verdict logic on hand-made records."""

from __future__ import annotations

import json
import os
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from ctxlite.errors import DataError
from ctxlite.gates import Verdict, audit_verdict, epsilon_cases, influence_cases, score_verdict, write_junit
from ctxlite.records import RecordLog, read_run_log

SCHEMA = xmlschema.XMLSchema(Path(__file__).parent / "reference" / "junit.xsd")


def _gram(start, influence, above, n=4):
    return {"start": start, "n": n, "char_start": 3 * start, "char_end": 3 * start + 10, "text": "private words",
            "influence": influence, "per_token": [influence], "above_noise": above}  # fmt: skip


def _record(*results):
    return {"results": [{"lam": lam, "context_size": None, "ngrams": grams, "noise_floor": floor}
                        for lam, grams, floor in results]}  # fmt: skip


FLOOR = {"max": 0.5, "mean": 0.2}


def test_the_largest_ngram_above_its_floor_decides():
    rec = _record(
        (1.0, [_gram(0, 3.0, True), _gram(4, 9.0, False), _gram(8, 4.0, True)], FLOOR),  # 9.0 is noise
        (0.5, [_gram(0, 2.0, True)], FLOOR),
    )
    [case] = influence_cases([("ex-1", rec)], threshold=3.5)
    assert case.failed and "max τ_i 4.000" in case.message and "tokens 8–12" in case.message
    assert "λ=1" in case.message and "private" not in case.message  # positions, never the text
    assert not influence_cases([("ex-1", rec)], threshold=4.0)[0].failed  # strictly above
    assert not influence_cases([("ex-1", rec)], threshold=None)[0].failed  # no gate, nothing fails


def test_without_a_floor_every_ngram_counts_and_no_ngrams_pass():
    exact = _record((1.0, [_gram(0, 6.0, None)], None))
    assert influence_cases([("a", exact)], 5.0)[0].failed
    doc_only = _record((1.0, [], None))
    [case] = influence_cases([("b", doc_only)], 0.0)
    assert not case.failed and case.message == "no n-gram above the noise floor"


def test_epsilon_gate_reads_strict_json_rows():
    report = {
        "settings": {"confidence": 0.95},
        "rows": [
            {"epsilon": 1.0, "epsilon_lower_bound": 0.4, "epsilon_point": 0.9, "tpr": 0.5, "fpr": 0.1,
             "n_in": 100, "n_out": 100},
            {"epsilon": "inf", "epsilon_lower_bound": 2.5, "epsilon_point": "inf", "tpr": 1.0, "fpr": 0.0,
             "n_in": 100, "n_out": 100},
            {"epsilon": None, "epsilon_lower_bound": None, "epsilon_point": None, "tpr": None, "fpr": None,
             "n_in": 0, "n_out": 0},
        ],
    }  # fmt: skip
    cases = epsilon_cases(report, threshold=1.0)
    assert [c.name for c in cases] == ["epsilon=1", "epsilon=inf", "epsilon=none"]
    assert [c.failed for c in cases] == [False, True, False]  # a bound not formed trips nothing
    assert "epsilon lower bound 2.500 at confidence 0.95" in cases[1].message and "point inf" in cases[1].message
    v = audit_verdict(report, 1.0, {"model": {"sha256": "ab"}, "software": {"ctxlite": "0.1.0"}})
    assert v.properties == {"model.sha256": "ab", "software.ctxlite": "0.1.0"}
    assert "1 of 3 case(s)" in v.summary()


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
    assert cases[1].find("failure") is None and "max τ_i 1.000" in cases[1].find("system-out").text
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["gate"] == "an n-gram above its noise floor with τ_i > 5 nats" and props["complete"] == "true"


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
    rec["results"][0]["epsilon"], rec["results"][1]["epsilon"] = 1.0, 4.0
    [case] = influence_cases([("ex-1", rec)], threshold=5.0)
    assert case.failed and "at λ=1.5, ε=4: context tokens 4–8" in case.message
    del rec["results"][1]["epsilon"]  # an older log: the ε is only in the generation record
    rec["results"][1]["generation"] = {"epsilon": 4.0}
    assert "at λ=1.5, ε=4:" in influence_cases([("ex-1", rec)], threshold=5.0)[0].message
    assert "ε" not in influence_cases([("ex-1", _record((1.5, [_gram(0, 3.0, True)], FLOOR)))], 1.0)[0].message
