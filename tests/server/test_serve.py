"""``ctxlite serve`` as a user runs it: a real subprocess on loopback serving the default model over a
private note, with API keys, a per-key budget and small caps (one module-scoped server; the restart
and the signals test start their own). Every reported per-token ε is recomputed here from the
model's own next-token distributions (a local engine, decoded from scratch)."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.influence.cid import tight_step
from ctxlite.records import read_run_log
from ctxlite.runtime.engine import Engine, EngineConfig
from ctxlite.runtime.sampling import log_softmax
from ctxlite.serve.ledger import key_id
from ctxlite.serve.service import SEPARATOR
from tests.docs_pages import REPO
from tests.servers import CtxliteServe

pytestmark = pytest.mark.model

NOTE = "Clinic note. Patient: Dana Whitcombe, DOB 04/09/1971. Prescribed lisinopril 10 mg daily."
EPSILON, PER_KEY, CAP = 1.0, 30.0, 6
KEYS = {"main": "sk-test-main", "spender": "sk-test-spender", "other": "sk-test-other", "crowd": "sk-test-crowd"}
KEYS["stops"], KEYS["seeds"], KEYS["score"] = "sk-test-stops", "sk-test-seeds", "sk-test-score"


TOL_FORCED = 1e-6
"""|Δ log p| allowed between a forced token's served log-probability and the same mixture of rows
decoded here: the server decodes each forced prompt from scratch in one pass on one thread, as this
test does, on the same build, so the rows are the same on any CPU and the two agree to float64
rounding of the mixture; stepping a token at a time, as sampling does, moved them by up to 0.08 nat."""


def _secret(tmp) -> str:
    """A replay secret: the seeded requests below are replayed (a client's seed alone chooses nothing)."""
    (tmp / "replay.secret").write_text("test-replay-secret-0123456789\n", encoding="utf-8")
    return str(tmp / "replay.secret")


def _args(tmp):
    (tmp / "note.txt").write_text(NOTE, encoding="utf-8")
    (tmp / "keys.txt").write_text("\n".join(KEYS.values()) + "\n", encoding="utf-8")
    return [
        "--context", str(tmp / "note.txt"), "--epsilon", str(EPSILON), "--budget-per-key", str(PER_KEY),
        "--api-keys", str(tmp / "keys.txt"), "--max-tokens-cap", str(CAP), "--max-request-bytes", "2048",
        "--log", str(tmp / "serve.jsonl"), "--release-realised", "--replay-secret-file", _secret(tmp),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    server = CtxliteServe(tmp, _args(tmp)).start()
    yield server, tmp
    server.stop()


def _post(server, body, key="main", path="/v1/completions"):
    headers = {"Authorization": f"Bearer {KEYS[key]}"} if key else {}
    return httpx.post(server.url.removesuffix("/v1") + path, json=body, headers=headers, timeout=120)


def test_a_completion_and_a_stream_carry_their_epsilon(served):
    server, _ = served
    r = _post(server, {"prompt": "The patient's name is", "max_tokens": 4, "seed": 7})
    assert r.status_code == 200, r.text
    ext = r.json()["usage"]["ctxlite"]
    assert 1 <= len(ext["epsilon_per_token"]) <= 4 and all(0 <= e <= EPSILON for e in ext["epsilon_per_token"])
    assert float(r.headers["X-Ctxlite-Epsilon"]) == ext["epsilon_total"] == EPSILON * len(ext["token_ids"])
    s = _post(server, {"prompt": "The patient's name is", "max_tokens": 4, "seed": 7, "stream": True})
    events = [line[6:] for line in s.text.splitlines() if line.startswith("data: ")]
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]" and chunks[-1]["usage"]["ctxlite"]["token_ids"] == ext["token_ids"]  # same seed
    assert "".join(c["choices"][0]["text"] for c in chunks) == r.json()["choices"][0]["text"]
    models = httpx.get(server.url + "/models", headers={"Authorization": f"Bearer {KEYS['main']}"}).json()
    assert [m["id"] for m in models["data"]] == ["gemma-3-270m"]


def test_every_tokens_epsilon_recomputed_from_the_model_is_within_the_bound(served):
    server, _ = served
    prompt = "Who is the patient? The patient is"
    r = _post(server, {"prompt": prompt, "max_tokens": CAP, "seed": 1, "temperature": 0.8}).json()
    ext = r["usage"]["ctxlite"]
    with Engine("gemma-3-270m") as engine:
        without = engine.tokenize(prompt, add_bos=True, special=True)
        with_ = engine.tokenize(NOTE + SEPARATOR, add_bos=True, special=True) + without[1:]  # context's, prompt's
        for t, (token, eps_t, lam_t) in enumerate(
            zip(ext["token_ids"], ext["epsilon_per_token"], ext["lambda_per_token"])
        ):
            done = ext["token_ids"][:t]
            a = engine.next_logits(with_ + done, exact=True).astype(np.float64)
            b = engine.next_logits(without + done, exact=True).astype(np.float64)
            qb = log_softmax(b, 0.8)
            lam_ref = tight_step(a, b, 1.0, EPSILON, 0.8)[1]  # the tight λ_t* on these rows
            mixed = log_softmax(lam_t * a + (1 - lam_t) * b, 0.8)
            # the log-ratio peaks at the least likely of 262k tokens, where the server's KV-cached decode
            # rounds otherwise than this from-scratch one (docs/design.md, batch-shape rounding: up to
            # ~0.1 nat): λ_t* moves by a few %, and the served bound (ε_t, on the server's rows) holds there
            assert lam_t == pytest.approx(lam_ref, rel=0.1)
            assert eps_t <= EPSILON and np.max(np.abs(mixed - qb)) <= EPSILON + 0.1  # over the whole vocabulary
            assert mixed[token] > -np.inf


def test_ctxlite_score_through_it_keeps_every_tokens_log_probability_within_epsilon(served, monkeypatch):
    """``ctxlite score --backend openai`` through the server (a ``--release-realised`` one answers echo +
    logprobs by teacher forcing): every response token's served log p̄(y_t | note, x) is within ε of
    log p_T(y_t | x) without the private note, recomputed here on a local engine, for the prompt with
    the user's context and without it; and the log holds each forced token with its λ_t* and
    log-probability, which the model's own rows (decoded here from scratch) reproduce within the bound."""
    from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings
    from ctxlite.runtime.sampling import SamplingSettings

    server, tmp = served
    (tmp / "user.txt").write_text("Lee takes insulin.", encoding="utf-8")
    before = set(read_run_log(tmp / "serve.jsonl").records)
    monkeypatch.setenv("CTXLITE_API_KEY", KEYS["score"])
    template, query, response = "{context} Q: {query} A:", "What is prescribed?", " Lisinopril 10 mg"
    args = ["score", "--context", str(tmp / "user.txt"), "-q", query, "-r", response, "--template", template]
    args += ["--ngram", "4", "-T", "1", "--backend", "openai", "--base-url", server.url, "--model-name", "gemma-3-270m"]
    res = CliRunner().invoke(main, [*args, "--json", "--out", str(tmp / "score.jsonl")])
    assert res.exit_code == 0, res.output
    assert "warning: --release-realised answers" in server.log.read_text(encoding="utf-8")  # said at start
    served_result = json.loads(res.stdout)["result"]["results"][0]
    settings = InfluenceSettings(lambdas=(1.0,), ngram=4, sampling=SamplingSettings(temperature=1.0))
    with Engine("gemma-3-270m", EngineConfig(n_threads=1)) as engine:  # as the server (-t 1) decodes
        example = Example("Lee takes insulin.", query, response)
        local = InfluenceScorer(engine, template, settings).score(example).to_dict()["results"][0]
        assert served_result["response_ids"] == local["response_ids"]
        moved = 0.0
        for key in ("token_logprob", "token_logprob_without"):
            gap = np.abs(np.subtract(served_result[key], local[key]))
            assert np.max(gap) <= EPSILON, (key, gap)  # the note moves no response token by more than ε
            moved = max(moved, float(np.max(gap)))
        assert moved > 0.05  # the served numbers are the mixed distribution's, not the model's alone

        forced = [r for k, r in read_run_log(tmp / "serve.jsonl").records.items() if k not in before]
        assert len(forced) >= 4 and all(r["finish_reason"] == "teacher_forced" for r in forced)
        assert all(r["tokens"] == 0 and r["epsilon_charged"] == 0 for r in forced)
        prefix = engine.tokenize(NOTE + SEPARATOR, add_bos=True, special=True)
        for r in forced:
            tokens = r["forced_token_ids"]
            a = engine.logits_rows(prefix + tokens, len(prefix)).astype(np.float64)
            b = engine.logits_rows([engine.bos_id, *tokens], 1).astype(np.float64)
            for t, token in enumerate(tokens):
                lam_t, eps_t = r["lambda_per_token"][t], r["epsilon_per_token"][t]
                qb = log_softmax(b[t], 1.0)
                _, lam_ref, _, eps_ref = tight_step(a[t], b[t], 1.0, EPSILON, 1.0)  # the same rows: the same λ
                assert lam_t == pytest.approx(lam_ref, rel=1e-9) and eps_t == pytest.approx(eps_ref, abs=1e-9)
                mixed = log_softmax(lam_t * a[t] + (1 - lam_t) * b[t], 1.0)
                assert eps_t <= EPSILON and np.max(np.abs(mixed - qb)) <= EPSILON
                assert mixed[token] == pytest.approx(r["forced_logprobs"][t], abs=TOL_FORCED), (t, token)


def test_a_seeded_request_is_answered_alike_whatever_was_served_before(served):
    """The same seeded request after requests that leave different prompts in the engine's KV cache
    (one that shares all of its tokens but the last, one that shares only the context, a chat
    request): the same tokens with the same realised ε per token, bit for bit. The cache may be
    reused only at a boundary that depends on the request alone, or llama.cpp's batch-shape
    rounding would make the answer depend on what was served before."""
    server, _ = served
    prompt = "The patient named in the note is"
    body = {"prompt": prompt, "max_tokens": 4, "seed": 3, "temperature": 1.0}
    answers = []  # 4 answers of 4 tokens and 3 of 2 on a key of its own: 22 of its budget of 30
    for before in ({"prompt": prompt + " Dana"}, {"prompt": prompt[:-3]}, {"prompt": "Billing code"}, None):
        if before is not None:
            assert _post(server, {**before, "max_tokens": 2, "seed": 1}, key="seeds").status_code == 200
        ext = _post(server, body, key="seeds").json()["usage"]["ctxlite"]
        answers.append((ext["token_ids"], ext["epsilon_per_token"], ext["lambda_per_token"]))
    assert all(a == answers[0] for a in answers), answers


def test_a_stop_sequence_cuts_the_answer_and_its_sampled_tokens_are_charged(served):
    """A seeded answer, then the same request with a stop sequence taken from its text: the same
    tokens up to the one that completes it, the text cut before it (streamed alike), "stop"."""
    server, _ = served
    body = {"prompt": "The patient's name is", "max_tokens": CAP, "seed": 3}
    free = _post(server, body, key="stops").json()
    text = free["choices"][0]["text"]
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert len(text) >= 4, free  # a few words: on a real model, six tokens of a name
    cut = _post(server, {**body, "stop": [stop, "never said"]}, key="stops").json()
    assert cut["choices"][0]["text"] == text[: text.index(stop)] and cut["choices"][0]["finish_reason"] == "stop"
    ids = cut["usage"]["ctxlite"]["token_ids"]
    assert ids == free["usage"]["ctxlite"]["token_ids"][: len(ids)]
    assert cut["usage"]["ctxlite"]["epsilon_total"] == EPSILON * len(ids)
    s = _post(server, {**body, "stop": stop, "stream": True}, key="stops")
    chunks = [json.loads(line[6:]) for line in s.text.splitlines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks) == cut["choices"][0]["text"]


@pytest.mark.parametrize(
    "body,key,status,code",
    [
        ({"prompt": "x"}, None, 401, "invalid_api_key"),
        ({"prompt": "x" * 3000}, "main", 413, "too_large"),
        ({"prompt": "x", "top_p": 0.5}, "main", 400, None),
        ({"prompt": "x", "max_tokens": CAP + 1}, "main", 400, None),
        ({"prompt": "x", "temperature": 0}, "main", 400, None),
    ],
)
def test_refusals_are_clear_openai_errors_and_cost_nothing(served, body, key, status, code):
    server, tmp = served
    before = read_run_log(tmp / "serve.jsonl").lines
    r = _post(server, body, key=key)
    assert r.status_code == status and r.json()["error"]["code"] == code and r.json()["error"]["message"]
    assert read_run_log(tmp / "serve.jsonl").lines == before


def test_a_spent_budget_ends_generation_then_refuses_and_the_log_holds(served):
    server, tmp = served
    reasons = []
    for _ in range(int(PER_KEY // CAP) + 1):
        r = _post(server, {"prompt": "Dana", "max_tokens": CAP}, key="spender")
        if r.status_code != 200:
            break
        reasons.append(r.json()["choices"][0]["finish_reason"])
    assert r.status_code == 403 and r.json()["error"]["code"] == "privacy_budget_exhausted", r.text
    assert _post(server, {"prompt": "Dana", "max_tokens": 2}, key="other").status_code == 200  # a key of its own
    log = read_run_log(tmp / "serve.jsonl")  # the chain holds (read_run_log checks every line)
    spent = [rec for k, rec in log.records.items() if not k.endswith("-open") and rec["key_id"].startswith("key-")]
    assert all(KEYS["spender"] not in json.dumps(rec) for rec in log.records.values())
    assert max(rec["spent_key"] for rec in spent) <= PER_KEY


def test_a_restart_keeps_the_budget_and_sigint_drains_then_exits_130(tmp_path):
    args = _args(tmp_path)
    first = CtxliteServe(tmp_path, args).start()
    served_before = 0
    while _post(first, {"prompt": "Dana", "max_tokens": CAP}, key="spender").status_code == 200:
        served_before += 1
    assert served_before == PER_KEY // CAP and first.stop_with(signal.SIGTERM) == 0
    ended = read_run_log(tmp_path / "serve.jsonl")  # a clean stop ends the log: it reads as complete
    assert ended.complete and ended.end["served"]["keys"][key_id(KEYS["spender"])]["responses"] == served_before
    again = CtxliteServe(tmp_path, args).start()
    try:
        r = _post(again, {"prompt": "Dana", "max_tokens": 1}, key="spender")
        assert r.status_code == 403, r.text  # spent before the restart
        answers = {}
        t = threading.Thread(target=lambda: answers.update(r=_post(again, {"prompt": "Dana", "max_tokens": CAP})))
        t.start()
        logged = read_run_log(tmp_path / "serve.jsonl").records.keys()
        while read_run_log(tmp_path / "serve.jsonl").records.keys() == logged:
            time.sleep(0.05)  # the request is in flight once its reservation is logged
        assert again.stop_with(signal.SIGINT) == 130
        t.join()
        assert answers["r"].status_code == 200  # drained: answered before the server stopped
    finally:
        again.stop()
    log = read_run_log(tmp_path / "serve.jsonl")
    assert not [k for k in log.records if k.endswith("-open") and k.removesuffix("-open") not in log.records]
    assert log.complete and log.end["served"]["cut_off"] == 0  # Ctrl-C ends it too, after the restart's answers


def test_a_server_killed_mid_answer_keeps_its_log_and_counts_the_whole_reservation(tmp_path):
    """SIGKILL to the whole ``ctxlite serve`` process group while a response streams (a crash: no
    drain, no close): the log read back verifies, holds the response's reservation and no end, and
    the restarted server says so and charges that reservation in full (CAP tokens), so the key gets
    one response fewer than its budget would give it untouched."""
    args = _args(tmp_path)
    first = CtxliteServe(tmp_path, args).start()
    auth = {"Authorization": f"Bearer {KEYS['spender']}"}
    try:
        body = {"prompt": "Dana", "max_tokens": CAP, "stream": True}
        with httpx.stream("POST", first.url + "/completions", json=body, headers=auth, timeout=120) as r:
            next(line for line in r.iter_lines() if line.startswith("data: "))  # one token out
            first.stop()  # SIGKILL mid-answer
    finally:
        first.stop()
    kept = read_run_log(tmp_path / "serve.jsonl")  # the chain verifies (read_run_log checks every line)
    assert list(kept.records) == ["r0000001-open"]
    assert kept.records["r0000001-open"]["epsilon_reserved"] == CAP * EPSILON
    again = CtxliteServe(tmp_path, args).start()
    try:
        served_after = 0
        while _post(again, {"prompt": "Dana", "max_tokens": CAP}, key="spender").status_code == 200:
            served_after += 1
    finally:
        again.stop()
    said = again.log.read_text(encoding="utf-8")
    assert f"1 response(s) logged, {CAP * EPSILON:g} spent (1 cut off by a crash" in said, said
    assert served_after == PER_KEY // CAP - 1
    log = read_run_log(tmp_path / "serve.jsonl")
    assert "r0000001" not in log.records and len([k for k in log.records if not k.endswith("-open")]) == served_after


def test_chat_completions_use_the_models_chat_template(served, tmp_path):
    server, _ = served  # the default model is a base model: no chat template, a clear 400
    r = _post(server, {"messages": [{"role": "user", "content": "Hi"}]}, path="/v1/chat/completions")
    assert r.status_code == 400 and "no chat template" in r.json()["error"]["message"]
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    args = ["-m", "smollm2-135m-instruct", "--context", str(tmp_path / "note.txt"), "--epsilon", "2"]
    args += ["--replay-secret-file", _secret(tmp_path)]
    chat = CtxliteServe(tmp_path, [*args, "--log", str(tmp_path / "chat.jsonl")]).start()
    try:
        body = {"messages": [{"role": "user", "content": "Who is the patient?"}], "max_tokens": 4, "seed": 2}
        plain = _post(chat, body, key=None, path="/v1/chat/completions").json()
        streamed = _post(chat, {**body, "stream": True}, key=None, path="/v1/chat/completions")
    finally:
        chat.stop()
    assert plain["object"] == "chat.completion" and plain["choices"][0]["message"]["role"] == "assistant"
    ext = plain["usage"]["ctxlite"]  # served without --release-realised: charged, realised withheld
    assert ext["epsilon_total"] == 2.0 * len(ext["token_ids"]) and "lambda_per_token" not in ext
    assert "epsilon_per_token" not in ext and ext["realised"].startswith("withheld")
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == plain["choices"][0]["message"]["content"]


def test_concurrent_requests_are_served_one_at_a_time_each_accounted(served):
    """Six requests sent at once: every one answered, none interleaved with another on the engine (each
    response's tokens are its seed's, as when sent alone), and the log holds each exactly once."""
    server, tmp = served
    before = read_run_log(tmp / "serve.jsonl")
    body = {"prompt": "The patient", "max_tokens": 3}
    alone = _post(server, {**body, "seed": 11}, key="other").json()["usage"]["ctxlite"]["token_ids"]
    answers = [None] * 6
    threads = [
        threading.Thread(target=lambda i=i: answers.__setitem__(i, _post(server, {**body, "seed": 11}, key="crowd")))
        for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = [(a.status_code, a.json().get("usage", {}).get("ctxlite", {}).get("token_ids")) for a in answers]
    assert got == [(200, alone)] * 6, (alone, got)
    after = read_run_log(tmp / "serve.jsonl")
    new = [k for k in after.records if k not in before.records and not k.endswith("-open")]
    assert len(new) == 7 and all(k + "-open" in after.records for k in new)


def test_ctxlites_own_generation_audit_runs_against_it(tmp_path, monkeypatch):
    """``ctxlite audit --backend openai`` connects (a server without prompt log-probabilities: a
    ServedModel) and samples its answers from ``ctxlite serve``, each logged with its ε. Its canary is
    in the audit's own prompt, which the server does not protect: tests/server/test_serve_audit.py
    plays the game with the canary in the served records."""
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    log = tmp_path / "serve.jsonl"
    server = CtxliteServe(tmp_path, ["--context", str(tmp_path / "note.txt"), "--epsilon", "1", "--log", str(log)])
    server.start()
    try:
        monkeypatch.delenv("CTXLITE_API_KEY", raising=False)
        data = str(REPO / "ctxlite" / "data" / "dialogue_sample.jsonl")
        args = ["--quiet", "audit", "--backend", "openai", "--base-url", server.url, "--model-name", "gemma-3-270m"]
        args += ["--data", data, "--task", "generate", "--mechanism", "none", "--trials", "4"]
        args += ["--queries-per-trial", "1", "--reference-runs", "1", "--utility-queries", "0"]
        args += ["--max-new-tokens", "4", "--shots", "1", "--out", str(tmp_path / "audit.jsonl")]
        r = CliRunner().invoke(main, args, catch_exceptions=False)
    finally:
        server.stop()
    assert r.exit_code == 0, r.output
    answers = [rec for k, rec in read_run_log(log).records.items() if not k.endswith("-open")]
    assert len(answers) >= 4 and all(max(a["epsilon_per_token"]) <= 1.0 for a in answers)


def test_a_client_gone_mid_stream_frees_the_engine_and_its_tokens_are_charged(served):
    server, tmp = served
    url, auth = server.url + "/completions", {"Authorization": f"Bearer {KEYS['other']}"}
    with httpx.stream("POST", url, json={"prompt": "Dana", "max_tokens": CAP, "stream": True}, headers=auth) as r:
        next(line for line in r.iter_lines() if line.startswith("data: "))  # one token, then hang up
    after = _post(server, {"prompt": "Dana", "max_tokens": 1}, key="main")  # served: the lock was freed
    assert after.status_code == 200, after.text
    log = read_run_log(tmp / "serve.jsonl")
    gone = [rec for rec in log.records.values() if rec.get("finish_reason") == "interrupted"]
    assert gone and gone[-1]["epsilon_charged"] == EPSILON * gone[-1]["tokens"] >= EPSILON
