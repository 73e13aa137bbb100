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

The second part plays a hostile client's attacks as canary queries against two neighbouring
servers (the issue's records, ε = 0.5, a 256-token window): seeded requests, the same seeds
repeated, and length probes. Each must certify no more than the guarantee of what it observes;
against the server before the fix the seed attack certified 1.35 (> 2ε = 1.0) and the length probe
1.35 (> 0: a refusal samples nothing).
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from ctxlite.privacy.estimators import clopper_pearson_epsilon
from ctxlite.serve.app import SEED_REPLAYED
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


# ----- a hostile client: seeds and lengths ------------------------------------------------------------
NEIGHBOURS = {
    "in": ["Ravi Patel takes metformin."],
    "out": ["Ravi Patel takes metformin 500 mg twice daily with meals."],
}
"""The issue's two servers: their records differ in one record (and in length, by 10 tokens)."""
PROBE, ATTACK_EPSILON, WINDOW = "Ravi Patel takes metformin", 0.5, 256
SEEDS, SPLIT_SEEDS, LENGTHS = 12, 4, range(192, 256, 4)
"""Calibration seeds (each asked once per server), how many seeds that split the two servers' answers
the attack keeps (each is asked TRIALS / SPLIT_SEEDS times a side), and the prompt lengths in words
of the length probe."""


def ask(server, body: dict) -> httpx.Response:
    return httpx.post(server.url + "/completions", json=body, timeout=120)


def first_token(server, seed: int, max_tokens: int) -> int:
    r = ask(server, {"prompt": PROBE, "max_tokens": max_tokens, "seed": seed})
    assert r.status_code == 200 and r.json()["usage"]["ctxlite"]["seed"] == SEED_REPLAYED, r.text
    return r.json()["usage"]["ctxlite"]["token_ids"][0]


def seed_attack(servers) -> tuple[int, int]:
    """A client that trusts its seed: it learns each seed's token on either server (one token, as a
    local run of the model would tell it, were the seed the sampler's), keeps the first SPLIT_SEEDS
    seeds whose tokens differ, then asks each of them again, TRIALS / SPLIT_SEEDS times a side
    (``max_tokens`` 2 to 5: the same seed, repeated, its first token what a seeded sampler would
    draw again), and says IN when the first token is the IN server's. (IN trials that say IN, OUT
    trials that say IN)."""
    learned = {s: {side: first_token(server, s, 1) for side, server in servers.items()} for s in range(SEEDS)}
    split = [s for s, t in learned.items() if t["in"] != t["out"]][:SPLIT_SEEDS]
    hits = dict.fromkeys(servers, 0)
    for side, server in servers.items():
        for s in split:
            for n in range(2, TRIALS // SPLIT_SEEDS + 2):
                hits[side] += first_token(server, s, n) == learned[s]["in"]
    return hits["in"], hits["out"]


def length_attack(servers) -> tuple[int, int]:
    """A client that bisects on accept/refuse: it finds a prompt length (in words) that one server
    accepts and the other refuses (the shortest; else the shortest any refuses), asks it TRIALS times
    a side and says IN when it is answered as the IN server answered it. (IN trials that say IN,
    OUT trials that say IN, each server's error bodies)."""

    def probe(server, words: int) -> httpx.Response:
        return ask(server, {"prompt": "word " * words, "max_tokens": 1})

    seen = {k: {side: probe(server, k) for side, server in servers.items()} for k in LENGTHS}
    differ = [k for k, a in seen.items() if a["in"].status_code != a["out"].status_code]
    refused = [k for k, a in seen.items() if a["in"].status_code != 200]
    assert differ or refused, "no probed length is refused: the probe does not reach the window"
    k = (differ or refused)[0]
    says_in = {side: sum(probe(server, k).status_code == seen[k]["in"].status_code for _ in range(TRIALS))
               for side, server in servers.items()}  # fmt: skip
    errors = {side: [a[side].content for a in seen.values() if a[side].status_code != 200] for side in servers}
    return says_in["in"], says_in["out"], errors


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory):
    """The two servers, ε = 0.5 per token, a 256-token window."""
    tmp = tmp_path_factory.mktemp("neighbours")
    args = ["--epsilon", str(ATTACK_EPSILON), "-c", str(WINDOW)]
    servers = {side: start(tmp, side, records, args) for side, records in NEIGHBOURS.items()}
    try:
        for server in servers.values():
            server.start()
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def test_a_seeded_client_certifies_no_more_than_one_tokens_guarantee(neighbours):
    """The first token of an answer is 2ε-DP against a neighbour: the seed attack's certified ε_lb
    stays within 2ε = 1.0 (16 trials a side can certify up to 1.35, so the game could refute it).
    With the client's seed choosing the sampler (before the fix) the same attack certified 1.35 (4
    of 12 seeds split the servers; 16 of 16 IN trials, 0 of 16 OUT: each seed's token on a server is
    a function of its context). Served from the replay secret, 2 seeds split and no trial matched."""
    tp, fp = seed_attack(neighbours)
    guarantee = 2 * ATTACK_EPSILON
    assert certified(TRIALS, 0) > guarantee  # the game has the power to refute this guarantee
    assert certified(tp, fp) <= guarantee, (tp, fp, certified(tp, fp))


def test_accept_and_refuse_reveal_nothing_of_the_contexts_length(neighbours):
    """A refusal samples nothing, so it may reveal nothing: the length probe certifies 0, and both
    servers' error bodies are the same bytes. Before the fix the context's own length decided: the
    probe found 240 words, which the IN server answered and the OUT server refused (its error named
    its token count), and certified 1.35 (16 of 16 IN trials, 0 of 16 OUT)."""
    tp, fp, errors = length_attack(neighbours)
    assert certified(tp, fp) == 0, (tp, fp, certified(tp, fp))
    assert errors["in"] == errors["out"] and errors["in"], errors  # no context-dependent number in a message
