"""`ctxlite score` end to end on the default model, bad inputs and resumption."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from ctxlite.cli import main

NOTE = (
    "Clinic note. Patient: Dana Whitcombe, DOB 04/09/1971, MRN 5521-8830, 42 Alder Row, Ketterby. "
    "Prescribed lisinopril 10 mg daily for hypertension; follow up in four weeks."
)


def _run(args, input=None):
    return CliRunner().invoke(main, args, input=input, catch_exceptions=False)


@pytest.fixture
def note(tmp_path):
    p = tmp_path / "note.txt"
    p.write_text(NOTE, encoding="utf-8")
    return p


@pytest.fixture
def data(tmp_path, score_examples):
    p = tmp_path / "data.jsonl"
    rows = [d for d in score_examples if d.get("response")][:3]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


@pytest.mark.model
def test_utility_against_a_reference_answer(note, tmp_path):
    """--answer (one example) and an answer field (--data): every response's ROUGE-L against it, and
    the data set's mean with a bootstrap CI per λ; a changed answer re-scores a logged example."""
    from ctxlite.influence.regurgitation import rouge_l

    answer = "Lisinopril 10 mg once a day for hypertension."
    base = ["score", "--context", str(note), "-q", "What was prescribed?", "-r", "Lisinopril 10 mg daily.", "--doc"]
    r = _run(base + ["--answer", answer])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)["result"]["results"][0]
    assert res["utility"] == {"metric": "rouge_l", **rouge_l(answer, res["response"])} and 0 < res["utility"]["f"] < 1
    assert json.loads(_run(base).stdout)["result"]["results"][0]["utility"] is None
    rows = [
        {"id": f"e{i}", "context": NOTE, "query": "What?", "response": f"Lisinopril {i} mg.", "answer": answer}
        for i in (5, 10)
    ]
    data, log = tmp_path / "a.jsonl", tmp_path / "log.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    r = _run(["score", "--data", str(data), "--doc", "--lam", "1", "--out", str(log)])
    u = json.loads(r.stdout)["summary"]["1.0"]["utility"]
    assert u["examples"] == 2 and u["ci"][0] <= u["mean"] <= u["ci"][1]
    rows[1]["answer"] = "Lisinopril 10 mg."
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    r = _run(["score", "--data", str(data), "--doc", "--lam", "1", "--out", str(log)])
    assert json.loads(r.stdout)["scored"] == ["e10"]
    assert _run(base + ["--answer", " "]).exit_code == 4  # an empty answer is refused


