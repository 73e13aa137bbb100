"""``ctxlite serve`` on the FakeBackend, in process (FastAPI's TestClient): the token loop against a
from-scratch reference, the per-token bound over the whole vocabulary, the ledger's composition and
its restart, and every refusal (401, 413, 400, 404, 403). The real server is tests/server/test_serve.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.errors import DataError, InvalidParameter
from ctxlite.influence.cid import TIGHT_TOLERANCE
from ctxlite.privacy.composition import composed_epsilon, max_compositions
from ctxlite.records import read_run_log
from ctxlite.runtime.fake import FakeBackend
from ctxlite.runtime.sampling import log_softmax
from ctxlite.serve import ledger as ledger_module
from ctxlite.serve.app import HEADER, build_app
from ctxlite.serve.decoding import Step, StopText, steps
from ctxlite.serve.ledger import ANONYMOUS, Budgets, Ledger, key_id
from ctxlite.serve.service import PUBLIC_PAD, SEPARATOR, ServeSettings, Service

CONTEXT = "Dana Whitcombe takes lisinopril 10 mg daily. Dana Whitcombe was born on 04/09/1971."
IDENTITY = {
    "software": {"ctxlite": "test"},
    "model": None,
    "settings": {"epsilon": 1.0, "lambda": 1.0, "context": "sha256:" + "0" * 64},
}


def reference_step(backend, prompt_with, prompt_without, lam, eps, T, at=None):
    """One step from scratch, in plain numpy: the tight λ_t* (the largest λ' ≤ λ whose log-ratio
    max_v |log p̄_λ'(v) − log p_T(v|∅)| is within ε, by bisection on that log-ratio computed over the
    whole vocabulary), max|pmi|; and at λ ``at`` (default λ_t*) log p̄ and its log-ratio."""
    a = np.asarray(backend.next_logits(prompt_with), dtype=np.float64)
    b = np.asarray(backend.next_logits(prompt_without), dtype=np.float64)
    qa, qb = log_softmax(a, T), log_softmax(b, T)
    m = float(np.max(np.abs(qa - qb)))
    gap = lambda x: float(np.max(np.abs(log_softmax(x * a + (1 - x) * b, T) - qb)))  # noqa: E731
    lam_t = lam
    if eps is not None and gap(lam) > eps:
        lo, hi = 0.0, lam
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if gap(mid) <= eps else (lo, mid)
        lam_t = lo
    at = lam_t if at is None else at
    return log_softmax(at * a + (1 - at) * b, T), lam_t, m, gap(at)


def assert_tight(served: float, lam_t: float) -> None:
    """The served λ_t* is the tight one from below, within the search's tolerance."""
    assert lam_t * (1 - 2 * TIGHT_TOLERANCE) <= served <= lam_t * (1 + 1e-9), (served, lam_t)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    eps=st.sampled_from([0.05, 0.5, 1.0, 4.0]),
    lam=st.sampled_from([0.5, 1.0, 2.0]),
    T=st.sampled_from([0.7, 1.0, 1.5]),
)
def test_every_step_matches_a_from_scratch_reference_and_keeps_the_bound(seed, eps, lam, T):
    backend = FakeBackend(seed=seed % 7)
    tok = backend.tokenize
    without = tok("What is the dose?", add_bos=True)
    with_ = tok(CONTEXT + SEPARATOR + "What is the dose?", add_bos=True)
    taken = []
    for s in steps(backend, with_, without, lam, eps, T, 6, seed):
        logp, lam_t, m, realised = reference_step(backend, with_ + taken, without + taken, lam, eps, T, s.lam)
        assert_tight(s.lam, lam_t)
        assert s.max_abs_pmi == pytest.approx(m, rel=1e-4, abs=1e-6)
        assert s.epsilon <= eps and s.epsilon == pytest.approx(realised, abs=1e-9)
        base = log_softmax(np.asarray(backend.next_logits(without + taken), dtype=np.float64), T)
        assert np.max(np.abs(logp - base)) <= eps * (1 + 1e-6)  # the guarantee, over every token
        assert logp[s.token] > -np.inf
        taken.append(s.token)


def test_a_seeded_request_is_reproducible_and_another_seed_differs():
    backend = FakeBackend(seed=1)
    with_, without = backend.tokenize(CONTEXT + " Q:", add_bos=True), backend.tokenize(" Q:", add_bos=True)
    runs = [[s.token for s in steps(backend, with_, without, 1.0, 2.0, 1.0, 12, seed)] for seed in (3, 3, 4)]
    assert runs[0] == runs[1] != runs[2]


