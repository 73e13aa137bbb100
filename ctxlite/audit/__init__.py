"""ContextLeak audits ("ContextLeak: Auditing Leakage in Private In-Context
Learning Methods"): canary membership inference against private in-context learning.

One module per concept: ``settings`` (what defines an audit), ``formats`` (the deployment's prompt
format), ``dataset`` (the private records),
``canaries``, ``queries``, ``mechanisms`` (the defences and DP aggregations), ``oracle`` (the
model's answer distribution), ``continuations``, ``detectors``, ``game`` (the trials),
``report`` (the estimates per ε) and ``template_search``. The names below are imported on first
use, so ``import ctxlite.audit.settings`` (the command line's defaults) stays light.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "Attack": "settings",
    "AuditSettings": "settings",
    "BoundKind": "settings",
    "EstimateSettings": "settings",
    "DetectorKind": "settings",
    "MechanismKind": "settings",
    "Task": "settings",
    "audit_identity": "settings",
    "load_records": "dataset",
    "AuditFormat": "formats",
    "load_format": "formats",
    "run_audit": "game",
    "audit_game": "game",
    "make_mechanism": "game",
    "AuditReport": "report",
    "TemplateSearch": "template_search",
    "search_template": "template_search",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"ctxlite.audit.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'ctxlite.audit' has no attribute {name!r}")
