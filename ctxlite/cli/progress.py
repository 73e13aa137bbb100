"""Progress on stderr: one line redrawn in place with counts, rate and ETA.

Drawn only when stderr is a terminal and ``ctxlite -q`` was not given, so a pipe, a file or a CI
log gets no progress output at all (messages, warnings and verdicts still go to stderr). The
library reports counts through a plain callback, ``tick(label, done, total)``: the scorer per
ablation, the audit per reference run and trial; the commands add the outer count (examples).
Hand-written rather than ``click.progressbar``: that bar draws one counter, and here the line
holds two (examples, and ablations or trials within one), each with its own rate and ETA.

With ``--backend openai`` the line ends with the server's requests: how many are in flight now,
and the rate observed since the run started, requests/s and (where the server reports
``usage.prompt_tokens``) prompt tokens/s. The backend redraws the line as its requests end, so it
moves while a batch of requests is out (``OpenAIServer.on_request``).
"""

from __future__ import annotations

import sys
import threading
import time

import click

from ctxlite.visible import visible

QUIET = False
"""Set by ``ctxlite -q``: no progress output for this invocation."""

_REDRAW_SECONDS = 0.1
_active: ProgressLine | None = None


def erase() -> None:
    """Erase the progress line before a message is printed (it is redrawn by the next count)."""
    if _active is not None:
        _active.close()


def say(message: str) -> None:
    """A message on stderr (on its own line, below the progress line's last state); the private text
    it quotes (an id, an n-gram) with its control and bidi characters as visible escapes."""
    erase()
    click.echo(visible(message, keep="\n"), err=True)
    sys.stderr.flush()


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0) + 0.5)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class _Counter:
    def __init__(self, label: str, total: int, now: float):
        self.label, self.total, self.done, self.started, self.detail = label, int(total), 0, now, ""

    def text(self, now: float) -> str:
        out = f"{self.label} {self.done}/{self.total}"
        elapsed = now - self.started
        if self.done and elapsed > 0:
            rate = self.done / elapsed
            out += f" {rate:.3g}/s ETA {_clock((self.total - self.done) / rate)}"
        return f"{out} {self.detail}" if self.detail else out


class ProgressLine:
    """The progress line of one command: an outer counter (e.g. examples) and an inner one (the
    ablations or trials of the current step), and the run's notes (:meth:`note`): the
    :class:`ctxlite.runs.Progress` of the command line. ``enabled=None``: on when ``stream`` is a
    terminal and not quiet."""

    def __init__(self, stream=None, enabled: bool | None = None, clock=time.monotonic, requests=None):
        """``requests``: a function returning the server's request counts now (an object with
        ``in_flight``, ``ended`` and ``prompt_tokens``, e.g. ``OpenAIServer.request_stats``), shown
        at the end of the line, or None (local inference)."""
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = not QUIET and bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled, self.clock = enabled, clock
        self.outer: _Counter | None = None
        self.inner: _Counter | None = None
        self._drawn_at = -1e9
        self._shown = False
        self._drawing = threading.Lock()  # a server's requests end on several threads (``refresh``)
        self.requests = requests
        self._requests_from = None  # (time, ended, prompt tokens) when the line started
        if self.enabled:
            global _active
            _active = self
            if requests is not None:
                first = requests()
                self._requests_from = (clock(), first.ended, first.prompt_tokens or 0)

    def step(self, label: str, done: int, total: int, detail: str = "") -> None:
        """The outer counter: ``done`` of ``total`` finished, ``detail`` naming the one in progress
        (a new inner count starts with the next tick)."""
        now = self.clock()
        if self.outer is None or self.outer.label != label or self.outer.total != total:
            self.outer = _Counter(label, total, now)
        self.outer.done, self.outer.detail = int(done), visible(detail)  # an example id: private text
        self.inner = None
        self._draw(now, force=True)

    def tick(self, label: str, done: int, total: int) -> None:
        """The inner counter (the library's callback)."""
        now = self.clock()
        if self.inner is None or self.inner.label != label or self.inner.total != total or done < self.inner.done:
            self.inner = _Counter(label, total, now)
        self.inner.done = int(done)
        self._draw(now, force=done >= total)

    def note(self, message: str) -> None:
        """A note of the run, on stderr (:func:`say`), whether or not the line is drawn."""
        say(message)

    def refresh(self) -> None:
        """Redraw the line with the counts as they are (at most every redraw interval)."""
        self._draw(self.clock(), force=False)

    def _requests_text(self, now: float) -> str | None:
        if self._requests_from is None:
            return None
        stats = self.requests()
        since, ended, tokens = self._requests_from
        out = f"requests {stats.in_flight} in flight"
        elapsed = now - since
        if stats.ended > ended and elapsed > 0:
            out += f" {(stats.ended - ended) / elapsed:.3g}/s"
            if stats.prompt_tokens is not None:
                out += f" {(stats.prompt_tokens - tokens) / elapsed:.3g} prompt tok/s"
        return out

    def close(self) -> None:
        """Erase the line (what is printed next starts on a clean line)."""
        with self._drawing:
            if self.enabled and self._shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            self._shown = False

    def _draw(self, now: float, force: bool) -> None:
        if not self.enabled or (not force and now - self._drawn_at < _REDRAW_SECONDS):
            return
        with self._drawing:
            self._draw_now(now)

    def _draw_now(self, now: float) -> None:
        parts = [c.text(now) for c in (self.outer, self.inner) if c is not None]
        parts += [t for t in [self._requests_text(now)] if t is not None]
        self.stream.write("\r\x1b[K" + " | ".join(parts))
        self.stream.flush()
        self._drawn_at, self._shown = now, True


def progress_line(server=None) -> ProgressLine:
    """The progress line of a command; with a server (``--backend openai``) it shows the server's
    requests and is redrawn as they end."""
    line = ProgressLine(requests=None if server is None else server.request_stats)
    if server is not None and line.enabled:
        server.on_request = line.refresh
    return line