class BosLessBackend(FakeBackend):
    """The fake model without a BOS token (as SmolLM2's GGUF adds none)."""

    bos_id = None

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = False) -> list[int]:
        return super().tokenize(text, add_bos=False, special=special)


def _service(
    tmp_path, budgets=Budgets(), keys=(), eps=1.0, cap=32, max_bytes=4096, log="serve.jsonl", release=True,
    backend=None,
):  # fmt: skip
    backend = backend or FakeBackend(seed=2)
    ledger = Ledger(tmp_path / log, IDENTITY, budgets, eps)
    settings_ = ServeSettings(
        "fake", eps, 1.0, cap, max_bytes, frozenset(keys), release_realised=release, replay_secret=b"test secret"
    )  # seeded requests replay (tests/unit/serve/test_service.py: a client's seed alone chooses nothing)
    return Service(backend, CONTEXT, settings_, ledger)


def _post(client, body, key=None, path="/v1/completions"):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return client.post(path, json=body, headers=headers)


def test_a_completion_reports_each_tokens_epsilon_and_their_composed_total(tmp_path):
    service = _service(tmp_path)
    with TestClient(build_app(service)) as client:
        r = _post(client, {"prompt": "The dose is", "max_tokens": 5, "seed": 1})
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    ext = usage["ctxlite"]
    assert usage["completion_tokens"] == len(ext["epsilon_per_token"]) >= 1
    assert all(e <= 1.0 for e in ext["epsilon_per_token"])
    assert ext["epsilon_total"] == usage["completion_tokens"] * 1.0 == float(r.headers[HEADER])
    assert ext["epsilon_total_neighbour"] == 2 * ext["epsilon_total"]
    assert r.json()["choices"][0]["logprobs"] is None


def test_the_realised_bound_and_lambda_are_withheld_unless_released_and_always_logged(tmp_path):
    """λ_t* = min(λ, ε / (2 max|pmi_D|)) reveals max|pmi_D| wherever the bound binds: a function of the
    private context the sampling bound does not cover. By default an answer carries only what it was
    charged; the operator's log keeps both per token."""
    service = _service(tmp_path, release=False)
    with TestClient(build_app(service)) as client:
        r = _post(client, {"prompt": "The dose is", "max_tokens": 5, "seed": 1})
        s = _post(client, {"prompt": "The dose is", "max_tokens": 5, "seed": 1, "stream": True})
    ext = r.json()["usage"]["ctxlite"]
    last = [json.loads(line[6:]) for line in s.text.splitlines() if line.startswith("data: {")][-1]
    for shown in (ext, last["usage"]["ctxlite"]):
        assert not {"epsilon_per_token", "lambda_per_token"} & set(shown) and shown["realised"].startswith("withheld")
        assert shown["epsilon_total"] == len(shown["token_ids"]) * 1.0
    service.ledger.close_log()
    logged = [rec for k, rec in read_run_log(tmp_path / "serve.jsonl").records.items() if not k.endswith("-open")]
    assert len(logged) == 2 and all(len(rec["lambda_per_token"]) == rec["tokens"] for rec in logged)


@settings(max_examples=20, deadline=None)
@given(
    prompt=st.text(alphabet="abcdefgh .", min_size=1, max_size=40),
    eps=st.sampled_from([0.05, 0.5, 1.0, None]),
    T=st.sampled_from([0.7, 1.0]),
    rows_held=st.sampled_from([1, 3, 10**6]),
    bos=st.booleans(),
)
def test_teacher_forcing_answers_the_mixed_log_probability_of_each_prompt_token(
    tmp_path_factory, prompt, eps, T, rows_held, bos
):
    """Echo + logprobs on a --release-realised server: entry j is log p̄(prompt token j + 1) after the
    tokens before it (llama-cpp-python's echo layout, which ctxlite's client reads), the from-scratch
    reference step's, with its λ_t* and realised bound; whatever the number of rows held at once
    (``FORCED_ROWS_BYTES``: a long prompt is scored in pieces); logged, charged nothing."""
    from ctxlite.serve import decoding

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decoding, "FORCED_ROWS_BYTES", rows_held * 2 * 4 * FakeBackend(seed=2).n_vocab)
        _check_teacher_forcing(tmp_path_factory.mktemp("forced"), prompt, eps, T, bos)


