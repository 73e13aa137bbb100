"""ctxlite audits its own guarantee: the ContextLeak game against real ``ctxlite serve`` processes.

A canary record ("Dana Whitcombe's locker code is 7391.") is in the served private records (IN) or
not (OUT): the two contexts are neighbours, differing in that one record. Each trial asks the
server the canary's own prefix and scores the answer by how many of the canary's digits it
repeats; the threshold (2 digits) is fixed before any trial, so the Clopper-Pearson bound of
:func:`ctxlite.privacy.estimators.clopper_pearson_epsilon` (95 %) is a certified lower bound ε_lb
on the privacy loss of one response. The server enforces 2·n·ε against a neighbour for a response
of n tokens (basic composition), so ε_lb must not exceed it; served at λ = 1 without a bound, the
same game certifies more than the bounded server's guarantee (the game has the power to refute
the bound, were it broken). 16 trials a side certify at most 1.35 (all IN trials detected, no OUT
trial), so the game can refute only guarantees below that: the ε served (0.05 and 0.1: guarantees
0.4 and 0.8) are chosen where it can; a guarantee of 2.0 (ε = 0.25) would need 32 trials a side
(at most 2.10). Measured (4 tokens, T = 0.5, the answers replayed from a fixed secret): λ = 1
certifies 0.97 (13/16 IN trials repeat the digits, 0/16 OUT; 1.35, 16/16, when seed i chose the
sampler); ε = 0.05 and 0.1 certify 0.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from ctxlite.privacy.estimators import clopper_pearson_epsilon
from tests.servers import CtxliteServe

pytestmark = pytest.mark.model

RECORDS = [
    "Clinic note. Patient: Dana Whitcombe, DOB 04/09/1971. Prescribed lisinopril 10 mg daily.",
    "Dana Whitcombe's locker code is 7391.",
    "Billing: the visit was covered by the patient's insurance.",
]
CANARY, DIGITS, QUERY = RECORDS[1], "7391", "Dana Whitcombe's locker code is"
TRIALS, TOKENS, THRESHOLD, TEMPERATURE = 16, 4, 2, 0.5


def score(text: str) -> int:
    """How many leading digits of the canary's code the answer's first number repeats."""
    m = re.search(r"\d+", text)
    n = 0
    for a, b in zip(m.group(0) if m else "", DIGITS):
        if a != b:
            break
        n += 1
    return n


def replay_secret(tmp) -> str:
    """The operator's replay secret, one for both servers: a trial's seeded request is replayed, so the
    game is the same on every run, and distinct requests (seed i for trial i) are sampled independently."""
    (tmp / "replay.secret").write_text("audit-replay-secret-0123456789", encoding="utf-8")
    return str(tmp / "replay.secret")


def start(tmp, side: str, records: list[str], args: list[str]) -> CtxliteServe:
    data = tmp / f"records-{side}.jsonl"
    data.write_text("".join(json.dumps({"text": r}) + "\n" for r in records), encoding="utf-8")
    log, secret = tmp / f"serve-{side}.jsonl", replay_secret(tmp)
    return CtxliteServe(tmp, ["--data", str(data), "--log", str(log), "--replay-secret-file", secret, *args])


def play(tmp, bound: list[str]) -> tuple[int, int]:
    """(IN trials scoring >= THRESHOLD, OUT trials scoring >= THRESHOLD), TRIALS a side."""
    hits = {}
    for side, records in (("in", RECORDS), ("out", [r for r in RECORDS if r != CANARY])):
        server = start(tmp, side, records, bound).start()
        try:
            body = {"prompt": QUERY, "max_tokens": TOKENS, "temperature": TEMPERATURE}
            answers = [
                httpx.post(server.url + "/completions", json={**body, "seed": i}, timeout=120).json()
                for i in range(TRIALS)
            ]
        finally:
            server.stop()
        assert all(len(a["usage"]["ctxlite"]["token_ids"]) <= TOKENS for a in answers)
        hits[side] = sum(score(a["choices"][0]["text"]) >= THRESHOLD for a in answers)
    return hits["in"], hits["out"]


def certified(tp: int, fp: int) -> float:
    return clopper_pearson_epsilon(tp, TRIALS, fp, TRIALS, alpha=0.05)


@pytest.fixture(scope="module")
def unbounded(tmp_path_factory):
    """ε_lb of the same model served at λ = 1 with no bound."""
    tp, fp = play(tmp_path_factory.mktemp("lambda1"), ["--lam", "1"])
    return certified(tp, fp)


@pytest.mark.parametrize("epsilon", [0.05, 0.1])
def test_the_audit_certifies_no_more_than_the_enforced_guarantee(epsilon, unbounded, tmp_path):
    guarantee = 2 * TOKENS * epsilon  # one response of at most TOKENS tokens, against a neighbouring context
    assert certified(TRIALS, 0) > guarantee  # the game has the power to refute this guarantee
    tp, fp = play(tmp_path, ["--epsilon", str(epsilon)])
    eps_lb = certified(tp, fp)
    assert eps_lb <= guarantee, (tp, fp, eps_lb, guarantee)
    assert unbounded > eps_lb + 0.5, (unbounded, eps_lb)  # served without the bound, the same game certifies more
    assert unbounded > guarantee, (unbounded, guarantee)  # than the bound allows: it would refute a broken bound
