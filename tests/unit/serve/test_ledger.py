"""The budget ledger of ``ctxlite serve`` (ctxlite.serve.ledger): the figures it reports against a
neighbouring context, and how its log ends. The service around it runs on the FakeBackend."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from ctxlite.privacy.composition import composed_epsilon
from ctxlite.records import read_run_log
from ctxlite.runtime.fake import FakeBackend
from ctxlite.serve.app import build_app
from ctxlite.serve.decoding import Step
from ctxlite.serve.ledger import ANONYMOUS, Budgets, Ledger, key_id
from ctxlite.serve.service import ServeSettings, Service

CONTEXT = "Dana Whitcombe takes lisinopril 10 mg daily. Dana Whitcombe was born on 04/09/1971."
IDENTITY = {
    "software": {"ctxlite": "test"},
    "model": None,
    "settings": {"epsilon": 1.0, "lambda": 1.0, "context": "sha256:" + "0" * 64},
}


def _ledger(tmp_path, budgets, eps, name="serve.jsonl"):
    return Ledger(tmp_path / name, IDENTITY, budgets, eps)


@pytest.mark.parametrize(
    "eps,budget,tokens,neighbour",
    [(0.05, 10.0, 1604, 24.35468), (1.0, 500.0, 852, 1447.94034)],
)
def test_the_neighbours_epsilon_under_delta_is_the_optimal_composition_at_twice_epsilon(
    tmp_path, eps, budget, tokens, neighbour
):
    """Issue 46: per token the worst neighbouring pair is randomized response at 2ε, so n tokens are
    (ε'(n, 2ε, δ), δ) against a neighbour, not twice the composed ε against the empty context: the
    1,604 tokens that ε = 0.05 and a budget of 10 allow at δ = 1e-5 are 24.4 against a neighbour, not
    20; at ε = 1, the 852 of a budget of 500 are 1,448, not 1,000."""
    ledger = _ledger(tmp_path, Budgets(total=budget, delta=1e-5), eps)
    assert ledger.allowed_total == tokens and ledger.composed(tokens) <= budget
    assert ledger.composed_neighbour(tokens) == pytest.approx(neighbour, rel=1e-6)
    assert ledger.composed_neighbour(tokens) == composed_epsilon(tokens, 2 * eps, 1e-5)
    assert ledger.composed_neighbour(tokens) > 2 * budget
    ledger.close_log()
    basic = _ledger(tmp_path, Budgets(total=budget), eps, "basic.jsonl")  # pure ε: 2nε is right
    assert basic.composed_neighbour(7) == 2 * 7 * eps
    basic.close_log()


def _service(tmp_path, budgets, eps, keys=("a",)):
    ledger = _ledger(tmp_path, budgets, eps)
    settings = ServeSettings("fake", eps, 1.0, 32, 4096, frozenset(keys))
    return Service(FakeBackend(seed=2), CONTEXT, settings, ledger)


def test_an_answer_and_the_log_carry_the_neighbours_composed_epsilon(tmp_path):
    """Under --budget-delta the answer's ``epsilon_total_neighbour`` is its tokens composed at 2ε (at
    the budgets' δ) and ``epsilon_spent_key_neighbour`` the key's; the log keeps the key's and all
    keys' beside ``composed_key`` / ``composed_total``. Without δ it stays 2nε."""
    eps, delta = 0.05, 1e-5
    service = _service(tmp_path, Budgets(per_key=10.0, delta=delta), eps)
    answers = []
    with TestClient(build_app(service)) as client:
        for seed in (1, 2):
            r = client.post(
                "/v1/completions",
                json={"prompt": "The dose is", "max_tokens": 20, "seed": seed},
                headers={"Authorization": "Bearer a"},
            )
            assert r.status_code == 200, r.text
            answers.append(r.json()["usage"]["ctxlite"])
    n_key = sum(len(a["token_ids"]) for a in answers)
    for a in answers:
        n = len(a["token_ids"])
        assert a["epsilon_total_neighbour"] == pytest.approx(composed_epsilon(n, 2 * eps, delta))
        assert a["epsilon_total_neighbour"] <= 2 * a["epsilon_total"]
    last = answers[-1]
    assert last["epsilon_spent_key_neighbour"] == pytest.approx(composed_epsilon(n_key, 2 * eps, delta))
    assert last["epsilon_spent_key"] == pytest.approx(composed_epsilon(n_key, eps, delta))
    service.ledger.close_log()
    logged = [r for k, r in read_run_log(tmp_path / "serve.jsonl").records.items() if not k.endswith("-open")]
    assert logged[-1]["composed_key_neighbour"] == pytest.approx(composed_epsilon(n_key, 2 * eps, delta))
    assert logged[-1]["composed_total_neighbour"] == logged[-1]["composed_key_neighbour"]

    plain = _service(tmp_path / "basic", Budgets(per_key=10.0), eps)
    with TestClient(build_app(plain)) as client:
        ext = client.post(
            "/v1/completions",
            json={"prompt": "The dose is", "max_tokens": 5, "seed": 1},
            headers={"Authorization": "Bearer a"},
        ).json()["usage"]["ctxlite"]
    assert ext["epsilon_total_neighbour"] == 2 * ext["epsilon_total"] and "epsilon_spent_key_neighbour" not in ext
    plain.ledger.close_log()
    assert key_id("a") in service.ledger.tokens and ANONYMOUS not in service.ledger.tokens


def test_a_ledger_finished_at_a_clean_stop_ends_its_log_and_a_restart_continues_it(tmp_path):
    """A clean stop (Ctrl-C, SIGTERM: :meth:`Ledger.finish`, then :meth:`Ledger.close_log`) writes the
    log's end line, what was served recomputed from the records, so the log reads as complete, not
    as a partial run; a restart appends after it (the log is partial again while it serves) and the
    budget spent carries over."""
    ledger = _ledger(tmp_path, Budgets(total=5.0), 1.0)
    key = ledger.open(ANONYMOUS, "completions", 3)
    ledger.close(key, ANONYMOUS, "completions", [Step(0, 0.1, 1.0, False)] * 2, "length")
    ledger.finish()
    ledger.close_log()
    run = read_run_log(tmp_path / "serve.jsonl")
    assert run.complete
    served = run.end["served"]
    assert (served["responses"], served["tokens"], served["epsilon_charged"]) == (1, 2, 2.0)
    assert served["keys"] == {ANONYMOUS: {"responses": 1, "tokens": 2, "epsilon_charged": 2.0}}
    assert served["finish_reasons"] == {"length": 1} and served["cut_off"] == 0
    again = _ledger(tmp_path, Budgets(total=5.0), 1.0)
    assert again.spent_total == 2.0 and again.responses == 1
    key = again.open(ANONYMOUS, "completions", 1)
    assert not read_run_log(tmp_path / "serve.jsonl").complete  # serving: partial until it stops
    again.close(key, ANONYMOUS, "completions", [Step(0, 0.1, 1.0, False)], "stop")
    again.finish()
    again.close_log()
    run = read_run_log(tmp_path / "serve.jsonl")
    assert run.complete and run.end["served"]["responses"] == 2 and run.end["served"]["epsilon_charged"] == 3.0
    assert run.end["served"]["finish_reasons"] == {"length": 1, "stop": 1}