def _check_teacher_forcing(tmp_path, prompt, eps, T, bos):
    budgets = Budgets() if eps is None else Budgets(per_key=3.0)
    service = _service(tmp_path, budgets=budgets, eps=eps, backend=FakeBackend(seed=2) if bos else BosLessBackend(2))
    backend, skip = service.engine, int(bos)
    without = backend.tokenize(prompt, add_bos=True, special=True)
    prefix = backend.tokenize(CONTEXT + SEPARATOR, add_bos=True, special=True)
    with TestClient(build_app(service)) as client:
        r = _post(client, {"prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": T})
    if len(without) < 2:  # a one-character prompt of the BOS-less model: no token to score
        assert not bos and r.status_code == 400 and "at least two tokens" in r.text, r.text
        return
    assert r.status_code == 200, r.text
    choice, ext = r.json()["choices"][0], r.json()["usage"]["ctxlite"]
    values = choice["logprobs"]["token_logprobs"]
    assert choice["text"] == prompt and len(values) == len(without) - 1 and ext["teacher_forced"]
    assert ext["token_ids"] == without[1:] and ext["epsilon_total"] == 0 == float(r.headers[HEADER])
    for j, token in enumerate(without[1:]):
        done = without[skip : j + 1]  # with BOS: the prefix has its own; without: the first token is kept
        at = ext["lambda_per_token"][j]
        logp, lam_t, m, realised = reference_step(backend, prefix + done, without[: j + 1], 1.0, eps, T, at)
        assert values[j] == pytest.approx(logp[token], abs=1e-5)
        assert_tight(at, lam_t)
        assert ext["epsilon_per_token"][j] == pytest.approx(realised, abs=1e-9)
        if eps is not None:
            base = log_softmax(np.asarray(backend.next_logits(without[: j + 1]), dtype=np.float64), T)
            assert np.max(np.abs(logp - base)) <= eps * (1 + 1e-6)
    service.ledger.close_log()
    (record,) = read_run_log(tmp_path / "serve.jsonl").records.values()
    assert record["finish_reason"] == "teacher_forced" and record["tokens"] == 0 == record["epsilon_charged"]
    assert record["forced_token_ids"] == without[1:] and record["forced_logprobs"] == values
    again = _service(tmp_path, budgets=budgets, eps=eps)  # charged nothing: a budget is whole after a restart
    assert again.ledger.left(ANONYMOUS) == (3.0 if eps is not None else float("inf"))
    again.ledger.close_log()


