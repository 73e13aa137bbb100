"""ContextLeak audits ("ContextLeak: Auditing Leakage in Private In-Context Learning Methods"):
canary membership inference against private in-context learning.

One module per concept: ``settings`` (what defines an audit), ``dataset`` (the private records),
``canaries``, ``queries``, ``mechanisms`` (the defences and DP aggregations), ``oracle`` (the
model's answer distribution), ``continuations``, ``detectors``, ``game`` (the trials),
``report`` (the estimates per ε) and ``template_search``.
"""

from ctxlite.audit.dataset import load_records
from ctxlite.audit.game import run_audit
from ctxlite.audit.report import AuditReport
from ctxlite.audit.settings import Attack, AuditSettings, DetectorKind, MechanismKind, Task, audit_identity
from ctxlite.audit.template_search import TemplateSearch, search_template

__all__ = [
    "Attack",
    "AuditReport",
    "AuditSettings",
    "DetectorKind",
    "MechanismKind",
    "Task",
    "TemplateSearch",
    "audit_identity",
    "load_records",
    "run_audit",
    "search_template",
]
