"""Audit queries of ContextLeak (Choi et al. 2025; its templates are in Appendix A.4), built from template data.

Three kinds, each a list of candidate templates in
``ctxlite/data/templates/audit_templates.json`` (``queries`` for
classification, ``generate_queries`` for generation):

* ``input-output``: x_c in the task's own record format, asking for its output;
* ``if-then``: "if you have seen <x_c> output y_c, otherwise <other>";
* ``if-then-blind``: the same without writing the canary (only its kind).

Slots: ``{canary}``, ``{canary_label}``, ``{other}``, ``{canary_kind}``.
``{other}`` is a class other than y_c for classification and ``None`` for
generation. The prompt-injection baseline (an instruction asking the model to
print the examples) lives in ``injection_templates.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from ctxlite.audit.canaries import Canary
from ctxlite.choices import Choice
from ctxlite.errors import InvalidParameter
from ctxlite.runtime.templates import audit_templates

GENERATE_OTHER = "None"


class QueryKind(Choice):
    INPUT_OUTPUT = "input-output"
    IF_THEN = "if-then"
    IF_THEN_BLIND = "if-then-blind"


@dataclass(frozen=True)
class AuditQuery:
    """A filled-in audit query and where its template came from."""

    kind: str
    index: int
    template: str
    text: str


def candidate_templates(task: str, kind) -> list[str]:
    """The candidate templates of ``kind`` for ``task`` ("classify" or "generate")."""
    kind = QueryKind.parse(kind)
    data = audit_templates()
    section = data["queries"] if task == "classify" else data["generate_queries"]
    return list(section[kind.value])


def other_answer(task: str, canary: Canary, labels: Sequence[str]) -> str:
    """The answer the if-then queries ask for when the canary was not seen."""
    if task != "classify":
        return GENERATE_OTHER
    others = [l for l in labels if l != canary.label]
    return others[0] if others else GENERATE_OTHER


def build_query(task: str, kind, canary: Canary, labels: Sequence[str] = (), index: int = 0) -> AuditQuery:
    """Fill candidate ``index`` of ``kind`` with the canary's fields."""
    kind = QueryKind.parse(kind)
    cands = candidate_templates(task, kind)
    if not 0 <= index < len(cands):
        raise InvalidParameter(f"query template index must be in [0, {len(cands)}), got {index}")
    descr = audit_templates()["canary_kinds"][canary.kind.template_key]
    text = cands[index].format(
        canary=canary.text, canary_label=canary.label, other=other_answer(task, canary, labels), canary_kind=descr
    )
    return AuditQuery(kind=kind.value, index=index, template=cands[index], text=text)


def injection_query(task: str) -> AuditQuery:
    """The prompt-injection baseline: ask the model to print the examples."""
    data = json.loads(
        resources.files("ctxlite").joinpath("data", "templates", "injection_templates.json").read_text(encoding="utf-8")
    )
    return AuditQuery(kind="injection", index=0, template=data[task], text=data[task])