def test_teacher_forcing_is_answered_only_by_a_server_that_releases_realised_values(tmp_path):
    """Without --release-realised echo + logprobs is a sampled completion whose ``logprobs`` is null
    (a log-probability is a deterministic function of the private context); with it, a stream or a
    malformed ``logprobs`` is refused by name."""
    body = {"prompt": "The dose is", "echo": True, "logprobs": 1, "max_tokens": 2, "seed": 1}
    with TestClient(build_app(_service(tmp_path, release=False))) as client:
        r = _post(client, body)
    assert r.status_code == 200 and r.json()["choices"][0]["logprobs"] is None
    assert r.json()["usage"]["completion_tokens"] >= 1 and "teacher_forced" not in r.json()["usage"]["ctxlite"]
    public = -(-(len(FakeBackend().tokenize(CONTEXT + SEPARATOR, add_bos=True)) - 1) // PUBLIC_PAD) * PUBLIC_PAD
    small = FakeBackend(seed=2, n_ctx=public + 8)  # the context's public length and 8 tokens
    with TestClient(build_app(_service(tmp_path, log="released.jsonl", backend=small))) as client:
        for more, param in (
            ({"stream": True}, "stream"),
            ({"logprobs": -1}, "logprobs"),
            ({"logprobs": "1"}, "logprobs"),
            ({"prompt": ""}, "prompt"),  # BOS alone: no token to score
        ):
            r = _post(client, {**body, **more})
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        r = _post(client, {**body, "prompt": "a b c d e f g"})  # context + prompt overflow the window: 400, not 500
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
        assert _post(client, {**body, "prompt": "a b"}).status_code == 200  # what fits is answered


def test_a_stream_sends_the_same_text_as_events_and_its_usage_last(tmp_path):
    service = _service(tmp_path)
    with TestClient(build_app(service)) as client:
        plain = _post(client, {"prompt": "The dose is", "max_tokens": 8, "seed": 5}).json()
        r = _post(client, {"prompt": "The dose is", "max_tokens": 8, "seed": 5, "stream": True})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == plain["choices"][0]["text"]
    assert chunks[-1]["usage"]["ctxlite"]["epsilon_per_token"] == plain["usage"]["ctxlite"]["epsilon_per_token"]


@pytest.mark.parametrize(
    "body,status,param",
    [
        ({"prompt": "x", "top_p": 0.9}, 400, "top_p"),
        ({"prompt": "x", "top_k": 40}, 400, "top_k"),
        ({"prompt": "x", "min_p": 0.05}, 400, "min_p"),
        ({"prompt": "x", "presence_penalty": 0.5}, 400, "presence_penalty"),
        ({"prompt": "x", "n": 2}, 400, "n"),
        ({"prompt": "x", "temperature": 0}, 400, "temperature"),
        ({"prompt": "x", "max_tokens": 33}, 400, "max_tokens"),
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ({"prompt": [1, 2, 3]}, 400, "prompt"),
        ({"prompt": "x", "model": "gpt-4"}, 404, "model"),
        ({"prompt": "x", "logit_bias": {"5": 10}}, 400, "logit_bias"),
        ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
        ({"prompt": "x", "stop": ""}, 400, "stop"),
        ({"prompt": "x", "stop": [7]}, 400, "stop"),
        ({"prompt": "x", "stop": "x" * 65}, 400, "stop"),
    ],
)
def test_what_would_void_the_bound_or_break_a_cap_is_refused_openai_style(tmp_path, body, status, param):
    service = _service(tmp_path)
    with TestClient(build_app(service)) as client:
        r = _post(client, body)
    assert r.status_code == status and r.json()["error"]["param"] == param, r.text
    assert len(service.ledger.log) == 0  # nothing sampled, nothing charged


def test_neutral_values_of_the_filters_are_accepted(tmp_path):
    """What ctxlite's own client sends to turn a server's filters off."""
    body = {"prompt": "x", "max_tokens": 2, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "typical_p": 1.0, "n": 1}
    with TestClient(build_app(_service(tmp_path))) as client:
        assert _post(client, {**body, "repeat_penalty": 1.0, "seed": 0}).status_code == 200


def test_keys_are_checked_and_never_logged(tmp_path):
    service = _service(tmp_path, keys=("sk-alpha", "sk-beta"))
    with TestClient(build_app(service)) as client:
        assert _post(client, {"prompt": "x"}).status_code == 401
        assert _post(client, {"prompt": "x"}, key="sk-wrong").json()["error"]["code"] == "invalid_api_key"
        assert client.get("/v1/models").status_code == 401 and client.get("/health").status_code == 200
        assert _post(client, {"prompt": "x", "max_tokens": 2}, key="sk-alpha").status_code == 200
    service.ledger.close_log()
    text = (tmp_path / "serve.jsonl").read_text()
    assert "sk-alpha" not in text and key_id("sk-alpha") in text


def test_an_oversized_request_is_refused_with_413(tmp_path):
    with TestClient(build_app(_service(tmp_path, max_bytes=512))) as client:
        r = _post(client, {"prompt": "x" * 600})
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
        assert client.post("/v1/completions", content=b"{not json").status_code == 400


def test_budgets_end_a_response_then_refuse_and_survive_a_restart(tmp_path):
    budgets = Budgets(total=10.0, per_key=6.0)
    service = _service(tmp_path, budgets, keys=("a", "b"), eps=1.0)
    with TestClient(build_app(service)) as client:
        first = _post(client, {"prompt": "x", "max_tokens": 4}, key="a").json()
        spent_a = first["usage"]["ctxlite"]["epsilon_total"]
        second = _post(client, {"prompt": "x", "max_tokens": 32}, key="a").json()
        assert second["usage"]["completion_tokens"] <= 6 - spent_a
        if second["usage"]["completion_tokens"] == 6 - spent_a:
            assert second["choices"][0]["finish_reason"] in ("privacy_budget", "stop")
        r = _post(client, {"prompt": "x"}, key="a")
        assert r.status_code == 403 and r.json()["error"]["type"] == "insufficient_quota"
        assert r.json()["error"]["message"].startswith("the privacy budget of this API key is spent (epsilon left")
        b = _post(client, {"prompt": "x", "max_tokens": 32}, key="b").json()  # b is limited by the global budget
        assert b["usage"]["ctxlite"]["budget_left"] == pytest.approx(service.ledger.left(key_id("b")))
        while (r := _post(client, {"prompt": "x", "max_tokens": 32}, key="b")).status_code == 200:
            pass
        # the refusal names the budget spent: all keys' (10 tokens) or b's own (6)
        which = "the server's total" if service.ledger.tokens_total == 10 else "the privacy budget of this API key"
        assert r.status_code == 403 and which in r.json()["error"]["message"], (service.ledger.tokens, r.text)
    spent = service.ledger.spent_total
    assert spent <= 10.0
    service.ledger.close_log()
    again = Ledger(tmp_path / "serve.jsonl", IDENTITY, budgets, 1.0)  # a restart reads the budget back
    assert again.spent_total == spent and again.left(key_id("a")) == 0.0
    again.close_log()
    assert read_run_log(tmp_path / "serve.jsonl").chained


def test_a_response_cut_by_a_crash_counts_its_whole_reservation(tmp_path):
    ledger = Ledger(tmp_path / "serve.jsonl", IDENTITY, Budgets(total=100.0), 0.5)
    ledger.open(ANONYMOUS, "completions", 16)  # killed before its end line
    ledger.close_log()
    again = Ledger(tmp_path / "serve.jsonl", IDENTITY, Budgets(total=100.0), 0.5)
    assert again.spent_total == 8.0 and again.recovered == 1 and again.responses == 1
    again.close_log()


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), max_size=12),
    eps=st.sampled_from([0.25, 0.5, 1.0, 3.0]),
    total=st.sampled_from([1.0, 5.0, 12.5]),
)
def test_the_ledger_never_lets_spending_pass_the_budget(tmp_path_factory, lengths, eps, total):
    """Basic composition, by a reference sum: spent = Σ tokens·ε, never above the budget, read back equal."""
    path = tmp_path_factory.mktemp("ledger") / "serve.jsonl"
    ledger = Ledger(path, IDENTITY, Budgets(total=total), eps)
    reference = 0.0
    for n in lengths:
        allowed = ledger.affordable(ANONYMOUS)
        if allowed < 1:
            break
        n = min(n, allowed)
        key = ledger.open(ANONYMOUS, "completions", n)
        ledger.close(key, ANONYMOUS, "completions", [Step(0, 0.1, 1.0, False)] * n, "length")
        reference += n * eps
        assert ledger.spent_total == pytest.approx(reference) and ledger.spent_total <= total + 1e-9
    ledger.close_log()
    again = Ledger(path, IDENTITY, Budgets(total=total), eps)
    assert again.spent_total == pytest.approx(reference)
    again.close_log()


