"""Gates, JUnit and ``ctxlite report`` end to end on the default model: a run's verdict is the same
whether it is taken when the run ends or later from its log, and a partial log never passes a gate."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.records import read_run_log
from tests.paths import DATA, REFERENCE

pytestmark = pytest.mark.model

SCHEMA = xmlschema.XMLSchema(REFERENCE / "junit.xsd")
NOTE = (
    "Clinic note. Patient: Dana Whitcombe, DOB 04/09/1971, MRN 5521-8830. "
    "Prescribed lisinopril 10 mg daily for hypertension; follow up in four weeks."
)


def _run(args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _drop_end_line(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert json.loads(lines[-1]).keys() == {"end", "chain"}
    path.write_text("".join(lines[:-1]), encoding="utf-8")


@pytest.fixture(scope="module")
def score_log(tmp_path_factory):
    """One scored example with 8-gram ablations and a noise floor, its stdout and its JUnit file."""
    d = tmp_path_factory.mktemp("score")
    (d / "note.txt").write_text(NOTE, encoding="utf-8")
    log, junit = d / "run.jsonl", d / "influence.xml"
    args = ["score", "--context", d / "note.txt", "-q", "What was prescribed?", "-r", "Lisinopril 10 mg daily."]
    r = _run([*args, "--ngram", "8", "--out", log, "--fail-above-influence", "0", "--junit", junit])
    return r, log, junit


def test_a_tripped_influence_gate_exits_8_after_writing_everything(score_log):
    r, log, junit = score_log
    assert r.exit_code == 8, r.output
    assert r.stderr.strip().splitlines()[-1].startswith("ctxlite: gate tripped: ctxlite score: fail: 1 of 1 case(s)")
    out = json.loads(r.stdout)  # the full result is still printed
    res = out["result"]["results"][0]
    top = max((g for g in res["ngrams"] if g["above_noise"]), key=lambda g: g["influence"])
    assert out["verdict"]["failed"][0]["name"] == "example"
    assert f"context tokens {top['start']}–{top['start'] + 8}" in out["verdict"]["failed"][0]["message"]
    run = read_run_log(log, "score-run")
    assert run.complete and run.end["examples"] == ["example"]
    SCHEMA.validate(str(junit))
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("failures") == "1"
    assert suite.find("testcase/failure").get("message").startswith("fail (τ computed on this build, plus a noise")
    assert "Whitcombe" not in junit.read_text(encoding="utf-8")  # positions, never the private text


def test_report_regates_a_stored_log_with_the_same_verdict(score_log, tmp_path):
    r, log, _ = score_log
    message = json.loads(r.stdout)["verdict"]["failed"][0]["message"]
    table = _run(["report", log])
    assert table.exit_code == 0 and table.stdout.splitlines()[0].startswith("example")
    res = json.loads(r.stdout)["result"]["results"][0]
    assert f"{res['max_ngram_influence']:.2f}" in table.stdout and res["top_spans"][0]["text"][:20] in table.stdout
    again = _run(["report", log, "--fail-above-influence", "0", "--junit", tmp_path / "again.xml", "--json"])
    assert again.exit_code == 8
    out = json.loads(again.stdout)
    assert out["complete"] and out["verdict"]["failed"][0]["message"] == message
    assert out["examples"][0]["results"][0]["max_ngram_influence"] == res["max_ngram_influence"]
    SCHEMA.validate(str(tmp_path / "again.xml"))
    high = res["max_ngram_influence"] + (res["noise_floor"] or {}).get("max", 0.0) + 1
    passed = _run(["report", log, "--fail-above-influence", high])
    assert passed.exit_code == 0 and "ctxlite score: pass: all 1 case(s)" in passed.stderr
    assert passed.stdout.startswith("verdict: ctxlite score: pass: all 1 case(s)")  # before the table
    wrong = _run(["report", log, "--fail-above-epsilon", "1"])
    assert wrong.exit_code == 2 and "gates audit logs" in wrong.output


def test_a_partial_log_fails_on_what_finished_and_never_passes(score_log, tmp_path):
    _, log, _ = score_log
    partial = tmp_path / "partial.jsonl"
    partial.write_bytes(log.read_bytes())
    _drop_end_line(partial)  # as if Ctrl-C came after the example, before the end line
    r = _run(["report", partial])
    assert r.exit_code == 0 and "partial run (1 example(s) finished" in r.stderr
    high = _run(["report", partial, "--fail-above-influence", "1000"])
    assert high.exit_code == 4 and "a gate needs a finished run" in high.stderr
    low = _run(["report", partial, "--fail-above-influence", "0"])
    assert low.exit_code == 8  # what finished already trips it: that verdict cannot change


def test_doc_level_scoring_has_no_ngrams_to_gate(tmp_path):
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    r = _run(["score", "--context", tmp_path / "note.txt", "-q", "x", "--doc", "--fail-above-influence", "1"])
    assert r.exit_code == 2 and "--fail-above-influence: no effect with --doc" in r.output


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory):
    d = tmp_path_factory.mktemp("audit")
    log, junit = d / "audit.jsonl", d / "audit.xml"
    args = ["audit", "--data", DATA / "classify_sample.jsonl", "--mechanism", "none", "--trials", "200"]
    args += ["--reference-runs", "1", "--utility-queries", "1", "--out", log]
    r = _run([*args, "--fail-above-epsilon", "0", "--junit", junit])
    return r, log, junit


def test_audit_gate_and_report(audit_log, tmp_path):
    r, log, junit = audit_log
    out = json.loads(r.stdout)
    [row] = out["rows"]
    lb = row["epsilon_lower_bound"]
    assert lb is not None and lb > 0, out  # the undefended default model leaks its canary
    assert r.exit_code == 8 and "ctxlite: gate tripped: ctxlite audit: fail: 1 of 1 case(s)" in r.stderr
    SCHEMA.validate(str(junit))
    assert ET.parse(junit).getroot().find("testsuite/testcase").get("name") == "mechanism=none (undefended, no epsilon)"
    table = _run(["report", log])
    assert table.exit_code == 0 and table.stdout.splitlines()[0].split()[:2] == ["eps", "eps/trial"]
    assert f"{lb:7.3f}" in table.stdout
    assert _run(["report", log, "--fail-above-epsilon", lb * 0.99]).exit_code == 8
    exact = row["epsilon_exact"]  # no defence on classification: the pair's ε is known exactly
    at_lb = _run(["report", log, "--fail-above-epsilon", lb])  # not certified above lb, but exactly above it
    assert (at_lb.exit_code == 8) == (exact > lb) and "exact epsilon of the audited pair" in at_lb.stderr
    assert _run(["report", log, "--fail-above-epsilon", exact]).exit_code == 0  # strictly above trips
    partial = tmp_path / "partial.jsonl"
    partial.write_bytes(log.read_bytes())
    _drop_end_line(partial)
    p = _run(["report", partial, "--json"])
    assert p.exit_code == 0 and json.loads(p.stdout) == {
        "log": str(partial),
        "kind": "audit",
        "complete": False,
        "trials": 200,
        "chain": {"chained": True, "head": read_run_log(partial).head, "lines": len(partial.read_bytes().splitlines())},
    }
    g = _run(["report", partial, "--fail-above-epsilon", "0"])
    assert g.exit_code == 4 and "no ε to gate or write as JUnit yet" in g.stderr


TICKETS = DATA / "examples" / "support_tickets.jsonl"


@pytest.fixture(scope="module")
def ticket_audit(tmp_path_factory):
    """The issue's reproducer, smaller: a ticket router over 30 records, no defence, 8 shots, few trials."""
    d = tmp_path_factory.mktemp("tickets")
    data, log = d / "tickets30.jsonl", d / "audit.jsonl"
    data.write_text("".join(TICKETS.read_text(encoding="utf-8").splitlines(keepends=True)[:30]), encoding="utf-8")
    args = ["audit", "--data", data, "--format", TICKETS.with_suffix(".toml"), "--mechanism", "none"]
    r = _run([*args, "--trials", "16", "--shots", "8", "--reference-runs", "2", "--utility-queries", "0", "--out", log])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["rows"][0], log, data


