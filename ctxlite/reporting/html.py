"""A run's self-contained offline HTML report, written owner-only (it holds the private text)."""

from __future__ import annotations

import os

from ctxlite.reporting.audit_page import audit_html
from ctxlite.reporting.page import write_private
from ctxlite.reporting.score_page import score_html
from ctxlite.runs.audit import AuditRun
from ctxlite.runs.score import ScoreRun


def html(run: ScoreRun | AuditRun, no_text: bool = False) -> str:
    """The report page of a run read from its log (``no_text``: private text only by position,
    length and hash, a shareable report)."""
    return score_html(run, no_text) if isinstance(run, ScoreRun) else audit_html(run, no_text)


def write_html(path: str | os.PathLike, run: ScoreRun | AuditRun, no_text: bool = False) -> None:
    """:func:`html` written to ``path`` atomically, mode 0600."""
    write_private(path, html(run, no_text))


__all__ = ["html", "write_html"]