@pytest.mark.model
def test_score_one_example(note):
    r = _run(
        [
            "score",
            "--context",
            str(note),
            "-q",
            "What was prescribed?",
            "-r",
            "Lisinopril 10 mg daily.",
            "--ngram",
            "8",
            "--lam",
            "0.5,1",
        ]
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    res = out["result"]["results"]
    assert [x["lam"] for x in res] == [0.5, 1.0]
    assert res[1]["document_influence"] > res[0]["document_influence"] > 0
    top = res[1]["top_spans"][0]
    assert top["text"] == NOTE[top["char_start"] : top["char_end"]]
    assert out["run"]["engine"]["sha256"].startswith("a5fd3b62")
    assert {"noise_floor", "regurgitation", "token_pmi", "ngrams"} <= set(res[0])


@pytest.mark.model
def test_score_generates_with_cid_from_stdin():
    r = _run(
        [
            "score",
            "--context",
            "-",
            "-q",
            "What was prescribed?",
            "--doc",
            "--max-new-tokens",
            "8",
            "--min-new-tokens",
            "2",
            "--seed",
            "7",
        ],
        input=NOTE,
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)["result"]["results"][0]
    assert res["generated"] and 2 <= len(res["response_ids"]) <= 8 and res["generation"]["seed"] == 7


@pytest.mark.model
def test_score_dataset_summary_and_resume_after_sigint(data, tmp_path):
    """Ctrl-C mid-run keeps finished records; the re-run only scores the rest."""
    out = tmp_path / "scores.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "ctxlite",
        "score",
        "--data",
        str(data),
        "--out",
        str(out),
        "--ngram",
        "64",
        "--null-ablations",
        "0",
    ]
    # a shell that runs the suite in the background starts it with SIGINT ignored, and the child
    # would inherit that: restore the default so Python installs its KeyboardInterrupt handler
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not out.exists() or out.read_text().count("\n") < 2):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    kept = [json.loads(l) for l in out.read_text().splitlines()[1:]]
    assert 1 <= len(kept) < 3
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["scored"]) == 3 - len(kept)
    assert json.loads(r.stdout)["reused"] == [k["key"] for k in kept]
    lines = [json.loads(l) for l in out.read_text().splitlines()]
    assert {k: v for k, v in lines[-1].items() if k != "chain"} == {
        "end": {"examples": [l["key"] for l in lines[1:-1]], "summary": json.loads(r.stdout)["summary"]}
    }
    assert lines[-1]["chain"] == json.loads(r.stdout)["log_head"]  # the resumed run continued the chain
    lines = lines[:-1]  # the end line: the run finished
    assert lines[0]["type"] == "score-run" and len({l["key"] for l in lines[1:]}) == 3 == len(lines) - 1
    assert [l["result"] for l in lines[1 : len(kept) + 1]] == [k["result"] for k in kept]
    summary = json.loads(r.stdout)["summary"]["1.0"]
    assert summary["examples"] == 3 and summary["document_influence"]["ci"][0] <= summary["document_influence"]["mean"]


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--lam", "-0.5"], 2, "must be >= 0"),
        (["--epsilon", "0"], 2, "epsilon"),
        (["--epsilon", "1", "--top-p", "0.9"], 2, "--top-k / --top-p would drop tokens"),
        (["--epsilon", "1", "--top-k", "5"], 2, "--top-k / --top-p would drop tokens"),
        (["--temperature", "0"], 2, "temperature"),
        (["--stride", "9", "--ngram", "8"], 2, "stride"),
        (["--context-sizes", "32.5"], 2, "whole number"),
    ],
)
def test_bad_parameters_exit_2(note, args, code, message):
    r = _run(["score", "--context", str(note), "-q", "x"] + args)
    assert r.exit_code == code and message in r.output.lower() + r.stderr.lower()


def _err(r):
    return r.stderr if hasattr(r, "stderr") else r.output


@pytest.mark.parametrize(
    "content, code, message",
    [
        (b"", 4, "no records"),
        (b'{"context": "fine", "query": "q"}\n{"context": oops}\n', 4, ":2: malformed json"),
        (b'{"query": "no context"}\n', 4, ":1: field 'context' is missing"),
        (b'{"context": "caf\xe9"}\n', 4, "not utf-8"),
        (b'{"context": "   ", "query": "q"}\n', 4, "missing or empty"),
    ],
)
def test_bad_data_exit_4_with_line_numbers(tmp_path, content, code, message):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(content)
    r = _run(["score", "--data", str(p)])
    assert r.exit_code == code, r.output
    assert message in r.output.lower()


def test_missing_model_exit_3(note, tmp_path):
    r = _run(["score", "--context", str(note), "-q", "x", "-m", str(tmp_path / "nope.gguf")])
    assert r.exit_code == 3 and "model file not found" in r.output


def test_not_a_gguf_exit_3(note, tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    r = _run(["score", "--context", str(note), "-q", "x", "-m", str(fake)])
    assert r.exit_code == 3 and "not a GGUF" in r.output


def test_empty_context_exit_4(tmp_path):
    p = tmp_path / "empty.txt"
    p.write_text("  \n", encoding="utf-8")
    r = _run(["score", "--context", str(p), "-q", "x"])
    assert r.exit_code == 4 and "context is empty" in r.output


@pytest.mark.model
def test_context_longer_than_window_exit_5(note):
    r = _run(["score", "--context", str(note), "-q", "x", "-r", "y", "-c", "32"])
    assert r.exit_code == 5 and "context window is 32 tokens" in r.output


@pytest.mark.model
def test_ngram_larger_than_context_exit_2(note):
    r = _run(["score", "--context", str(note), "-q", "x", "-r", "y", "--ngram", "500"])
    assert r.exit_code == 2 and "larger than the context" in r.output


def test_usage_errors(note):
    assert _run(["score"]).exit_code == 2
    assert _run(["score", "--context", str(note), "--data", str(note)]).exit_code == 2
