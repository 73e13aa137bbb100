"""``ctxlite serve`` against a hostile client, on the FakeBackend in process: a client's ``seed``
chooses no stream, the private context's length decides nothing a client sees, malformed text and
temperatures are 400s naming the field, unknown sampler fields are refused, and the header means
what the body and the docs say."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ctxlite.records import read_run_log
from ctxlite.runtime.fake import FakeBackend
from ctxlite.serve.app import HEADER, SEED_IGNORED, SEED_REPLAYED, build_app
from ctxlite.serve.ledger import Budgets, Ledger
from ctxlite.serve.service import PUBLIC_PAD, SEPARATOR, ServeSettings, Service
from tests.docs_pages import REPO

CONTEXT = "Ravi Patel takes metformin."
NEIGHBOUR = "Ravi Patel takes metformin 500 mg twice daily with meals."
IDENTITY = {
    "software": {"ctxlite": "test"},
    "model": None,
    "settings": {"epsilon": 0.5, "lambda": 1.0, "context": "sha256:" + "0" * 64},
}
HEADS, TAILS = 258, 259  # " Yes" and " No": one token each


class CoinBackend(FakeBackend):
    """Every next-token row is a fair coin between two tokens (every other token at logit −100, so
    the two hold all but V·e⁻¹⁰⁰ < 1e-40 of the mass), with or without the context."""

    def _rows(self, cells, lo, hi, tiling=None):
        rows = np.full((hi - lo, super().n_vocab), -100.0, dtype=np.float32)
        rows[:, [HEADS, TAILS]] = 0.0
        return rows


def _service(tmp_path, context=CONTEXT, backend=None, secret=None, budgets=Budgets(), log="serve.jsonl", **more):
    ledger = Ledger(tmp_path / log, IDENTITY, budgets, 0.5)
    settings = ServeSettings("fake", 0.5, 1.0, 32, 4096, frozenset(), replay_secret=secret, **more)
    return Service(backend or FakeBackend(seed=2), context, settings, ledger)


def _post(client, body, path="/v1/completions"):
    """JSON as a client writes it: ASCII, so a lone surrogate travels escaped, as json.dumps writes it."""
    return client.post(path, content=json.dumps(body).encode(), headers={"content-type": "application/json"})


def _coin_flips(client, bodies):
    out = []
    for body in bodies:
        r = _post(client, body, "/v1/chat/completions" if "messages" in body else "/v1/completions")
        assert r.status_code == 200, r.text
        out.append(tuple(r.json()["usage"]["ctxlite"]["token_ids"]))
    return out


# ----- the seed ------------------------------------------------------------------------------------
REPEATS = 64
"""Repeats of one seeded request on the coin: all alike by chance with probability 2·2⁻⁶⁴ ≈ 1e-19."""


def test_a_client_seed_does_not_choose_the_answer(tmp_path):
    """The issue's reproducer made exact: with the client's seed choosing the generator, one seeded
    request answers the same on every repeat, a deterministic function of the private context (one
    request then tells neighbours apart). Served from the server's entropy, 64 repeats of one
    seeded one-token request on a fair coin are not all alike (a failure probability of 1e-19), and
    the answer says the seed was ignored."""
    service = _service(tmp_path, backend=CoinBackend(seed=2))
    body = {"prompt": "Ravi Patel takes metformin", "max_tokens": 1, "seed": 0}
    with TestClient(build_app(service)) as client:
        flips = _coin_flips(client, [body] * REPEATS)
        note = _post(client, body).json()["usage"]["ctxlite"]["seed"]
        unseeded = _post(client, {k: v for k, v in body.items() if k != "seed"}).json()["usage"]["ctxlite"]
    assert len(set(flips)) == 2, flips
    assert note == SEED_IGNORED and "seed" not in unseeded


def test_a_replay_secret_replays_one_request_and_uncouples_two_that_share_a_seed(tmp_path):
    """The operator's replay: the same seeded request gets the same answer every time (and after a
    restart with the same secret); two requests that differ only in the prompt, with one seed, are
    sampled independently: on the coin, 64 seeds give the two prompts' answers alike on every seed
    with probability 2⁻⁶⁴ (a seed choosing the generator makes them alike on all 64); a
    stop sequence or a stream does not change what is sampled."""
    service = _service(tmp_path, backend=CoinBackend(seed=2), secret=b"operator's secret")
    one = {"prompt": "Ravi Patel takes metformin", "max_tokens": 3, "seed": 5}
    with TestClient(build_app(service)) as client:
        again = _coin_flips(client, [one] * 8)
        cut = _post(client, {**one, "stop": ["never said"], "stream": False}).json()
        note = cut["usage"]["ctxlite"]["seed"]
        first = _coin_flips(client, [{**one, "seed": s} for s in range(REPEATS)])
        second = _coin_flips(client, [{**one, "prompt": "Ravi Patel takes", "seed": s} for s in range(REPEATS)])
    assert len(set(again)) == 1 and tuple(cut["usage"]["ctxlite"]["token_ids"]) == again[0] and note == SEED_REPLAYED
    assert first != second and len(set(first)) > 1
    service.ledger.close_log()
    restarted = _service(tmp_path, backend=CoinBackend(seed=2), secret=b"operator's secret", log="again.jsonl")
    with TestClient(build_app(restarted)) as client:
        assert _coin_flips(client, [one]) == again[:1]


# ----- the context's length -------------------------------------------------------------------------
def test_the_contexts_length_decides_nothing_a_client_sees(tmp_path):
    """Two servers whose contexts differ in one record (and in length, by 31 tokens, within one
    ``PUBLIC_PAD``) in a 256-token window: every prompt length from 150 to 239 tokens, with
    max_tokens 1 and 8, is accepted or refused alike, with byte-identical error bodies that name
    public numbers only (the prompt's tokens, max_tokens, the public length and the window)."""
    fake = FakeBackend(seed=2, n_ctx=256)
    lengths = [len(fake.tokenize(c + SEPARATOR, add_bos=True)) for c in (CONTEXT, NEIGHBOUR)]
    assert lengths[0] != lengths[1] and -(-lengths[0] // PUBLIC_PAD) == -(-lengths[1] // PUBLIC_PAD)
    services = [
        _service(tmp_path, context=c, backend=FakeBackend(seed=2, n_ctx=256), log=f"{i}.jsonl")
        for i, c in enumerate((CONTEXT, NEIGHBOUR))
    ]
    assert services[0].public_context_tokens == services[1].public_context_tokens == PUBLIC_PAD
    seen = [[], []]
    for i, service in enumerate(services):
        with TestClient(build_app(service)) as client:
            for words in range(150, 240, 3):
                for max_tokens in (1, 8):
                    r = _post(client, {"prompt": "a" * (words - 1), "max_tokens": max_tokens})
                    seen[i].append((r.status_code, r.content if r.status_code != 200 else b""))
    assert seen[0] == seen[1]
    codes = {code for code, _ in seen[0]}
    assert codes == {200, 400}, codes  # the sweep crosses the boundary
    for code, content in seen[0]:
        if code == 400:
            error = json.loads(content)["error"]
            assert (
                error["code"] == "context_length_exceeded"
                and f"public length ({PUBLIC_PAD} tokens)" in error["message"]
            )


def plain_chat(engine, messages):
    """A chat template for the fake: each message on a line of its own, the assistant's turn opened."""
    for m in messages:
        m["content"].encode("utf-8")  # as llama.cpp's template: UTF-8 bytes (a lone surrogate raises)
    return "".join(f"[{m['role']}] {m['content']}\n" for m in messages) + "[assistant]"


def test_chat_answers_are_the_servers_draw_and_fit_by_the_public_length(tmp_path, monkeypatch):
    """The chat endpoint too: its seed chooses nothing (the coin, 64 repeats), the system message's
    tokens count in the public length and two neighbours' servers accept and refuse a sweep of
    conversation lengths alike, byte for byte; a lone surrogate in a message is a 400."""
    from ctxlite.serve import service as service_module

    monkeypatch.setattr(service_module, "render_chat", plain_chat)
    coin = _service(tmp_path, backend=CoinBackend(seed=2), log="coin.jsonl")
    chat = {"messages": [{"role": "user", "content": "Ravi Patel takes"}], "max_tokens": 1, "seed": 0}
    with TestClient(build_app(coin)) as client:
        flips = _coin_flips(client, [chat] * REPEATS)
        bad = _post(client, {**chat, "messages": [{"role": "user", "content": "\ud800 hi"}]}, "/v1/chat/completions")
    assert len(set(flips)) == 2 and bad.status_code == 400 and bad.json()["error"]["param"] == "messages"
    services = [
        _service(tmp_path, context=c, backend=FakeBackend(seed=2, n_ctx=256), log=f"chat{i}.jsonl")
        for i, c in enumerate((CONTEXT, "Ravi Patel takes metformin 500 mg daily."))  # system lines: 37, 50 tokens
    ]
    assert services[0].public_context_tokens == services[1].public_context_tokens == PUBLIC_PAD
    seen = [[], []]
    for i, service in enumerate(services):
        with TestClient(build_app(service)) as client:
            for words in range(150, 240, 3):
                body = {"messages": [{"role": "user", "content": "a" * words}], "max_tokens": 4}
                r = _post(client, body, "/v1/chat/completions")
                seen[i].append((r.status_code, r.content if r.status_code != 200 else b""))
    assert seen[0] == seen[1] and {code for code, _ in seen[0]} == {200, 400}


def test_a_declared_public_length_below_the_contexts_is_refused_at_start(tmp_path):
    from ctxlite.errors import InvalidParameter

    with pytest.raises(InvalidParameter, match="public-context-tokens 4 is less than"):
        _service(tmp_path, public_context_tokens=4)
    assert _service(tmp_path, public_context_tokens=200, log="b.jsonl").public_context_tokens == 200


# ----- malformed requests ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body,path,param",
    [
        ({"prompt": "\ud800 hi", "max_tokens": 1}, "/v1/completions", "prompt"),
        ({"input": "\ud800 hi"}, "/extras/tokenize", "input"),
        ({"prompt": "hi", "max_tokens": 1, "temperature": 1e-300}, "/v1/completions", "temperature"),
        ({"prompt": "hi", "max_tokens": 1, "temperature": 0.001}, "/v1/completions", "temperature"),
        ({"prompt": "hi", "max_tokens": 1, "mirostat": 2}, "/v1/completions", "mirostat"),
        ({"prompt": "hi", "max_tokens": 1, "top_n_sigma": 1.0}, "/v1/completions", "top_n_sigma"),
        ({"prompt": "hi", "max_tokens": 1, "xtc_probability": 0.5}, "/v1/completions", "xtc_probability"),
        ({"prompt": "hi", "max_tokens": 1, "dry_multiplier": 0.8}, "/v1/completions", "dry_multiplier"),
        ({"prompt": "hi", "max_tokens": 1, "\ud800": 1}, "/v1/completions", "\\ud800"),
        ({"messages": [{"role": "user", "content": "hi"}], "guided_json": {}}, "/v1/chat/completions", "guided_json"),
        ({"messages": [{"role": "user", "content": "hi"}], "echo": True}, "/v1/chat/completions", "echo"),
    ],
)
def test_a_malformed_or_unsupported_request_is_a_400_naming_the_field_and_nothing_is_logged(
    tmp_path, body, path, param
):
    """A lone surrogate (UnicodeEncodeError in tokenize) and a temperature that leaves no finite
    scaled logit were 500s with tracebacks (the latter after an "interrupted" record was logged);
    sampler fields the server does not implement were ignored silently."""
    service = _service(tmp_path)
    with TestClient(build_app(service), raise_server_exceptions=False) as client:
        r = _post(client, body, path)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    service.ledger.close_log()
    assert not read_run_log(tmp_path / "serve.jsonl").records


def test_the_fields_ctxlites_own_client_and_openais_send_are_accepted(tmp_path):
    service = _service(tmp_path)
    body = {
        "model": "fake", "prompt": "hi", "max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "seed": 1, "n": 1,
        "top_k": 0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0, "user": "u", "stream_options": None,
        "logprobs": None, "echo": False, "stop": None,
    }  # fmt: skip
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 1, "top_logprobs": None}
    with TestClient(build_app(service)) as client:
        assert _post(client, body).status_code == 200
        r = _post(client, chat, "/v1/chat/completions")  # the fake has no chat template: that is the 400
        assert r.status_code == 400 and "chat template" in r.text and r.json()["error"]["param"] == "messages", r.text


