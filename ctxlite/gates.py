"""Pass/fail verdicts for pipelines: one case per scored example or per audited ε, and a gate.

A compliance job asks one question of a finished run: did the model leak more
than we accept? Two gates answer it on the quantities the papers define:

* score, ``--fail-above-influence Y``: an example fails when some n-gram's
  context influence τ_i = Σ_t |log p(y_t | D) − log p(y_t | D ∖ n-gram)|
  (Context influence, Sec. 3) exceeds Y nats *and* its measured noise floor
  (an n-gram the floor does not separate from re-decoding noise is no finding;
  without a floor, as with ``--exact``, every n-gram counts). A passing verdict
  needs every n-gram measured, so results of adaptive search are refused;
* audit, ``--fail-above-epsilon X``: an ε row fails when its empirical lower
  bound ε_lb exceeds X. ε_lb holds with the audit's confidence (Clopper–Pearson,
  Jagielski et al. 2020), so a trip is evidence, not an estimate.

Messages carry numbers and positions, never the private text: JUnit files end
up in CI dashboards that the data's owners do not control.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ctxlite.errors import InvalidParameter
from ctxlite.outputs import write_atomic
from ctxlite.reporting.labels import epsilon_label
from ctxlite.reporting.visible import visible


@dataclass(frozen=True)
class Case:
    """One verdict: an example (score) or an ε row (audit); ``message`` states the numbers."""

    name: str
    failed: bool
    message: str


@dataclass
class Verdict:
    """The cases of one run under one gate (``gate`` None: reported, nothing can fail)."""

    suite: str
    gate: str | None
    cases: list[Case]
    complete: bool = True
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def failures(self) -> list[Case]:
        return [c for c in self.cases if c.failed]

    def to_dict(self) -> dict:
        return {
            "suite": self.suite,
            "gate": self.gate,
            "complete": self.complete,
            "failed": [{"name": c.name, "message": c.message} for c in self.failures],
            "cases": len(self.cases),
        }

    def summary(self) -> str:
        """One line: what tripped (or that nothing did) and on how many cases."""
        if self.gate is None:
            return f"{self.suite}: {len(self.cases)} case(s), no gate set"
        bad = self.failures
        if not bad:
            return f"{self.suite}: passed, no case has {self.gate} ({len(self.cases)} case(s))"
        shown = "; ".join(f"{c.name}: {c.message}" for c in bad[:3])
        shown += f"; {len(bad) - 3} more" if len(bad) > 3 else ""
        return f"{self.suite}: {len(bad)} of {len(self.cases)} case(s) have {self.gate} ({shown})"


def _num(x: float | None) -> str:
    return "n/a" if x is None else ("inf" if math.isinf(x) else f"{x:.3f}")


def worst_ngram(result: dict) -> dict | None:
    """The n-gram of largest τ_i among those not below the noise floor, in one λ result (or None)."""
    grams = [g for g in result.get("ngrams") or () if g.get("above_noise") is not False]
    return max(grams, key=lambda g: g["influence"], default=None)


def influence_cases(records: Iterable[tuple[str, dict]], threshold: float | None) -> list[Case]:
    """One case per example (``(key, ExampleResult.to_dict())`` pairs): its largest τ_i above the noise
    floor over every λ (and context size, and ε of ε-bounded CID), named in the message; failed when
    that exceeds ``threshold``."""
    cases = []
    for key, rec in records:
        worst, where = None, None
        if threshold is not None and any((r.get("search") or {}).get("method") == "adaptive" for r in rec["results"]):
            raise InvalidParameter(
                f"example {key} was scored with adaptive search, which measures only the n-grams it "
                "chose: a gate needs every n-gram's influence (score it with --search exhaustive)"
            )
        for res in rec["results"]:
            g = worst_ngram(res)
            if g is not None and (worst is None or g["influence"] > worst["influence"]):
                worst, where = g, res
        if worst is None:
            cases.append(Case(key, False, "no n-gram above the noise floor"))
            continue
        floor = (where.get("noise_floor") or {}).get("max")
        eps = epsilon_label(where)
        size = "" if where.get("context_size") is None else f", first {where['context_size']} context tokens"
        at = f"λ={where['lam']:g}" + (f", ε={eps}" if eps else "") + size
        message = (
            f"max τ_i {_num(worst['influence'])} nats (noise floor {_num(floor)}) at {at}: "
            f"context tokens {worst['start']}–{worst['start'] + worst['n']}, "
            f"characters {worst['char_start']}–{worst['char_end']}"
        )
        failed = threshold is not None and worst["influence"] > threshold
        cases.append(Case(key, failed, (f"above {threshold:g}: " if failed else "") + message))
    return cases


def _eps_name(eps) -> str:
    if eps is None:  # no defense, or a heuristic one: no theoretical ε to name the row by
        return "epsilon=none"
    return f"epsilon={eps}" if isinstance(eps, str) else f"epsilon={eps:g}"


def epsilon_cases(report: dict, threshold: float | None) -> list[Case]:
    """One case per row of an audit report (``AuditReport.to_dict()``); failed when ε_lb exceeds ``threshold``."""
    confidence = report["settings"].get("confidence")
    cases = []
    for row in report["rows"]:
        lb = _float(row.get("epsilon_lower_bound"))
        message = (
            f"epsilon lower bound {_num(lb)} at confidence {confidence:g} "
            f"(point {_num(_float(row.get('epsilon_point')))}, TPR {_num(row.get('tpr'))}, "
            f"FPR {_num(row.get('fpr'))}, {row.get('n_in')} IN / {row.get('n_out')} OUT trials)"
        )
        failed = threshold is not None and lb is not None and lb > threshold
        prefix = f"above {threshold:g}: " if failed else ""
        cases.append(Case(_eps_name(row.get("epsilon")), failed, prefix + message))
    return cases


def _float(v) -> float | None:
    """A report value as a float: ``"inf"``/``"-inf"`` strings (strict JSON) back to ±inf."""
    return None if v is None else float(v)


def write_junit(path: str | Path, verdict: Verdict) -> None:
    """Write ``verdict`` as JUnit XML (one ``testsuite``, one ``testcase`` per case) readable by CI
    servers; created owner-only (mode 0600) like the logs it summarises, atomically
    (:func:`ctxlite.outputs.write_atomic`). Control and bidi characters of a case's name (an
    example id) are written as visible escapes: XML 1.0 cannot hold most of them at all."""
    suites = ET.Element("testsuites", tests=str(len(verdict.cases)), failures=str(len(verdict.failures)), errors="0")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=verdict.suite,
        tests=str(len(verdict.cases)),
        failures=str(len(verdict.failures)),
        errors="0",
        skipped="0",
    )
    props = ET.SubElement(suite, "properties")
    properties = {"gate": verdict.gate or "none", "complete": str(verdict.complete).lower(), **verdict.properties}
    for name, value in properties.items():
        ET.SubElement(props, "property", name=name, value=value)
    for case in verdict.cases:
        name, message = visible(case.name), visible(case.message)
        tc = ET.SubElement(suite, "testcase", name=name, classname=verdict.suite.replace(" ", "."))
        if case.failed:
            ET.SubElement(tc, "failure", type="ctxlite.gate", message=message).text = message
        else:
            ET.SubElement(tc, "system-out").text = message
    write_atomic(path, ET.tostring(suites, encoding="utf-8", xml_declaration=True), "JUnit file")


def run_properties(identity: dict) -> dict[str, str]:
    """What produced the numbers, for the JUnit file: model hash and software versions (no paths, no text)."""
    model = identity.get("model") or {}
    software = identity.get("software") or {}
    props = {"model.sha256": model.get("sha256"), **{f"software.{k}": v for k, v in software.items()}}
    return {k: str(v) for k, v in props.items() if v is not None}


def score_verdict(keys, records, threshold: float | None, identity: dict, complete: bool = True) -> Verdict:
    """The influence gate over a score run's example records (``ExampleResult.to_dict()``, in ``keys`` order)."""
    gate = None if threshold is None else f"an n-gram above its noise floor with τ_i > {threshold:g} nats"
    cases = influence_cases(zip(keys, records), threshold)
    return Verdict("ctxlite score", gate, cases, complete, run_properties(identity))


def audit_verdict(report: dict, threshold: float | None, identity: dict) -> Verdict:
    """The ε gate over an audit report (``AuditReport.to_dict()``)."""
    gate = None if threshold is None else f"an epsilon lower bound > {threshold:g}"
    return Verdict("ctxlite audit", gate, epsilon_cases(report, threshold), True, run_properties(identity))
