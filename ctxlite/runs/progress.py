"""How a run tells its caller how far it is and what it must know: the :class:`Progress` protocol.

The library never prints. A run calls ``step`` for its outer count (examples), ``tick`` for the
inner one (a scored example's ablations, an audit's reference runs and trials) and ``note`` for a
line a person must read (an input that changed since it was logged, a search that measured every
window, a warning about a re-reported log). The command line's progress line implements it
(``ctxlite.cli.progress.ProgressLine``); :class:`Silent` is the default. Every note is also kept
in the run's result (``ScoreRun.notes``, ``AuditRun.notes``).
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable


@runtime_checkable
class Progress(Protocol):
    """What a run reports as it goes."""

    def step(self, label: str, done: int, total: int, detail: str = "") -> None:
        """The outer count: ``done`` of ``total`` finished, ``detail`` naming the one in progress."""

    def tick(self, label: str, done: int, total: int) -> None:
        """The inner count of the current step (e.g. ablations of one example)."""

    def note(self, message: str) -> None:
        """A line for a person (private text in it is shown as the caller chooses)."""


class Silent:
    """A :class:`Progress` that shows nothing."""

    def step(self, label: str, done: int, total: int, detail: str = "") -> None:
        pass

    def tick(self, label: str, done: int, total: int) -> None:
        pass

    def note(self, message: str) -> None:
        pass


class Serialized:
    """A :class:`Progress` whose calls take turns (one lock): a score run's examples in flight on
    several threads tick it while the run steps it."""

    def __init__(self, progress: Progress):
        self.progress, self._lock = progress, threading.Lock()

    def step(self, label: str, done: int, total: int, detail: str = "") -> None:
        with self._lock:
            self.progress.step(label, done, total, detail)

    def tick(self, label: str, done: int, total: int) -> None:
        with self._lock:
            self.progress.tick(label, done, total)

    def note(self, message: str) -> None:
        with self._lock:
            self.progress.note(message)


class Notes:
    """The notes of one run: each is handed to the caller's progress as it is made, and kept."""

    def __init__(self, progress: Progress):
        self.progress, self.kept = progress, []

    def __call__(self, message: str) -> None:
        self.kept.append(message)
        self.progress.note(message)