def test_delta_budgets_allow_the_optimal_compositions_tokens_and_survive_a_restart(tmp_path):
    """ε = 0.05 a token, 1 per key at δ = 1e-5: basic composition would stop a key at 20 tokens; the
    optimal composition allows every n with ε'(n, δ) ≤ 1, and the key is served exactly that many.
    Each answer reports δ and the key's composed ε; the log keeps them; a restart reads the tokens
    back and refuses the key."""
    budgets, eps = Budgets(per_key=1.0, delta=1e-5), 0.05
    allowed = max_compositions(1.0, eps, 1e-5)
    assert allowed > 20 == max_compositions(1.0, eps)
    service = _service(tmp_path, budgets, keys=("a",), eps=eps)
    served, last = 0, None
    with TestClient(build_app(service)) as client:
        while (r := _post(client, {"prompt": "x", "max_tokens": 32, "seed": served}, key="a")).status_code == 200:
            last = r.json()["usage"]
            served += last["completion_tokens"]
        assert r.status_code == 403 and r.json()["error"]["code"] == "privacy_budget_exhausted"
        # the next token costs less than ε here (ε'(n + 1) - ε'(n)): the refusal says what it is short of
        assert "one more token would take the composed epsilon (optimal composition at delta 1e-05)" in r.text
        # a teacher-forced answer (--release-realised) passes no budget and reports the key's state as sampled ones do
        f = _post(client, {"prompt": "x y", "echo": True, "logprobs": 1, "max_tokens": 1}, key="a")
        assert f.status_code == 200 and f.json()["usage"]["ctxlite"]["delta"] == 1e-5, f.text
        assert f.json()["usage"]["ctxlite"]["epsilon_spent_key"] == pytest.approx(composed_epsilon(served, eps, 1e-5))
    assert served == allowed
    ext = last["ctxlite"]
    assert ext["delta"] == 1e-5 and ext["epsilon_spent_key"] == pytest.approx(composed_epsilon(served, eps, 1e-5))
    assert ext["epsilon_spent_key"] <= 1.0 < composed_epsilon(served + 1, eps, 1e-5) and ext["budget_left"] >= 0
    assert "optimal" in ext["composition"]
    service.ledger.close_log()
    responses = [rec for k, rec in read_run_log(tmp_path / "serve.jsonl").records.items() if not k.endswith("-open")]
    forced = responses.pop()
    assert forced["finish_reason"] == "teacher_forced" and forced["composed_key"] == ext["epsilon_spent_key"]
    assert responses[-1]["composed_key"] == ext["epsilon_spent_key"] and responses[-1]["delta"] == 1e-5
    assert responses[-1]["spent_key"] == pytest.approx(served * eps)  # the basic sum, kept beside it
    again = Ledger(tmp_path / "serve.jsonl", IDENTITY, budgets, eps)
    assert again.tokens[key_id("a")] == served and again.affordable(key_id("a")) == 0
    again.close_log()