def test_a_pair_whose_exact_epsilon_exceeds_the_budget_fails_though_its_trials_certify_less(ticket_audit, tmp_path):
    """Issue 24 §1: certified ε_lb below the budget, the audited pair's ε above it: that was "passed,
    no case has an epsilon lower bound > budget" (exit 0); it is a fail on the pair's ε. Here 64
    queries a trial are too many outcomes to enumerate, so the pair's ε is known within its grid
    bracket (issue 46: a rounded-up grid value is no exact ε), and the fail rests on the bracket's
    lower end; a budget at its upper end passes."""
    row, log, _ = ticket_audit
    lb, at_least, upper = row["epsilon_lower_bound"], row["epsilon_pair_at_least"], row["epsilon_upper_bound"]
    budget = round(lb + 0.5, 3)
    assert row["privacy_profile_kind"] == "exact" and row["epsilon_exact"] is None, row
    assert upper >= at_least > budget > lb, row
    junit = tmp_path / "verdict.xml"
    r = _run(["report", log, "--fail-above-epsilon", budget, "--json", "--junit", junit])
    assert r.exit_code == 8, r.output
    assert next(iter(json.loads(r.stdout))) == "verdict"  # the verdict first
    verdict = json.loads(r.stdout)["verdict"]
    assert verdict["verdict"] == "fail"
    [case] = verdict["results"]
    basis = "lower end of the audited pair's epsilon, computed on a grid"
    assert case["verdict"] == "fail" and case["basis"] == basis
    assert case["message"].startswith(f"fail ({basis}): ε per trial of 64 queries composed"), case["message"]
    assert f"certified ε ≥ {lb:.3f}" in case["message"]
    SCHEMA.validate(str(junit))
    assert ET.parse(junit).getroot().find("testsuite/testcase/failure") is not None
    table = _run(["report", log, "--fail-above-epsilon", budget])
    assert table.stdout.splitlines()[0].startswith("verdict: ctxlite audit: fail: 1 of 1 case(s)")  # verdict first
    passed = _run(["report", log, "--fail-above-epsilon", upper, "--json"])
    assert passed.exit_code == 0, passed.output
    assert json.loads(passed.stdout)["verdict"]["results"][0]["basis"] == "upper bound on the audited pair's epsilon"
    assert "pass: all 1 case(s) within the budget" in passed.stderr
    per_query = _run(["report", log, "--fail-above-epsilon", budget, "--epsilon-unit", "query"])
    assert per_query.exit_code == 2 and "compose 64 queries" in per_query.stderr  # never mixed


