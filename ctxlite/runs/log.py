"""The ``out`` log of a run: where it is, its chain head, and the end line that finishes it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ctxlite.errors import OutputError
from ctxlite.records import RecordLog


@dataclass(frozen=True)
class LogState:
    """A run's log as it stands: its ``path`` (as given), its chain ``head`` (what ``ctxlite verify
    --head`` checks; None for a log without a chain), whether it is ``chained`` and its complete
    ``lines`` (the header included)."""

    path: str
    head: str | None
    chained: bool = True
    lines: int | None = None

    @classmethod
    def of(cls, log: RecordLog, path: str | os.PathLike) -> LogState:
        return cls(os.fspath(path), log.head)


def finish(log: RecordLog, end: dict, note) -> None:
    """Write the log's end line. A finished log re-reported from a read-only file (nothing new to
    append) keeps its earlier end line: said in a ``note``, not an error."""
    try:
        log.finish(end)
    except OutputError as exc:
        if log.appended:
            raise
        note(f"{log.path}: its end line keeps the earlier run's summary ({exc})")