# ----- the header -------------------------------------------------------------------------------------
def test_the_epsilon_header_is_this_answers_charge_as_the_body_and_the_docs_say(tmp_path):
    """Under (ε, δ) budgets the key's composed spend differs from each answer's n·ε: the header is
    the answer's ``epsilon_total`` on every answer, and docs/serve.md says so."""
    service = _service(tmp_path, budgets=Budgets(total=100.0, delta=1e-5))
    with TestClient(build_app(service)) as client:
        answers = [_post(client, {"prompt": "The dose is", "max_tokens": 8}) for _ in range(3)]
    for r in answers:
        ext = r.json()["usage"]["ctxlite"]
        assert float(r.headers[HEADER]) == ext["epsilon_total"] == 0.5 * len(ext["token_ids"])
    assert ext["epsilon_spent_key"] != ext["epsilon_total"]
    docs = (REPO / "docs" / "serve.md").read_text(encoding="utf-8")
    assert "`X-Ctxlite-Epsilon` (this answer's charge, `usage.ctxlite.epsilon_total`" in " ".join(docs.split())


def test_a_replay_secret_file_is_read_and_a_short_one_refused_in_one_line(tmp_path):
    from click.testing import CliRunner

    from ctxlite.cli import main
    from ctxlite.serve.deployment import read_replay_secret

    (tmp_path / "good").write_text("  0123456789abcdef0123\n", encoding="utf-8")
    (tmp_path / "short").write_text("secret\n", encoding="utf-8")
    (tmp_path / "note.txt").write_text(CONTEXT, encoding="utf-8")
    assert read_replay_secret(str(tmp_path / "good")) == b"0123456789abcdef0123" and read_replay_secret(None) is None
    args = ["serve", "--context", str(tmp_path / "note.txt"), "--epsilon", "1", "--log", str(tmp_path / "serve.jsonl")]
    r = CliRunner().invoke(main, [*args, "--replay-secret-file", str(tmp_path / "short")])
    assert r.exit_code == 2 and "a replay secret needs at least 16" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "serve.jsonl").exists()


def test_the_server_says_the_public_length_and_the_seed_rule_at_start(tmp_path, monkeypatch):
    """The public length is stated where the operator and the guarantee can name it: the start line."""
    from ctxlite.serve import app
    from ctxlite.serve.deployment import Deployment, run_deployment
    from tests.unit.serve.test_deployment import FakeModel

    class Stopped:
        def __init__(self, service, host, port):
            self.started, self.stopped_by = False, None

        def run(self):
            self.started = True

    monkeypatch.setattr(app, "server", Stopped)
    for secret, rule in ((None, "are sampled afresh"), (b"0123456789abcdef", "replay (--replay-secret-file)")):
        said = []
        deployment = Deployment(CONTEXT, 1.0, replay_secret=secret)
        run_deployment(FakeModel(), deployment, str(tmp_path / "s.jsonl"), said.append)
        line = next(s for s in said if "public length" in s)
        assert f"public length is {PUBLIC_PAD} tokens of the 8192-token window" in line and rule in line, said
