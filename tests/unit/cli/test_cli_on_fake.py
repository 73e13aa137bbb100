"""The command line's plumbing on the FakeBackend (tests/fake_models.py): a score with a log, a gate and
a JUnit file, its report as HTML and JSON, an audit resumed, and the refusals -- without a model."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from tests.fake_models import use_fake_models

CLASSIFY = str(resources.files("ctxlite").joinpath("data", "classify_sample.jsonl"))
NOTE = "Clinic note. Patient Dana Whitcombe, DOB 04/09/1971, takes lisinopril 10 mg daily."


@pytest.fixture(autouse=True)
def fake(monkeypatch):
    use_fake_models(monkeypatch)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_a_score_writes_its_log_junit_and_report(tmp_path):
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    out, junit, page = tmp_path / "s.jsonl", tmp_path / "s.xml", tmp_path / "s.html"
    score = ["score", "--context", tmp_path / "note.txt", "-q", "What does she take?", "-r", "lisinopril 10 mg"]
    r = run(*score, "--ngram", "4", "--out", out, "--junit", junit, "--json")
    assert r.exit_code == 0, r.output
    first = json.loads(r.stdout)
    assert first["result"]["results"][0]["ngrams"] and junit.is_file()
    assert json.loads(out.read_text().splitlines()[0])["identity"]["engine"]["backend"] == "fake"
    r = run("report", out, "--html", page)
    assert r.exit_code == 0, r.output
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    logged = out.read_text().count('"type": "example"')
    again = run(*score, "--ngram", "4", "--out", out, "--json")  # resumed: nothing scored again
    assert again.exit_code == 0 and json.loads(again.stdout)["result"] == first["result"]
    assert out.read_text().count('"type": "example"') == logged == 1


def test_an_influence_gate_trips_with_exit_8(tmp_path):
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    args = ["score", "--context", tmp_path / "note.txt", "-q", "What?", "-r", "Dana Whitcombe takes lisinopril"]
    r = run(*args, "--ngram", "4", "--fail-above-influence", "0.001")
    assert r.exit_code == 8, r.output


def test_an_audit_refuses_its_log_without_resume_and_continues_with_it(tmp_path):
    out = tmp_path / "a.jsonl"
    args = ["audit", "--data", CLASSIFY, "--trials", "6", "--queries-per-trial", "2", "--reference-runs", "1"]
    args += ["--utility-queries", "0", "--out", out]
    assert run(*args).exit_code == 0
    before = out.read_bytes()
    refused = run(*args)
    assert refused.exit_code != 0 and "--resume" in refused.output and out.read_bytes() == before
    resumed = run(*args, "--resume", "--json")
    assert resumed.exit_code == 0 and out.read_bytes() == before  # finished: no trial ran again
    assert json.loads(resumed.stdout)["rows"]