@settings(max_examples=20, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), max_size=10),
    eps=st.sampled_from([0.05, 0.2, 1.0]),
    total=st.sampled_from([0.5, 2.0, 6.0]),
)
def test_a_delta_ledger_never_lets_the_composed_epsilon_pass_the_budget(tmp_path_factory, lengths, eps, total):
    """Against the reference accountant: after every response the tokens counted compose (at δ) to at
    most the budget, and a refusal comes only when one more token would pass it."""
    delta = 1e-5
    path = tmp_path_factory.mktemp("ledger") / "serve.jsonl"
    ledger = Ledger(path, IDENTITY, Budgets(total=total, delta=delta), eps)
    n_total = 0
    for n in lengths:
        allowed = ledger.affordable(ANONYMOUS)
        if allowed < 1:
            assert composed_epsilon(n_total + 1, eps, delta) > total
            break
        n = min(n, allowed)
        key = ledger.open(ANONYMOUS, "completions", n)
        ledger.close(key, ANONYMOUS, "completions", [Step(0, 0.1, 1.0, False)] * n, "length")
        n_total += n
        assert ledger.tokens_total == n_total and composed_epsilon(n_total, eps, delta) <= total + 1e-9
    ledger.close_log()


def test_delta_is_part_of_the_deployments_identity_so_a_restart_under_another_is_refused(tmp_path):
    """Without δ the identity is what it was (a ledger written before --budget-delta continues)."""
    from ctxlite.identity import content_hash
    from ctxlite.serve.deployment import serve_identity

    class Model:
        def identity(self):
            return {"software": {"ctxlite": "test"}, "model": None}

    ident = lambda delta: serve_identity(Model(), 0.05, 1.0, CONTEXT, delta)  # noqa: E731
    assert ident(None)["settings"] == {"epsilon": 0.05, "lambda": 1.0, "context": content_hash(CONTEXT)}
    path = tmp_path / "serve.jsonl"
    ledger = Ledger(path, ident(1e-5), Budgets(total=1.0, delta=1e-5), 0.05)
    ledger.close(
        ledger.open(ANONYMOUS, "completions", 2), ANONYMOUS, "completions", [Step(0, 0.1, 1.0, False)] * 2, "length"
    )
    ledger.close_log()
    with pytest.raises(DataError, match="different run"):
        Ledger(path, ident(1e-6), Budgets(total=1.0, delta=1e-6), 0.05)


def test_a_delta_without_a_budget_or_out_of_range_is_refused():
    with pytest.raises(InvalidParameter, match="needs a budget"):
        Budgets(delta=1e-5)
    with pytest.raises(InvalidParameter, match=r"must be in \(0, 1\)"):
        Budgets(total=1.0, delta=1.0)


