"""The command line on a full disk (issue 46, 4): whatever ctxlite must write, a log or standard
output, a full device is exit 7 in one line, no traceback, no stale lock, and the finished records
kept in a log that verifies as partial and resumes. Models are the FakeBackend (in this process) or
the fake server (a subprocess, for the kernel's own file-size limit)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from tests.diskfull import enospc_after, full_tmpfs
from tests.fake_models import use_fake_models
from tests.fake_server import MODEL, FakeServer

EXAMPLES = [
    {"id": "alice", "context": "Alice takes 10 mg lisinopril daily.", "query": "What?", "response": " lisinopril"},
    {"id": "bob", "context": "Bob takes 5 mg amlodipine at night.", "query": "What?", "response": " amlodipine"},
]
REAL_WRITE = os.write


@pytest.fixture
def data(tmp_path) -> Path:
    p = tmp_path / "data.jsonl"
    p.write_text("".join(json.dumps(e) + "\n" for e in EXAMPLES), encoding="utf-8")
    return p


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def score_args(data, out):
    return ["score", "--data", data, "--ngram", "4", "--out", out, "--json"]


def one_line_exit_7(r, why: str = "no space left on the device") -> str:
    err = r.stderr
    assert r.exit_code == 7, (r.exit_code, err, r.exception)
    assert "Traceback" not in err and err.count("ctxlite: error:") == 1 and why in err, err
    return err


def test_a_disk_full_at_start_is_exit_7_and_leaves_no_lock(tmp_path, data, monkeypatch):
    """A real full file system: the lock's PID is the first byte written (a traceback, exit 1 and a
    stale ``.lock`` before)."""
    use_fake_models(monkeypatch)
    with full_tmpfs(tmp_path / "disk") as disk:
        err = one_line_exit_7(run(*score_args(data, disk / "s.jsonl")))
        assert "s.jsonl" in err
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]


@pytest.mark.parametrize("room", ["header", "one record"])
def test_a_disk_filling_mid_run_is_exit_7_and_the_log_verifies_as_partial(tmp_path, data, monkeypatch, room):
    """The disk fills while the second example (or, with room for the header only, the first) is
    written: exit 7 in one line (closing the log re-flushed the line and its OSError replaced the
    exit 7), no lock, the finished records kept, ``verify`` says partial, and a re-run with room
    resumes and finishes."""
    use_fake_models(monkeypatch)
    sizes_from = tmp_path / "sizes.jsonl"
    assert run(*score_args(data, sizes_from)).exit_code == 0
    lines = sizes_from.read_bytes().split(b"\n")
    keep = len(lines[0]) + 1 + (len(lines[1]) + 1 if room == "one record" else 0)
    out = tmp_path / "s.jsonl"
    enospc_after(monkeypatch, out, keep + 100)  # the next line is cut 100 bytes in
    one_line_exit_7(run(*score_args(data, out)))
    assert out.read_bytes() == sizes_from.read_bytes()[:keep] and not Path(f"{out}.lock").exists()
    monkeypatch.setattr(os, "write", REAL_WRITE)  # room again
    v = run("verify", out)
    assert v.exit_code == 0 and "partial (it did not finish)" in v.stderr, v.output
    assert f"{'1' if room == 'one record' else '0'} record(s)" in v.stderr
    again = run(*score_args(data, out))
    assert again.exit_code == 0, again.output
    assert out.read_bytes() == sizes_from.read_bytes()  # the same log, finished


def test_a_file_size_limit_mid_run_in_a_real_process(tmp_path, data):
    """The kernel's own refusal (``ulimit -f``: EFBIG, as ENOSPC on a full disk) in a subprocess,
    as a user meets it: exit 7 in one line, no traceback, no lock, the finished record kept."""
    with FakeServer() as server:
        args = ["score", "--data", str(data), "--template", "{context} Q: {query} A:", "--ngram", "4", "-T", "1",
                "--backend", "openai", "--base-url", server.url, "--model-name", MODEL, "--json"]  # fmt: skip
        first = tmp_path / "first.jsonl"
        command = [sys.executable, "-m", "ctxlite", *args]
        r = subprocess.run([*command, "--out", str(first)], capture_output=True, timeout=300)
        assert r.returncode == 0, r.stderr
        lines = first.read_bytes().split(b"\n")
        limit = len(lines[0]) + len(lines[1]) + 2 + 50
        out = tmp_path / "s.jsonl"

        def limited():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        r = subprocess.run([*command, "--out", str(out)], capture_output=True, timeout=300, preexec_fn=limited)
    err = r.stderr.decode()
    assert r.returncode == 7 and "Traceback" not in err and err.count("ctxlite: error:") == 1, err
    assert "the file would exceed the file-size limit" in err
    assert out.read_bytes() == first.read_bytes()[: len(lines[0]) + len(lines[1]) + 2]
    assert not Path(f"{out}.lock").exists()


# ----- standard output onto a full device or a closed pipe ----------------------------------------
@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> Path:
    """A finished score log (written on the fake server, so a subprocess can read it: no model)."""
    where = tmp_path_factory.mktemp("logged")
    data = where / "data.jsonl"
    data.write_text(json.dumps(EXAMPLES[0]) + "\n", encoding="utf-8")
    with FakeServer() as server:
        out = where / "run.jsonl"
        r = subprocess.run([sys.executable, "-m", "ctxlite", *_served(server, data), "--out", str(out)],
                           capture_output=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out


def _served(server, data) -> list[str]:
    return ["score", "--data", str(data), "--template", "{context} Q: {query} A:", "--ngram", "4", "-T", "1",
            "--backend", "openai", "--base-url", server.url, "--model-name", MODEL]  # fmt: skip


def _to(stdout, args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctxlite", *args], stdout=stdout, stderr=subprocess.PIPE, timeout=300)


def _stdout_failed(r, why: str) -> None:
    err = r.stderr.decode()
    assert r.returncode == 7, (r.returncode, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err.count("ctxlite: error:") == 1 and f"cannot write the standard output: {why}" in err, err


@pytest.mark.parametrize(
    "args",
    [["report", "{log}", "--json"], ["report", "{log}"], ["verify", "{log}"], ["version", "--json"], ["version"],
     ["--help"]],
    ids=["report-json", "report", "verify", "version-json", "version", "help"],
)  # fmt: skip
def test_standard_output_on_a_full_device_is_exit_7_in_one_line(logged, args):
    """The issue's reproducer, ``ctxlite report RUN --json > /dev/full``: a traceback (and Python's own
    'Exception ignored' at exit for output small enough to stay buffered until then)."""
    with open("/dev/full", "w") as full:
        r = _to(full, [a.format(log=logged) for a in args])
    _stdout_failed(r, "no space left on the device")


def test_score_json_on_a_full_device_is_exit_7_and_keeps_the_log(tmp_path, data):
    with FakeServer() as server, open("/dev/full", "w") as full:
        out = tmp_path / "s.jsonl"
        r = _to(full, [*_served(server, data), "--json", "--out", str(out)])
    _stdout_failed(r, "no space left on the device")
    assert out.read_bytes().count(b'"end"') == 1  # the run finished and logged before printing


def test_standard_output_into_a_closed_pipe_is_exit_7_in_one_line(logged):
    read, write = os.pipe()
    os.close(read)
    try:
        r = _to(write, ["report", str(logged), "--json"])
    finally:
        os.close(write)
    _stdout_failed(r, "the reader closed the pipe")
