"""The privacy budget of ``ctxlite serve``: what each API key and all of them together have spent,
kept in an append-only, hash-chained log (:class:`ctxlite.records.RecordLog`, kind ``serve``) that a
restart reads back, so a restart never resets a budget.

Every sampled token is an ε-DP release against the empty context (2ε against a neighbouring
context), whatever its realised bound max_v |log p̄_t(v|D) − log p_T(v|∅)| ≤ ε, which is reported but not charged (it is
a function of the private context, and a budget spent by it would end generation at a
context-dependent time). A budget B is therefore a number of tokens: by basic composition n tokens
cost nε, so ⌊B/ε⌋ are allowed (pure ε-DP); with ``Budgets.delta`` the optimal composition theorem
(:mod:`ctxlite.privacy.composition`, Kairouz, Oh and Viswanath 2015) allows every n whose composed
ε'(n, δ) ≤ B, an (B, δ) guarantee that admits more tokens once n is large. ``spent`` is the basic
sum nε in both cases; ``composed`` the (ε', δ) of the tokens counted. Against a neighbouring context
each token is 2ε-DP, so n tokens are 2nε by basic composition and, with δ, the optimal composition
at 2ε per token (:meth:`Ledger.composed_neighbour`): not twice ``composed``, which can understate
it (the 1,604 tokens a budget of 10 allows at ε = 0.05, δ = 1e-5 are 24.4 against a neighbour, not 20).

Before a response starts, its worst case (``max_tokens`` tokens) is logged as a *reservation* (key
``r<n>-open``); when it ends, its actual cost (key ``r<n>``). A reservation without its end (the
server was killed mid-response) counts in full when the log is read back: a crash can only
over-count, never lose a token's cost.

A teacher-forcing answer (a ``release_realised`` server's log-probabilities of given tokens) is
logged before it is given, with its tokens and values, and charged nothing: it is not a sampled
release, and no ε covers it.

A server that stops cleanly (Ctrl-C, SIGTERM: the requests in flight answered) ends the log with an
end line (:meth:`Ledger.finish`): what was served, per key and in all (:func:`summary`), so the log
reads as complete; a restart appends after it, and the log is partial again while it serves.

API keys are never logged: a key is named by :func:`key_id`, a hash of it.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import dataclass

from ctxlite.errors import InvalidParameter
from ctxlite.logformat import SERVE_FORMATS
from ctxlite.privacy.composition import composed_epsilon, max_compositions
from ctxlite.records import RecordLog

KIND = "serve"
ANONYMOUS = "anonymous"
"""The key id of requests to a server that has no API keys."""


def key_id(key: str | None) -> str:
    """``key-<12 hex>``: the first 48 bits of SHA-256 of the key (what the log names it by), or
    :data:`ANONYMOUS` without one."""
    if key is None:
        return ANONYMOUS
    return "key-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class Budgets:
    """ε budgets (None: none): all keys together, and each key; ``delta`` None: pure ε-DP budgets
    (basic composition), else (ε, δ) budgets by the optimal composition theorem."""

    total: float | None = None
    per_key: float | None = None
    delta: float | None = None

    def __post_init__(self):
        for name, b in (("--budget-total", self.total), ("--budget-per-key", self.per_key)):
            if b is not None and not (b > 0 and math.isfinite(b)):
                raise InvalidParameter(f"{name} must be a finite number > 0, got {b}")
        if self.delta is not None and not 0 < self.delta < 1:
            raise InvalidParameter(f"--budget-delta must be in (0, 1), got {self.delta}")
        if self.delta is not None and self.total is None and self.per_key is None:
            raise InvalidParameter("--budget-delta needs a budget to apply to (--budget-total or --budget-per-key)")


def compose(tokens: int, epsilon: float, delta: float | None, per_token: int = 1) -> float:
    """The ε of ``tokens`` releases of ``per_token``·ε each: their sum (``delta`` None, basic
    composition), else the optimal composition's ε' at δ (never more than the sum)."""
    if delta is None:
        return tokens * per_token * epsilon
    return composed_epsilon(tokens, per_token * epsilon, delta)


class Ledger:
    """The budgets spent so far, read back from the log at ``path`` and appended to it.

    Not thread-safe: the service calls it under its engine lock."""

    def __init__(self, path: str | os.PathLike, identity: dict, budgets: Budgets, epsilon: float | None):
        if epsilon is None and (budgets.total is not None or budgets.per_key is not None):
            raise InvalidParameter("a budget needs --epsilon: without a bound no token has a privacy cost to charge")
        self.budgets, self.epsilon = budgets, epsilon
        self.log = RecordLog(path, identity, kind=KIND, schema_version=SERVE_FORMATS[0], continues=SERVE_FORMATS)
        self.spent_total = 0.0
        self.spent: dict[str, float] = {}
        self.tokens_total = 0
        self.tokens: dict[str, int] = {}
        self._composed: dict[tuple[int, int], float] = {}
        # the most tokens each budget allows (basic or optimal composition), fixed at start
        allowed = lambda b: None if b is None or epsilon is None else max_compositions(b, epsilon, budgets.delta)  # noqa: E731
        self.allowed_total, self.allowed_per_key = allowed(budgets.total), allowed(budgets.per_key)
        self.responses = 0
        open_ = {}
        for rec in self.log:
            if rec["key"].endswith("-open"):
                open_[rec["key"].removesuffix("-open")] = rec
            else:
                open_.pop(rec["key"], None)
                self._add(rec["key_id"], rec["tokens"], rec["epsilon_charged"])
                self.responses += 1
        for rec in open_.values():  # killed mid-response: its whole reservation counts
            self._add(rec["key_id"], rec["max_tokens"], rec["epsilon_reserved"])
            self.responses += 1
        self.recovered = len(open_)

    def _add(self, kid: str, tokens: int, eps: float) -> None:
        self.spent_total += eps
        self.spent[kid] = self.spent.get(kid, 0.0) + eps
        self.tokens_total += tokens
        self.tokens[kid] = self.tokens.get(kid, 0) + tokens

    def composed(self, tokens: int, per_token: int = 1) -> float:
        """The ε of ``tokens`` tokens against the empty context: nε (basic composition), or with
        ``budgets.delta`` the optimal composition's ε' at that δ (never more than nε). ``per_token``
        2: each token at 2ε (:meth:`composed_neighbour`)."""
        if self.epsilon is None:
            return 0.0
        if self.budgets.delta is None:
            return tokens * per_token * self.epsilon
        key = (tokens, per_token)
        if key not in self._composed:  # a response asks for each count several times, under the lock
            if len(self._composed) > 64:
                self._composed.clear()
            self._composed[key] = compose(tokens, self.epsilon, self.budgets.delta, per_token)
        return self._composed[key]

    def composed_neighbour(self, tokens: int) -> float:
        """The ε of ``tokens`` tokens against a neighbouring context, each token 2ε-DP: 2nε by basic
        composition; with ``budgets.delta`` the optimal composition at 2ε per token and the same δ
        (k-fold randomized response at 2ε is the worst neighbouring pair), not twice :meth:`composed`."""
        return self.composed(tokens, 2)

    def left(self, kid: str) -> float:
        """ε left to ``kid``: the smaller of its own budget and the global one, each less the
        composed ε of the tokens already counted against it (inf: no budget)."""
        out = math.inf
        if self.budgets.total is not None:
            out = min(out, self.budgets.total - self.composed(self.tokens_total))
        if self.budgets.per_key is not None:
            out = min(out, self.budgets.per_key - self.composed(self.tokens.get(kid, 0)))
        return max(out, 0.0)

    def affordable(self, kid: str, already: int = 0) -> int | None:
        """How many more tokens ``kid`` may be given after ``already`` tokens of the response in flight
        (their cost is not in the ledger yet); None: no limit."""
        limits = []
        if self.allowed_total is not None:
            limits.append(self.allowed_total - self.tokens_total)
        if self.allowed_per_key is not None:
            limits.append(self.allowed_per_key - self.tokens.get(kid, 0))
        return max(min(limits) - already, 0) if limits else None

    def spent_message(self, kid: str) -> str:
        """Which budget cannot pay for one more token of ``kid``'s, and why, in words."""
        which = (
            "the server's total privacy budget"
            if self.allowed_total is not None and self.allowed_total <= self.tokens_total
            else "the privacy budget of this API key"
        )
        if self.budgets.delta is None:
            why = f"epsilon left {self.left(kid):.6g} < {self.epsilon:g}, the cost of one token"
        else:
            why = (
                f"one more token would take the composed epsilon (optimal composition at delta "
                f"{self.budgets.delta:g}) past it; epsilon left {self.left(kid):.6g}"
            )
        return f"{which} is spent ({why})"

    def open(self, kid: str, endpoint: str, max_tokens: int) -> str:
        """Log the reservation of a response about to start; its record key."""
        self.responses += 1
        key = f"r{self.responses:07d}"
        reserved = 0.0 if self.epsilon is None else max_tokens * self.epsilon
        self.log.append(
            f"{key}-open",
            {"key_id": kid, "endpoint": endpoint, "max_tokens": max_tokens, "epsilon_reserved": reserved},
        )
        return key

    def close(self, key: str, kid: str, endpoint: str, steps: list, finish_reason: str) -> float:
        """Log a response's actual cost (n·ε for n sampled tokens) and the budget state; the cost."""
        charged = 0.0 if self.epsilon is None else len(steps) * self.epsilon
        self._add(kid, len(steps), charged)
        self.log.append(key, self._record(kid, endpoint, steps, finish_reason, len(steps), charged))
        return charged

    def forced(self, kid: str, endpoint: str, steps: list, logprobs: list[float]) -> None:
        """Log a teacher-forcing answer before it is given: the forced tokens, the log-probabilities
        released, each position's realised bound and λ_t*; charged nothing (it is not a sampled
        release: no ε covers it) and counted as no token."""
        self.responses += 1
        record = self._record(kid, endpoint, steps, "teacher_forced", 0, 0.0)
        record.update(forced_token_ids=[s.token for s in steps], forced_logprobs=list(logprobs))
        self.log.append(f"r{self.responses:07d}", record)

    def _record(self, kid: str, endpoint: str, steps: list, finish_reason: str, tokens: int, charged: float) -> dict:
        """An answer's log record: its steps' realised bounds and λ_t*, what it was charged, and the
        budget state after it (with δ, the composed ε of the tokens counted)."""
        record = {
            "key_id": kid,
            "endpoint": endpoint,
            "time": round(time.time(), 3),
            "tokens": tokens,
            "finish_reason": finish_reason,
            "epsilon_per_token": [s.epsilon for s in steps],
            "lambda_per_token": [s.lam for s in steps],
            "epsilon_charged": charged,
            "spent_total": self.spent_total,
            "spent_key": self.spent.get(kid, 0.0),
            "budget_total": self.budgets.total,
            "budget_per_key": self.budgets.per_key,
        }
        if self.budgets.delta is not None:  # the (ε', δ) the budgets are kept in
            record["delta"] = self.budgets.delta
            record["composed_total"] = self.composed(self.tokens_total)
            record["composed_key"] = self.composed(self.tokens.get(kid, 0))
            record["composed_total_neighbour"] = self.composed_neighbour(self.tokens_total)
            record["composed_key_neighbour"] = self.composed_neighbour(self.tokens.get(kid, 0))
        return record

    def finish(self) -> None:
        """End the log after a clean stop: one end line, :func:`summary` of its records (a log with
        nothing new since its last end line is left as it is)."""
        self.log.finish({"served": summary(self.log.records.values())})

    def close_log(self) -> None:
        self.log.close()


