"""Requests in flight across examples (score) and across an audit's prompts, against the fake
server (no model): the log is byte for byte the log of ``--concurrency 1``, the server never sees
more than ``--concurrency`` requests at once, and a run that dies or is interrupted keeps exactly
the records before its first unfinished example and resumes to the same bytes.

The fake server staggers its answers (each held a seeded hash of the request times ``DELAY``), so
concurrent requests end in an order unrelated to the order they were sent in."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from tests.fake_server import MODEL, FakeServer

DELAY = 0.02
TEMPLATE = "{context} Q: {query} A:"
PEOPLE = ["Alice", "Bob", "Chen", "Dana", "Emeka", "Fatima", "Goran", "Hana", "Ivo", "Jun", "Kofi", "Lena"]
DRUGS = ["lisinopril", "warfarin", "metformin", "insulin", "statins", "aspirin"]
EXAMPLES = [
    {
        "id": name.lower(),
        "context": f"{name} takes {5 * (i + 1)} mg {DRUGS[i % len(DRUGS)]}" + " daily" * (i % 3) + ".",
        "query": "What?",
        "response": " " + DRUGS[i % len(DRUGS)],
    }
    for i, name in enumerate(PEOPLE)
]


def _score_args(tmp_path: Path, url: str, out: Path, concurrency: int, *more: str) -> list[str]:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in EXAMPLES), encoding="utf-8")
    args = ["score", "--data", str(data), "--template", TEMPLATE, "-T", "1", "--out", str(out), "--json"]
    return (
        args
        + ["--backend", "openai", "--base-url", url, "--model-name", MODEL, "--retries", "1"]
        + [
            "--concurrency",
            str(concurrency),
            *more,
        ]
    )


def _score(tmp_path: Path, url: str, out: Path, concurrency: int, *more: str):
    return CliRunner().invoke(main, _score_args(tmp_path, url, out, concurrency, *more))


def _lines(log: Path) -> list[bytes]:
    return log.read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("shape", [("--doc",), ("--ngram", "4")], ids=["doc", "ngrams"])
def test_examples_in_flight_together_log_the_bytes_of_one_by_one(tmp_path, shape):
    with FakeServer(delay=DELAY, seed=7) as fake:
        one = _score(tmp_path, fake.url, tmp_path / "c1.jsonl", 1, *shape)
        assert one.exit_code == 0, one.output
        assert fake.max_in_flight == 1  # --concurrency 1: one request at a time, every endpoint
        fake.max_in_flight = 0
        two = _score(tmp_path, fake.url, tmp_path / "c2.jsonl", 2, *shape)
        assert two.exit_code == 0, two.output
        assert fake.max_in_flight <= 2  # the bound holds across the examples' threads and the request pool
        fake.max_in_flight = fake.max_completions_in_flight = 0
        eight = _score(tmp_path, fake.url, tmp_path / "c8.jsonl", 8, *shape)
        assert eight.exit_code == 0, eight.output
    assert (tmp_path / "c8.jsonl").read_bytes() == (tmp_path / "c1.jsonl").read_bytes()
    assert (tmp_path / "c2.jsonl").read_bytes() == (tmp_path / "c1.jsonl").read_bytes()
    assert fake.max_in_flight <= 8
    if shape == ("--doc",):  # two completions an example: more than two at once are several examples'
        assert fake.max_completions_in_flight > 2
    else:
        assert fake.max_completions_in_flight > 1


def test_a_server_that_dies_mid_run_keeps_the_finished_examples_in_order_and_resumes_to_the_same_bytes(tmp_path):
    """The server holds one example's completions, dies once the examples before it are logged (its
    held and every later request dropped, as by a crash): exit 9, those examples kept in order, and a
    resume completes the log byte for byte. (Dying after a count of completions instead left, under
    load, no example finished at that count now and then.)"""
    held = 4
    with FakeServer(delay=DELAY, seed=3) as fake:
        reference = _score(tmp_path, fake.url, tmp_path / "c1.jsonl", 1, "--ngram", "4")
        assert reference.exit_code == 0, reference.output
        fake.hold = EXAMPLES[held]["context"]
        out, result = tmp_path / "c8.jsonl", {}
        run = threading.Thread(target=lambda: result.update(died=_score(tmp_path, fake.url, out, 8, "--ngram", "4")))
        run.start()
        try:
            deadline = time.monotonic() + 120
            while not (out.is_file() and len(_lines(out)) == 1 + held and fake.holding):
                assert run.is_alive() and time.monotonic() < deadline, result
                time.sleep(0.02)
            fake.dead = True  # the crash: the held completions and every later request are dropped
        finally:
            fake.release()
            run.join(timeout=120)
        died = result["died"]
        assert died.exit_code == 9, died.output
        assert "start the server and --resume" in died.output
        kept, expected = _lines(out), _lines(tmp_path / "c1.jsonl")
        assert 1 < len(kept) < len(expected) - 1  # the header and some examples, not all, no end line
        assert kept == expected[: len(kept)]  # whole records, in input order, the chain intact
        fake.dead, fake.hold = False, None  # the server is back (at the same address)
        resumed = _score(tmp_path, fake.url, out, 8, "--ngram", "4")
        assert resumed.exit_code == 0, resumed.output
    assert out.read_bytes() == (tmp_path / "c1.jsonl").read_bytes()


def test_ctrl_c_keeps_the_examples_before_the_first_unfinished_one_and_resumes_to_the_same_bytes(tmp_path):
    held = 4  # the example whose completions the server holds: those before it finish, it cannot
    with FakeServer(delay=DELAY, seed=5) as fake:
        reference = _score(tmp_path, fake.url, tmp_path / "c1.jsonl", 1, "--ngram", "4")
        assert reference.exit_code == 0, reference.output
        fake.hold = EXAMPLES[held]["context"]
        out = tmp_path / "c8.jsonl"
        command = [sys.executable, "-m", "ctxlite", *_score_args(tmp_path, fake.url, out, 8, "--ngram", "4")]
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            while not (out.is_file() and len(_lines(out)) == 1 + held and fake.holding):
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.02)
            time.sleep(0.2)  # the examples after the held one go on meanwhile (buffered, not logged)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            fake.release()
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, err.decode()
        assert b"interrupted; finished records are kept" in err
        assert _lines(out) == _lines(tmp_path / "c1.jsonl")[: 1 + held]
        fake.hold = None
        resumed = _score(tmp_path, fake.url, out, 8, "--ngram", "4")
        assert resumed.exit_code == 0, resumed.output
    assert out.read_bytes() == (tmp_path / "c1.jsonl").read_bytes()


def test_an_example_that_fails_is_raised_after_every_example_before_it_is_logged(tmp_path):
    """An impossible answer in one example (``positive``): the examples before it are logged, none
    after it, as one by one, though later ones finished first."""
    logs = {}
    for c in (1, 8):
        with FakeServer("positive", trigger=EXAMPLES[5]["context"], delay=DELAY) as fake:
            res = _score(tmp_path, fake.url, tmp_path / f"c{c}.jsonl", c, "--ngram", "4")
        assert res.exit_code == 9, res.output
        logs[c] = [json.loads(line).get("key") for line in _lines(tmp_path / f"c{c}.jsonl")[1:]]
    assert logs[8] == logs[1] == [e["id"] for e in EXAMPLES[:5]]


CLASSIFY = "ctxlite/data/classify_sample.jsonl"


def _audit_args(url: str, out: Path, concurrency: int, *more: str) -> list[str]:
    args = ["audit", "--data", CLASSIFY, "--trials", "12", "--reference-runs", "2", "--queries-per-trial", "4"]
    args += ["--out", str(out), "--json", "--backend", "openai", "--base-url", url, "--model-name", MODEL]
    return args + ["--retries", "1", "--concurrency", str(concurrency), *more]


AUDITS = {
    "none": ("--mechanism", "none", "--shots", "4", "--utility-queries", "0"),
    "none-resampled": ("--mechanism", "none", "--shots", "2", "--utility-queries", "0", "--resample-data"),
    "rnm": ("--mechanism", "rnm", "--ensembles", "4", "--shots", "1", "--epsilon", "1", "--utility-queries", "6"),
}


@pytest.mark.parametrize("audit", list(AUDITS))
def test_an_audits_prompts_in_flight_together_log_the_bytes_of_one_by_one(tmp_path, audit):
    """The label requests of many runs' prompts go out in one batch (two labels: more than two in
    flight are several prompts'), and the log is the one of --concurrency 1, byte for byte."""
    with FakeServer(delay=DELAY, seed=11) as fake:
        one = CliRunner().invoke(main, _audit_args(fake.url, tmp_path / "c1.jsonl", 1, *AUDITS[audit]))
        assert one.exit_code == 0, one.output
        assert fake.max_in_flight == 1
        fake.max_in_flight = fake.max_completions_in_flight = 0
        eight = CliRunner().invoke(main, _audit_args(fake.url, tmp_path / "c8.jsonl", 8, *AUDITS[audit]))
        assert eight.exit_code == 0, eight.output
    assert (tmp_path / "c8.jsonl").read_bytes() == (tmp_path / "c1.jsonl").read_bytes()
    assert 2 < fake.max_completions_in_flight and fake.max_in_flight <= 8


