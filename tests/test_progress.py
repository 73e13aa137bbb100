"""The progress line (``ctxlite/cli/progress.py``): counts, rate and ETA on a terminal's stderr,
nothing at all on a pipe or with ``ctxlite -q``. The command tests run the real CLI on the
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
    audit = ["audit", "--data", "ctxlite/data/classify_sample.jsonl", "--trials", "8", "--shots", "4"]
    audit += ["--queries-per-trial", "4", "--utility-queries", "0", "--reference-runs", "2"]
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
    code, err = _run(["-q", *args], tty=True)
    assert code == 0, err
    assert counter not in err and "ETA" not in err and "\r" not in err.replace("\r\n", "\n")
    code, err = _run(args, tty=False)
    assert code == 0, err
    assert "ETA" not in err and "\r" not in err and "\x1b" not in err
