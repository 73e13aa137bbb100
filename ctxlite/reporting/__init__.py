"""What people and CI servers read of a run (:class:`~ctxlite.runs.ScoreRun`, :class:`~ctxlite.runs.AuditRun`):
the terminal table (``terminal``), the JSON a command prints (``json_output``), a JUnit file
(``junit``) and one self-contained, offline HTML page (``html``: ``page`` for escaping, redaction,
the CSP and private file writes, ``svg`` for plots from data, ``score_page`` and ``audit_page``).
"""

from ctxlite.reporting.html import html, write_html
from ctxlite.reporting.json_output import report_json
from ctxlite.reporting.junit import write_junit
from ctxlite.reporting.terminal import audit_table, score_table, verdict_line

__all__ = ["audit_table", "html", "report_json", "score_table", "verdict_line", "write_html", "write_junit"]
