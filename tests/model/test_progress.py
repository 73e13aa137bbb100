"""The progress line (``ctxlite/cli/progress.py``): counts, rate and ETA on a terminal's stderr,
nothing at all on a pipe or with ``ctxlite --quiet``. The command tests run the real CLI on the
default model with stderr on a pseudo-terminal or a pipe."""

import io
import os
import pty
import subprocess
import sys

import pytest

from ctxlite.cli import progress
from ctxlite.cli.progress import ProgressLine

CONTEXT = "Jane Doe was prescribed 20 units of insulin glargine at bedtime by Dr. Okafor on 3 March.\n"


class Terminal(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_line_shows_both_counts_with_rate_and_eta():
    stream, clock = Terminal(), Clock()
    line = ProgressLine(stream, clock=clock)
    line.step("examples", 0, 3, "ex-1")
    line.tick("ablations", 0, 40)
    clock.now = 2.0
    line.tick("ablations", 10, 40)  # 5 per second, 30 to go: 6 s
    last = stream.getvalue().split("\r\x1b[K")[-1]
    assert last == "examples 0/3 ex-1 | ablations 10/40 5/s ETA 0:06"
    clock.now = 2.05
    line.tick("ablations", 11, 40)  # within the redraw interval: not drawn
    assert stream.getvalue().split("\r\x1b[K")[-1] == last
    line.tick("ablations", 40, 40)  # completion is always drawn
    assert stream.getvalue().endswith("ablations 40/40 19.5/s ETA 0:00")
    clock.now = 3.0
    line.step("examples", 1, 3, "ex-2")  # the next example: a fresh inner count
    assert stream.getvalue().endswith("examples 1/3 0.333/s ETA 0:06 ex-2")
    line.close()
    assert stream.getvalue().endswith("\r\x1b[K")


def test_a_servers_requests_show_in_flight_and_the_observed_rates():
    """``--backend openai``: the line ends with the requests in flight and the rates since the line
    started (requests before it, e.g. the connection probe, do not count); redrawn by ``refresh``."""
    from ctxlite.runtime.openai_server import RequestStats

    stream, clock = Terminal(), Clock()
    stats = [RequestStats(in_flight=0, max_in_flight=1, ended=5, prompt_tokens=40)]
    line = ProgressLine(stream, clock=clock, requests=lambda: stats[-1])
    line.tick("ablations", 0, 8)
    assert stream.getvalue().endswith("ablations 0/8 | requests 0 in flight")
    clock.now = 2.0
    stats.append(RequestStats(in_flight=3, max_in_flight=4, ended=9, prompt_tokens=240))
    line.refresh()  # 4 requests and 200 prompt tokens in 2 s
    assert stream.getvalue().endswith("ablations 0/8 | requests 3 in flight 2/s 100 prompt tok/s")
    clock.now = 2.05
    stats.append(RequestStats(in_flight=2, max_in_flight=4, ended=10, prompt_tokens=300))
    line.refresh()  # within the redraw interval: not drawn
    assert stream.getvalue().endswith("3 in flight 2/s 100 prompt tok/s")
    clock.now = 4.0
    stats.append(RequestStats(in_flight=0, max_in_flight=4, ended=13, prompt_tokens=None))
    line.tick("ablations", 8, 8)  # a server that reports no token counts: no token rate
    assert stream.getvalue().endswith("ablations 8/8 2/s ETA 0:00 | requests 0 in flight 2/s")


def test_the_progress_line_is_the_run_layers_progress_and_says_its_notes(capsys):
    """The command line's progress line is a ``ctxlite.runs.Progress``: a run's notes go to stderr
    through it, their control characters shown as visible escapes, and are kept by the run too."""
    from ctxlite.runs.progress import Notes, Progress, Silent

    line = ProgressLine(stream=io.StringIO(), enabled=False)
    assert isinstance(line, Progress) and isinstance(Silent(), Progress)
    notes = Notes(line)
    notes("id\x1b[2J: its input changed since it was logged")
    assert capsys.readouterr().err == "id␛[2J: its input changed since it was logged\n"
    assert notes.kept == ["id\x1b[2J: its input changed since it was logged"]


def test_nothing_is_drawn_on_a_pipe_or_when_quiet(monkeypatch):
    pipe = io.StringIO()
    line = ProgressLine(pipe)
    line.step("examples", 0, 2)
    line.tick("trials", 5, 10)
    line.close()
    assert pipe.getvalue() == ""
    monkeypatch.setattr(progress, "QUIET", True)
    term = Terminal()
    line = ProgressLine(term)
    line.tick("trials", 5, 10)
    assert term.getvalue() == ""


def _commands(tmp_path):
    ctx = tmp_path / "note.txt"
    ctx.write_text(CONTEXT, encoding="utf-8")
    score = ["score", "--context", str(ctx), "-q", "What was prescribed?", "-r", "Insulin glargine.", "--ngram", "4"]
    score += ["--null-ablations", "0"]  # the progress line, not the floor: fewer decodes, each run twice more
    audit = ["audit", "--data", "ctxlite/data/classify_sample.jsonl", "--trials", "6", "--shots", "4"]
    audit += ["--queries-per-trial", "2", "--utility-queries", "0", "--reference-runs", "1"]
    return {"score": score, "audit": audit}


def _run(args, tty: bool) -> tuple[int, str]:
    """Run ``ctxlite ARGS`` with stderr on a pseudo-terminal (``tty``) or a pipe: (exit code, stderr)."""
    cmd = [sys.executable, "-m", "ctxlite", *args]
    if not tty:
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
        return done.returncode, done.stderr.decode()
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=600), b"".join(chunks).decode(errors="replace")


@pytest.mark.model
@pytest.mark.parametrize("command, counter", [("score", "ablations"), ("audit", "eps=inf trials")])
def test_commands_draw_progress_on_a_terminal_only(tmp_path, command, counter):
    args = _commands(tmp_path)[command]
    code, err = _run(args, tty=True)
    assert code == 0, err
    assert counter in err and "ETA" in err and "\r\x1b[K" in err
    code, err = _run(["--quiet", *args], tty=True)
    assert code == 0, err
    assert counter not in err and "ETA" not in err and "\r" not in err.replace("\r\n", "\n")
    code, err = _run(args, tty=False)
    assert code == 0, err
    assert "ETA" not in err and "\r" not in err and "\x1b" not in err
