"""A ``ctxlite serve`` budget log read back for ``ctxlite report`` (no model, no server): what was
served, per API key and in all, recomputed from the log's records.

The responses, tokens and ε charged per key, the finish reasons, the answers cut off by a crash
(a reservation without its end, counted at its whole reservation as a restart counts it) and the
teacher-forced ones (charged nothing) are :func:`ctxlite.serve.ledger.summary` of the records;
the budgets are those of the last answer logged, and what is left of them the composed ε of the
tokens counted (basic composition, or the optimal one at the deployment's δ; against a neighbouring
context at 2ε per token). A log whose server stopped cleanly ends with an end line holding the same
summary: one that disagrees with the records is refused (the log was edited); one without it is a
partial log (the server is running, or was killed).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ctxlite.errors import DataError
from ctxlite.identity import mismatch
from ctxlite.records import RunLog
from ctxlite.serve.ledger import compose, summary

__all__ = ["ServeLogReport", "serve_report"]


@dataclass
class ServeLogReport:
    """A serve log as ``ctxlite report`` shows it (:func:`serve_report`)."""

    path: str
    complete: bool
    head: str | None
    lines: int
    epsilon: float | None
    lam: float | None
    delta: float | None
    served: dict
    budgets: dict
    notes: list[str] = field(default_factory=list)

    def composed(self, tokens: int, per_token: int = 1) -> float | None:
        """The ε of ``tokens`` tokens (against a neighbour with ``per_token`` 2); None unbounded."""
        return None if self.epsilon is None else compose(tokens, self.epsilon, self.delta, per_token)

    def left(self, kid: str | None) -> float | None:
        """ε left to ``kid`` (None: of the global budget alone), as the ledger computes it; None
        without a budget."""
        out = math.inf
        total, per_key = self.budgets.get("total"), self.budgets.get("per_key")
        if total is not None:
            out = min(out, total - self.composed(self.served["tokens"]))
        if per_key is not None and kid is not None:
            out = min(out, per_key - self.composed(self.served["keys"][kid]["tokens"]))
        return None if math.isinf(out) else max(out, 0.0)

    def rows(self) -> list[dict]:
        """One row per key, then all keys together: responses, tokens, ε charged (the basic sum),
        the composed ε against the empty context and against a neighbour, ε left."""
        out = []
        for kid, k in self.served["keys"].items():
            out.append({"key_id": kid, **k, **self._figures(k["tokens"]), "left": self.left(kid)})
        s = self.served
        every = {"responses": s["responses"], "tokens": s["tokens"], "epsilon_charged": s["epsilon_charged"]}
        out.append({"key_id": "all", **every, **self._figures(s["tokens"]), "left": self.left(None)})
        return out

    def _figures(self, tokens: int) -> dict:
        return {"composed": self.composed(tokens), "composed_neighbour": self.composed(tokens, 2)}

    def to_dict(self) -> dict:
        return {
            "kind": "serve",
            "complete": self.complete,
            "log": {"path": self.path, "head": self.head, "lines": self.lines},
            "settings": {"epsilon": self.epsilon, "lambda": self.lam, "delta": self.delta},
            "composition": "basic" if self.delta is None else "optimal (Kairouz, Oh and Viswanath 2015)",
            "budgets": self.budgets,
            "served": self.served,
            "rows": self.rows(),
            "notes": self.notes,
        }

    def headline(self) -> str:
        s = self.served
        state = "stopped cleanly" if self.complete else "partial: no end line (running, or killed)"
        spent = "" if self.epsilon is None else f", {self.composed(s['tokens']):.6g} composed ε in all"
        return f"serve: {s['responses']} response(s), {s['tokens']} token(s){spent}; {state}"

    def table(self) -> str:
        bound = "no bound (unbounded CID)" if self.epsilon is None else f"ε = {self.epsilon:g} per token"
        at = "" if self.delta is None else f", budgets at δ = {self.delta:g} (optimal composition)"
        lines = [f"serve log: {bound}, λ = {self.lam:g}{at}"]
        lines.append(
            f"{'key':<17} {'responses':>9} {'tokens':>7} {'ε charged':>10} {'composed':>9} {'neighbour':>9} {'left':>9}"
        )
        for r in self.rows():
            lines.append(
                f"{r['key_id']:<17} {r['responses']:>9} {r['tokens']:>7} {r['epsilon_charged']:>10.6g} "
                f"{_num(r['composed']):>9} {_num(r['composed_neighbour']):>9} {_num(r['left']):>9}"
            )
        reasons = ", ".join(f"{k} {v}" for k, v in self.served["finish_reasons"].items()) or "none"
        lines.append(
            f"finish reasons: {reasons}; cut off by a crash: {self.served['cut_off']} (counted at their whole "
            f"reservation); teacher-forced: {self.served['teacher_forced']} (charged nothing)"
        )
        b = self.budgets
        budgets = [f"{name} {b[key]:g}" for name, key in (("total", "total"), ("per key", "per_key")) if b[key]]
        lines.append("budgets (as of the last answer): " + (", ".join(budgets) if budgets else "none"))
        return "\n".join(lines)


def _num(x) -> str:
    return "-" if x is None else f"{x:.6g}"


def serve_report(run: RunLog, note) -> ServeLogReport:
    """The serve log ``run`` (read and its chain checked by :func:`ctxlite.records.read_run_log`)
    recomputed from its records; ``note`` is told what a person must know (a partial log)."""
    records = list(run.records.values())
    try:
        served = json.loads(json.dumps(summary(records), allow_nan=False))  # as an end line holds it
    except (KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"{run.path}: corrupt serve log, a record cannot be read ({exc!r})") from None
    if run.complete:
        stored = run.end.get("served")
        if not isinstance(stored, dict):
            raise DataError(f"{run.where()}: corrupt log, its end line has no 'served'")
        found = mismatch(stored, served)
        if found is not None:
            where, a, b = found
            raise DataError(
                f"{run.where()}: the end line disagrees with the records: served.{where} is {a!r} there, "
                f"{b!r} recomputed from the records (the log was edited)"
            )
    else:
        cut = f"; {served['cut_off']} reservation(s) without their end, counted in full" if served["cut_off"] else ""
        note(
            f"{run.path}: partial serve log (no end line: the server is still running, or it was killed "
            f"rather than stopped{cut})"
        )
    answers = [r for r in records if not r["key"].endswith("-open")]
    last = answers[-1] if answers else {}
    budgets = {"total": last.get("budget_total"), "per_key": last.get("budget_per_key")}
    settings = run.identity.get("settings") or {}
    return ServeLogReport(
        str(run.path), run.complete, run.head, run.lines, settings.get("epsilon"), settings.get("lambda"),
        settings.get("delta"), served, {**budgets, "delta": settings.get("delta")}, list(note.kept),
    )  # fmt: skip
