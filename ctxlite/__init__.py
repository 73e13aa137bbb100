"""ctxlite: how much a language model leaks from the private text in its prompt.

Public API (everything else is an implementation detail; docs/python-api.md)::

    from ctxlite import Engine, InfluenceGate, load_examples, run_score
    with Engine("gemma-3-270m") as eng:
        run = run_score(eng, load_examples("data.jsonl"), out="scores.jsonl", gate=InfluenceGate(5.0))
    run.verdict.outcome, run.summary

A run (:func:`run_score`, :func:`run_audit`, or :func:`report_log` from a log alone) is one call with
one result object, which :mod:`ctxlite.reporting` renders (table, JSON, JUnit, HTML);
:func:`run_target_audit` audits a system by its answers only (any object with ``load(records)``
and ``ask(query, seed)``, or the chat, http or command target :func:`open_target` opens). The scorer and
the audit game are there for one example or one audit without a log (``InfluenceScorer``,
``ctxlite.audit.run_audit``); the estimators need no model (``ctxlite.privacy``).
"""

import importlib

from ctxlite._version import __version__
from ctxlite.errors import (
    ContextOverflow,
    CtxliteError,
    DataError,
    DecodeError,
    InvalidParameter,
    ModelError,
    OutputError,
)

_WHERE = {
    "Engine": "ctxlite.runtime.engine",
    "EngineConfig": "ctxlite.runtime.engine",
    "LocalModel": "ctxlite.runtime.engine",
    "SamplingSettings": "ctxlite.runtime.sampling",
    "Example": "ctxlite.influence.scorer",
    "InfluenceScorer": "ctxlite.influence.scorer",
    "InfluenceSettings": "ctxlite.influence.scorer",
    "load_examples": "ctxlite.influence.dataset",
    "AuditSettings": "ctxlite.audit.settings",
    "EstimateSettings": "ctxlite.audit.settings",
    "load_format": "ctxlite.audit.formats",
    "load_records": "ctxlite.audit.dataset",
    "InfluenceGate": "ctxlite.gates",
    "EpsilonGate": "ctxlite.gates",
    "run_score": "ctxlite.runs.score",
    "run_audit": "ctxlite.runs.audit",
    "report_log": "ctxlite.runs.report",
    "ScoreRun": "ctxlite.runs.score",
    "AuditRun": "ctxlite.runs.audit",
    "Progress": "ctxlite.runs.progress",
    "TargetSettings": "ctxlite.audit.target_game",
    "run_target_audit": "ctxlite.runs.target_audit",
    "TargetAuditRun": "ctxlite.runs.target_audit",
    "open_target": "ctxlite.targets.spec",
}
"""Where each public name lives: imported on first use, so ``import ctxlite`` stays cheap and free of
llama.cpp for the estimators-only users (compliance tools that just post-process logs)."""

__all__ = [
    "__version__",
    "CtxliteError",
    "ContextOverflow",
    "DataError",
    "DecodeError",
    "InvalidParameter",
    "ModelError",
    "OutputError",
    *_WHERE,
]


def __getattr__(name):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'ctxlite' has no attribute {name!r}")
