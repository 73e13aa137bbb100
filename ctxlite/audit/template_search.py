"""Choosing the audit query template offline.

:func:`search_template` stands in for ContextLeak's GEPA/GPT-5 prompt-optimisation loop: it runs
a small audit per candidate template on trials held out from the real audit (another seed) and
keeps the template with the best audit accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ctxlite.audit.formats import load_format
from ctxlite.audit.game import run_audit
from ctxlite.audit.queries import QueryKind, candidate_templates
from ctxlite.errors import InvalidParameter


@dataclass(frozen=True)
class TemplateSearch:
    """Result of :func:`search_template`: accuracy of each candidate, best first chosen."""

    kind: str
    best_index: int
    accuracies: tuple[float, ...]
    trials: int
    seed: int


def search_template(
    engine, records, settings, *, trials: int = 24, embedder=None, seed_offset: int = 7919, fmt=None
) -> TemplateSearch:
    """Pick the query template of ``settings.query`` with the best held-out audit accuracy.

    Each candidate runs a small audit (``trials`` trials, the largest ε of
    ``settings``) under a seed disjoint from the real audit's (``seed +
    seed_offset``), so choosing the template does not look at the trials that
    are later reported. Accuracy is the optimistic audit accuracy of those
    small audits; ties go to the lower index. ``fmt``: the prompt format (see ``run_audit``).
    """
    if trials < 4:
        raise InvalidParameter(f"template search needs >= 4 trials, got {trials}")
    kind = QueryKind.parse(settings.query)
    n = len(candidate_templates(load_format(fmt if fmt is not None else settings.task), kind))
    accs = []
    for i in range(n):
        small = replace(
            settings,
            template_index=i,
            trials=trials,
            seed=settings.seed + seed_offset,
            epsilons=(max(settings.epsilons),),
            utility_queries=0,
        )
        report = run_audit(engine, records, small, None, embedder=embedder, fmt=fmt)
        accs.append(float(report.rows[0].audit_accuracy))
    best = max(range(n), key=lambda i: (accs[i], -i))
    return TemplateSearch(
        kind=kind.value, best_index=best, accuracies=tuple(accs), trials=trials, seed=settings.seed + seed_offset
    )
