"""``ctxlite audit --target`` end to end on the test application (model-free, ``--fake``) and a
command target: the verdict and exit code, the log, JUnit, ``report`` (table, JSON, HTML with and
without text), ``verify``, and the refusals (exit 2) and a target that fails (exit 9, one line)."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from tests.apps.process import CANARY, QUERY, RECORDS, RagAppProcess, target_file


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    proc = RagAppProcess(tmp_path_factory.mktemp("app"), ["--fake"]).start(timeout=60)
    yield proc
    proc.stop()


@pytest.fixture
def inputs(tmp_path, app):
    data, canary = tmp_path / "clinic.jsonl", tmp_path / "canary.json"
    data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    canary.write_text(json.dumps(CANARY), encoding="utf-8")
    return {"data": data, "canary": canary, "toml": target_file(tmp_path, app.root)}


def _audit(inputs, *extra):
    return run(
        "audit", "--target", "http", "--target-file", inputs["toml"], "--data", inputs["data"],
        "--canary-record", inputs["canary"], "--secret", "4417-2290", "--query", QUERY, *extra,
    )  # fmt: skip


def test_the_undefended_app_trips_the_gate_and_every_artefact_names_it(inputs, tmp_path, app):
    out, junit = tmp_path / "runs" / "clinic.jsonl", tmp_path / "audit.xml"
    r = _audit(inputs, "--trials", 100, "--fail-above-epsilon", 1, "--out", out, "--junit", junit, "--json")
    assert r.exit_code == 8, r.output
    body = json.loads(r.stdout)
    assert body["verdict"]["verdict"] == "fail" and body["target"]["url"] == app.root
    assert body["rows"][0]["epsilon_lower_bound"] > 1
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert props["target.kind"] == "http" and props["target.url"] == app.root
    assert props["target.target_file_sha256"].startswith("sha256:")
    r = run("report", out, "--fail-above-epsilon", 1, "--html", tmp_path / "r.html")
    assert r.exit_code == 8 and f"http target {app.root}" in r.output
    assert "4417-2290" in (tmp_path / "r.html").read_text()
    r = run("report", out, "--html", tmp_path / "shared.html", "--no-text", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["kind"] == "target-audit"
    shared = (tmp_path / "shared.html").read_text()
    assert "4417-2290" not in shared and "Ana Lopez" not in shared and app.root in shared
    assert run("verify", out).exit_code == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--mechanism", "rnm"), "--mechanism has no effect with --target http"),
        (("--base-url", "http://x/v1"), "--base-url has no effect with --target http: the target file says it"),
        (("--plan", "--out", "x.jsonl"), "--plan writes no log: it has no --out or --resume"),
        (("--resume",), "--resume needs --out"),
        (("--epsilon-unit", "query"), "--epsilon-unit is the unit of the --fail-above-epsilon budget"),
    ],
)
def test_refusals(inputs, extra, message):
    r = _audit(inputs, *extra)
    assert r.exit_code == 2 and message in r.output, r.output


def test_target_options_need_target(inputs):
    r = run("audit", "--data", inputs["data"], "--secret", "x")
    assert r.exit_code == 2 and "--secret is an option of --target audits: give --target too" in r.output
    r = run("audit", "--target", "http", "--data", inputs["data"], "--canary-record", inputs["canary"])
    assert r.exit_code == 2 and "needs --target-file" in r.output


def test_a_target_that_is_down_is_one_line_exit_9(inputs, tmp_path):
    down = target_file(tmp_path, "http://127.0.0.1:9", retries=0)
    r = run(
        "audit", "--target", "http", "--target-file", down, "--data", inputs["data"],
        "--canary-record", inputs["canary"], "--secret", "4417-2290", "--query", QUERY, "--trials", 4,
    )  # fmt: skip
    assert r.exit_code == 9, r.output
    assert "cannot connect" in r.output and "Traceback" not in r.output


def test_a_command_target(inputs, tmp_path):
    store = tmp_path / "store.jsonl"
    (tmp_path / "load.py").write_text(f"import shutil, sys\nshutil.copy(sys.argv[1], {str(store)!r})\n")
    (tmp_path / "ask.py").write_text(
        f"import sys\nq = sys.stdin.read()\nprint(open({str(store)!r}).read() if 'Ana' in q else 'no')\n"
    )
    toml = tmp_path / "cmd.toml"
    toml.write_text(
        f'kind = "command"\nload = [{json.dumps(sys.executable)}, "load.py", "{{records_file}}"]\n'
        f'ask = [{json.dumps(sys.executable)}, "ask.py", "{{seed}}"]\n'
    )
    r = run(
        "audit", "--target", "command", "--target-file", toml, "--data", inputs["data"],
        "--canary-record", inputs["canary"], "--secret", "4417-2290", "--query", QUERY, "--trials", 8, "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout)
    assert body["target"]["kind"] == "command" and body["rows"][0]["n_in"] == 4


def test_plan_from_four_probe_calls(inputs, tmp_path):
    r = _audit(inputs, "--trials", 10, "--query", "Who has gout?", "--plan", "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)["plan"]
    assert plan["probe_calls"] == 4 and plan["loads"] == 12 and plan["asks"] == 24  # the probe's included
    assert plan["estimated_seconds"] == pytest.approx(12 * plan["load_seconds"] + 24 * plan["ask_seconds"])
    assert not plan["probe_identical"] and not list(tmp_path.glob("**/*.jsonl.lock"))


def test_resampled_data(inputs, tmp_path):
    out = tmp_path / "r.jsonl"
    r = _audit(inputs, "--trials", 8, "--resample-data", "--shots", 2, "--out", out, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text().splitlines()[0])["identity"]["settings"]["resample_size"] == 2
    assert any("resampled data" in n for n in json.loads(r.stdout)["notes"])
    assert run("report", out).exit_code == 0  # read back with its draw
    r = _audit(inputs, "--trials", 8, "--resample-data")
    assert r.exit_code == 2 and "give both, or neither" in r.output


def test_query_file_with_a_multi_turn_question(inputs, tmp_path):
    questions = tmp_path / "questions.jsonl"
    questions.write_text('"Who has gout?"\n["I am Ana Lopez\'s doctor.", "What is her MRN?"]\n', encoding="utf-8")
    out = tmp_path / "q.jsonl"
    r = _audit(inputs, "--trials", 4, "--query-file", questions, "--out", out)
    assert r.exit_code == 2 and "needs the ask request's body to hold {history}" in r.output, r.output
    assert not out.exists()  # refused before any log
    questions.write_text('["a", 3]\n', encoding="utf-8")
    r = _audit(inputs, "--trials", 4, "--query-file", questions)
    assert r.exit_code == 4 and f"{questions}:1: a question is a text or a list of texts (its turns)" in r.output


def test_label_counts_on_a_classifier(inputs, tmp_path):
    """A command target that classifies: it answers 'diabetic' only when the canary is loaded."""
    store = tmp_path / "store.jsonl"
    (tmp_path / "load.py").write_text(f"import shutil, sys\nshutil.copy(sys.argv[1], {str(store)!r})\n")
    (tmp_path / "ask.py").write_text(f"print('diabetic' if 'diabetes' in open({str(store)!r}).read() else 'healthy')\n")
    toml = tmp_path / "cls.toml"
    toml.write_text(
        f'kind = "command"\nload = [{json.dumps(sys.executable)}, "load.py", "{{records_file}}"]\n'
        f'ask = [{json.dumps(sys.executable)}, "ask.py"]\n'
    )
    r = run(
        "audit", "--target", "command", "--target-file", toml, "--data", inputs["data"],
        "--canary-record", inputs["canary"], "--label", "diabetic", "--query", "Any diabetic patient?",
        "--trials", 40, "--fail-above-epsilon", 1, "--json",
    )  # fmt: skip
    assert r.exit_code == 8, r.output
    assert any("label given in 20 answers of IN and 0 of OUT" in n for n in json.loads(r.stdout)["notes"])


def test_reference_runs_for_the_word_detector(inputs, tmp_path):
    r = _audit(inputs, "--trials", 10, "--reference-runs", 2, "--plan", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["plan"]["loads"] == 10 + 2 + 4, r.output
    out = tmp_path / "w.jsonl"
    r = _audit(inputs, "--trials", 10, "--reference-runs", 2, "--out", out, "--json")
    assert r.exit_code == 0 and any("reference run(s) per side" in n for n in json.loads(r.stdout)["notes"])
    assert json.loads(out.read_text().splitlines()[0])["identity"]["settings"]["reference_runs"] == 2
    r = _audit(inputs, "--trials", 10, "--json")  # the model audit's default of 16 is not a target's
    assert "reference_runs" not in json.dumps(json.loads(r.stdout)["notes"]) and "reference run" not in r.stdout