def test_an_audit_that_cannot_prove_the_budget_is_inconclusive_exit_10(ticket_audit):
    """A new private set every trial: there is no fixed pair to profile and no DP guarantee, so a lower
    bound under the budget is inconclusive, never a pass."""
    _, _, data = ticket_audit
    args = ["audit", "--data", data, "--format", TICKETS.with_suffix(".toml"), "--mechanism", "none", "--trials"]
    args += ["4", "--shots", "2", "--reference-runs", "1", "--utility-queries", "0", "--resample-data"]
    r = _run([*args, "--fail-above-epsilon", "1000", "--json"])
    assert r.exit_code == 10, r.output
    [case] = json.loads(r.stdout)["verdict"]["results"]
    assert case["verdict"] == "inconclusive" and case["basis"] == "no proof either way"
    assert "no number of trials can prove a pass for this mechanism" in case["message"]
    assert "ctxlite: gate inconclusive: ctxlite audit: inconclusive: 1 of 1 case(s)" in r.stderr
    assert r.stderr.splitlines()[0].startswith("verdict: ctxlite audit: inconclusive")  # the table's first line


def _on_a_terminal(args: list[str]) -> str:
    """Run ``python -m ctxlite ARGS`` with stdout on a pseudo-terminal; what it printed there."""
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ctxlite", *args], stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    _, err = proc.communicate(timeout=300)
    os.close(master)
    assert proc.returncode == 0, err
    return out.decode("utf-8").replace("\r\n", "\n")


def test_a_terminal_gets_a_table_and_json_on_request(tmp_path):
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    args = ["score", "--context", str(tmp_path / "note.txt"), "-q", "What?", "-r", "Lisinopril.", "--doc"]
    table = _on_a_terminal(args)
    head, row = table.splitlines()[:2]
    assert head.split()[:4] == ["example", "λ", "tokens", "doc"] and row.split()[0] == "example", table
    assert "{" not in table
    assert json.loads(_on_a_terminal([*args, "--json"]))["result"]["id"] == "example"


def test_a_terminal_sees_the_top_spans_marked_in_their_context(score_log):
    """Under the table, the log's top spans in an excerpt of the context: reverse video on a
    terminal (the largest bold), [brackets] in a pipe; what is shown is the note's own text."""
    import re

    _, log, _ = score_log
    res = read_run_log(log, "score-run").records["example"]["result"]["results"][0]
    on_tty = _on_a_terminal(["report", str(log)]).splitlines()
    assert on_tty[-2].startswith("top 3 n-grams by τ_i in their context (the largest bold")
    line = on_tty[-1].removeprefix("example λ=1: ")
    bold = re.findall(r"\x1b\[1;7m(.*?)\x1b\[0m", line)
    assert len(bold) == 1 and bold[0][:16] == res["top_spans"][0]["text"][:16]
    assert len(re.findall(r"\x1b\[7m(.*?)\x1b\[0m", line)) == 2
    piped = _run(["report", log]).stdout.splitlines()
    assert piped[-1].startswith("example λ=1: ") and "\x1b" not in "".join(piped)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", line)
    assert plain == piped[-1].removeprefix("example λ=1: ").replace("[", "").replace("]", "")
    for excerpt in plain.split("…"):
        assert excerpt.strip() in NOTE  # cut spans aside, the excerpts are the context itself


def test_an_audit_with_an_infinite_epsilon_row_is_recomputed():
    """An RNM audit at ε = inf logs its row's theoretical ε and the pair's ε bound as the strict-JSON
    string "inf"; the recomputation read them raw and refused the log of ``make demo``'s own RNM audit
    (exit 4, "must be real number, not str"). The log (tests/reference/, made by ``ctxlite audit --data
    ctxlite/data/classify_sample.jsonl --mechanism rnm --temperature 0 --epsilon inf --trials 20``)
    needs no model to report."""
    log = REFERENCE / "legacy" / "rnm_audit_epsilon_inf.jsonl"
    r = CliRunner().invoke(main, ["report", str(log), "--json"])
    assert r.exit_code == 0, r.output
    [row] = json.loads(r.stdout)["rows"]
    assert row["epsilon"] == "inf" and row["epsilon_upper_bound"] == "inf"