@pytest.mark.parametrize("version", [None, 2, 3, 1])
def test_a_ledger_of_every_serve_format_is_continued_in_its_own_after_an_upgrade(tmp_path, monkeypatch, version):
    """ctxlite serve began in log format 2; format 3 changed score results only. A ledger written in
    either (a restart after an upgrade) keeps its budget spent and its format; a new one is format 2;
    a log of another format is refused, never replaced by an empty ledger."""
    path = tmp_path / "serve.jsonl"

    def answer(ledger, tokens):
        key = ledger.open(ANONYMOUS, "completions", tokens)
        ledger.close(key, ANONYMOUS, "completions", [Step(0, 0.1, 1.0, False)] * tokens, "length")
        ledger.close_log()

    if version is not None:  # a ledger as a ctxlite that wrote format `version` left it: 3 tokens at ε = 1
        with monkeypatch.context() as m:
            m.setattr(ledger_module, "SERVE_FORMATS", (version,))
            answer(Ledger(path, IDENTITY, Budgets(total=10.0), 1.0), 3)
    if version == 1:
        with pytest.raises(DataError, match="format 1, this run writes format 2"):
            Ledger(path, IDENTITY, Budgets(total=10.0), 1.0)
        return
    ledger = Ledger(path, IDENTITY, Budgets(total=10.0), 1.0)
    assert ledger.spent_total == (0.0 if version is None else 3.0)
    answer(ledger, 2)
    run = read_run_log(path)
    assert run.schema_version == (version or 2) and run.chained
    again = Ledger(path, IDENTITY, Budgets(total=10.0), 1.0)
    assert again.spent_total == (2.0 if version is None else 5.0)
    again.close_log()


def test_a_budget_without_epsilon_is_refused(tmp_path):
    with pytest.raises(InvalidParameter, match="needs --epsilon"):
        Ledger(tmp_path / "serve.jsonl", IDENTITY, Budgets(total=1.0), None)


def reference_cut(text: str, stops: list[str]) -> tuple[str, bool]:
    """The text before the first occurrence of any stop sequence, and whether one occurs."""
    found = [text.find(s) for s in stops if s and text.find(s) >= 0]
    return (text[: min(found)], True) if found else (text, False)


@given(
    st.lists(st.text("ab\n", max_size=4), max_size=12), st.lists(st.text("ab\n", min_size=1, max_size=3), max_size=4)
)
def test_stop_text_shows_the_text_before_the_first_stop_sequence_and_nothing_of_it(pieces, stops):
    """Piece by piece until a stop sequence completes (generation ends there: a stop that began
    earlier but would complete later never does, e.g. "\n" in "b\n" before "b\nb")."""
    scan, shown, k = StopText(stops), [], -1
    for k, piece in enumerate(pieces):
        shown.append(scan.add(piece))
        so_far = "".join(shown)
        cut, stopped = reference_cut("".join(pieces[: k + 1]), stops)
        assert scan.stopped == stopped and cut.startswith(so_far)  # never past the stop, never text of one
        if stopped:
            assert so_far == cut  # all of it at once when the stop completes
            break
    shown.append(scan.flush())
    assert "".join(shown) == reference_cut("".join(pieces[: k + 1]), stops)[0]


def test_a_stop_sequence_cuts_the_seeded_answer_where_it_occurs_and_charges_what_was_sampled(tmp_path):
    """The same seed with and without ``stop``: the same tokens up to the one that completes the stop
    sequence; the text is the unstopped text cut before it (streamed alike), ``finish_reason`` is
    "stop", and every sampled token is charged."""
    service = _service(tmp_path)
    body = {"prompt": "The dose is", "max_tokens": 16, "seed": 3}
    with TestClient(build_app(service)) as client:
        free = _post(client, body).json()
        text = free["choices"][0]["text"]
        stop = text[len(text) // 2 : len(text) // 2 + 2]
        assert len(text) >= 4 and stop, text
        cut = _post(client, {**body, "stop": [stop, "never-said"]}).json()
        streamed = _post(client, {**body, "stop": stop, "stream": True})
    want = text[: text.index(stop)]
    assert cut["choices"][0]["text"] == want and cut["choices"][0]["finish_reason"] == "stop"
    ids, all_ids = cut["usage"]["ctxlite"]["token_ids"], free["usage"]["ctxlite"]["token_ids"]
    assert ids == all_ids[: len(ids)] and len(ids) < len(all_ids)
    assert cut["usage"]["ctxlite"]["epsilon_total"] == len(ids) * 1.0 == cut["usage"]["completion_tokens"]
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks) == want
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
