"""Audit queries (SPEC §2.3): built from template data, plus an offline template search.

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

:func:`search_template` replaces ContextLeak's GEPA/GPT-5 loop: it runs a small
audit per candidate template on trials held out from the real audit (another
seed) and keeps the template with the best audit accuracy.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from importlib import resources
from typing import Sequence

from ctxlite.canaries import Canary
from ctxlite.choices import Choice
from ctxlite.errors import InvalidParameter
from ctxlite.templates import audit_templates

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
    text = cands[index].format(canary=canary.text, canary_label=canary.label,
                               other=other_answer(task, canary, labels), canary_kind=descr)
    return AuditQuery(kind=kind.value, index=index, template=cands[index], text=text)


def injection_query(task: str) -> AuditQuery:
    """The prompt-injection baseline: ask the model to print the examples."""
    data = json.loads(resources.files("ctxlite").joinpath("data", "templates", "injection_templates.json")
                      .read_text(encoding="utf-8"))
    return AuditQuery(kind="injection", index=0, template=data[task], text=data[task])


@dataclass(frozen=True)
class TemplateSearch:
    """Result of :func:`search_template`: accuracy of each candidate, best first chosen."""

    kind: str
    best_index: int
    accuracies: tuple[float, ...]
    trials: int
    seed: int


def search_template(engine, records, settings, *, trials: int = 24, embedder=None, seed_offset: int = 7919) -> TemplateSearch:
    """Pick the query template of ``settings.query`` with the best held-out audit accuracy.

    Each candidate runs a small audit (``trials`` trials, the largest ε of
    ``settings``) under a seed disjoint from the real audit's (``seed +
    seed_offset``), so choosing the template does not look at the trials that
    are later reported. Accuracy is the optimistic audit accuracy of those
    small audits; ties go to the lower index.
    """
    from ctxlite.audit import run_audit  # the audit imports this module

    if trials < 4:
        raise InvalidParameter(f"template search needs >= 4 trials, got {trials}")
    kind = QueryKind.parse(settings.query)
    n = len(candidate_templates(settings.task.value, kind))
    accs = []
    for i in range(n):
        small = replace(settings, template_index=i, trials=trials, seed=settings.seed + seed_offset,
                        epsilons=(max(settings.epsilons),), utility_queries=0)
        report = run_audit(engine, records, small, None, embedder=embedder)
        accs.append(float(report.rows[0]["audit_accuracy"]))
    best = max(range(n), key=lambda i: (accs[i], -i))
    return TemplateSearch(kind=kind.value, best_index=best, accuracies=tuple(accs), trials=trials,
                          seed=settings.seed + seed_offset)
