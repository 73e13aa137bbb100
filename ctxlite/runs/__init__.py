"""The run layer: a ctxlite run is one library call with one result object.

:func:`run_score` and :func:`run_audit` own what a run means (its identity, its log, the lock and
hash chain, resume, the summary, the verdict and the end line); :func:`report_log` builds the same
result from a log alone. The command line calls these and renders their results through
:mod:`ctxlite.reporting`, and so can any program that embeds ctxlite (docs/python-api.md).
"""

from ctxlite.gates import EpsilonGate, InfluenceGate
from ctxlite.runs.audit import AuditRun, TrialScores, plan_audit, run_audit
from ctxlite.runs.log import LogState
from ctxlite.runs.progress import Progress, Silent
from ctxlite.runs.report import report_log, verify_log
from ctxlite.runs.score import ScoreRun, plan_score, run_score, score_identity

__all__ = [
    "AuditRun",
    "EpsilonGate",
    "InfluenceGate",
    "LogState",
    "Progress",
    "ScoreRun",
    "Silent",
    "TrialScores",
    "plan_audit",
    "plan_score",
    "report_log",
    "run_audit",
    "run_score",
    "score_identity",
    "verify_log",
]