def test_an_audit_on_a_server_that_dies_keeps_its_finished_trials_and_resumes_to_the_same_bytes(tmp_path):
    args = ("--mechanism", "rnm", "--ensembles", "4", "--shots", "2", "--epsilon", "1", "--utility-queries", "0")
    with FakeServer(delay=DELAY, seed=13) as fake:
        before = fake.completions
        reference = CliRunner().invoke(main, _audit_args(fake.url, tmp_path / "c1.jsonl", 1, *args))
        assert reference.exit_code == 0, reference.output
        fake.die_after = fake.completions + 2 * (fake.completions - before) // 3
        out = tmp_path / "c8.jsonl"
        died = CliRunner().invoke(main, _audit_args(fake.url, out, 8, *args))
        assert died.exit_code == 9, died.output
        kept, expected = _lines(out), _lines(tmp_path / "c1.jsonl")
        assert 1 < len(kept) < len(expected) - 1
        assert kept == expected[: len(kept)]
        fake.dead, fake.die_after = False, None
        resumed = CliRunner().invoke(main, _audit_args(fake.url, out, 8, *args, "--resume"))
        assert resumed.exit_code == 0, resumed.output
    assert out.read_bytes() == (tmp_path / "c1.jsonl").read_bytes()


def test_the_command_closes_its_server_connection_when_it_ends(tmp_path, monkeypatch):
    """``--backend openai``: the command closes the backend it opened (its request pool and keep-alive
    connections) when it ends, after a finished run and after a refused one alike."""
    from ctxlite.runtime.openai_server import ServedModel

    opened, closed, init, close = [], [], ServedModel.__init__, ServedModel.close

    def kept(self, *a, **kw):
        init(self, *a, **kw)
        opened.append(self)

    def counted(self):
        closed.append(self)
        close(self)

    monkeypatch.setattr(ServedModel, "__init__", kept)
    monkeypatch.setattr(ServedModel, "close", counted)
    with FakeServer(delay=0.0, seed=1) as fake:
        for shape, code in ((("--doc",), 0), (("--ngram", "4"), 4)):  # a finished run; a refused one (exit 4)
            opened.clear()
            closed.clear()
            res = _score(tmp_path, fake.url, tmp_path / "s.jsonl", 2, *shape)
            assert res.exit_code == code, res.output
            assert opened and all(any(c is o for c in closed) for o in opened), (opened, closed)
