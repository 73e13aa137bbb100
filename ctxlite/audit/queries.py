"""Audit queries of ContextLeak (Choi et al. 2025; its templates are in Appendix A.4), built from the format.

Three kinds, each a list of candidates for the *input* of the format's query record (the record
cut before its output), optionally after a lead line; the bundled candidates per task are in
``ctxlite/data/templates/audit_templates.json``, and a format may bring its own:

* ``input-output``: x_c in the deployment's own record format, asking for its output;
* ``if-then``: "if you have seen <x_c> output y_c, otherwise <other>";
* ``if-then-blind``: the same without writing the canary (only its kind).

Slots: ``{canary}``, ``{canary_label}``, ``{other}``, ``{canary_kind}``. ``{other}`` is a class
other than y_c for classification and ``None`` for generation. The prompt-injection baseline
(an input asking the model to print the examples) is the format's ``injection``. Fields of the
query record other than the input come from ``extras`` (the record the canary replaces).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ctxlite.audit.canaries import Canary
from ctxlite.audit.formats import AuditFormat, Task
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

    def to_dict(self) -> dict:
        return {"kind": self.kind, "index": self.index, "template": self.template, "text": self.text}

    @classmethod
    def from_dict(cls, d: dict) -> AuditQuery:
        return cls(d["kind"], d["index"], d["template"], d["text"])


def candidate_templates(fmt: AuditFormat, kind) -> list[dict]:
    """The candidate query inputs (``{"input": ..., "lead": ...}``) of ``kind`` for ``fmt``."""
    return fmt.query_candidates(QueryKind.parse(kind).value)


def other_answer(fmt: AuditFormat, canary: Canary) -> str:
    """The answer the if-then queries ask for when the canary was not seen."""
    if fmt.task is not Task.CLASSIFY:
        return GENERATE_OTHER
    others = [l for l in fmt.labels if l != canary.label]
    return others[0] if others else GENERATE_OTHER


def _ask(fmt: AuditFormat, lead: str, text: str, extras: Mapping | None) -> str:
    fields = {k: "" for k in fmt.fields}
    fields.update({k: v for k, v in (extras or {}).items() if k in fields})
    fields[fmt.input] = text
    return lead + fmt.query_for(fields)


def build_query(fmt: AuditFormat, kind, canary: Canary, index: int = 0, extras: Mapping | None = None) -> AuditQuery:
    """Fill candidate ``index`` of ``kind`` with the canary's fields, in ``fmt``'s query record."""
    kind = QueryKind.parse(kind)
    cands = candidate_templates(fmt, kind)
    if not 0 <= index < len(cands):
        raise InvalidParameter(f"query template index must be in [0, {len(cands)}), got {index}")
    descr = audit_templates()["canary_kinds"][canary.kind.template_key]
    cand = cands[index]
    text = cand["input"].format(
        canary=canary.text, canary_label=canary.label, other=other_answer(fmt, canary), canary_kind=descr
    )
    template = _ask(fmt, cand["lead"], cand["input"], extras)
    return AuditQuery(kind=kind.value, index=index, template=template, text=_ask(fmt, cand["lead"], text, extras))


def injection_query(fmt: AuditFormat, extras: Mapping | None = None) -> AuditQuery:
    """The prompt-injection baseline: ask the model to print the examples."""
    text = _ask(fmt, "", fmt.injection_input(), extras)
    return AuditQuery(kind="injection", index=0, template=text, text=text)