def summary(records) -> dict:
    """What a serve log's records say was served, recomputed from them alone (what :meth:`Ledger.finish`
    writes and ``ctxlite report`` checks it against): responses, tokens and basic ε charged, per key
    and in all; the finish reasons; the responses cut off by a crash (a reservation without its end,
    counted at its whole reservation, as a restart counts it); teacher-forced answers (charged nothing)."""
    keys: dict[str, dict] = {}
    reasons: dict[str, int] = {}
    open_: dict[str, dict] = {}
    forced = 0

    def add(kid: str, tokens: int, eps: float) -> None:
        k = keys.setdefault(kid, {"responses": 0, "tokens": 0, "epsilon_charged": 0.0})
        k["responses"] += 1
        k["tokens"] += tokens
        k["epsilon_charged"] += eps

    for rec in records:
        if rec["key"].endswith("-open"):
            open_[rec["key"].removesuffix("-open")] = rec
            continue
        open_.pop(rec["key"], None)
        reasons[rec["finish_reason"]] = reasons.get(rec["finish_reason"], 0) + 1
        forced += rec["finish_reason"] == "teacher_forced"
        add(rec["key_id"], rec["tokens"], rec["epsilon_charged"])
    for rec in open_.values():
        add(rec["key_id"], rec["max_tokens"], rec["epsilon_reserved"])
    return {
        "responses": sum(k["responses"] for k in keys.values()),
        "tokens": sum(k["tokens"] for k in keys.values()),
        "epsilon_charged": sum(k["epsilon_charged"] for k in keys.values()),
        "finish_reasons": dict(sorted(reasons.items())),
        "cut_off": len(open_),
        "teacher_forced": forced,
        "keys": dict(sorted(keys.items())),
    }
