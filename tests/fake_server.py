"""A fake OpenAI-compatible server on loopback that misbehaves on purpose (no model behind it).

It speaks llama.cpp's dialect (``/tokenize`` and ``/detokenize`` with token ids, ``/props``) over a
byte tokenizer: token ``b + 3`` is the byte ``b``, token 1 is BOS; or, with ``dialect``, vLLM's
(``/tokenize`` with ``prompt``, answering ``max_model_len``; ``/v1/models``, ``/version``) or
llama-cpp-python's (``/extras/tokenize``, which always adds BOS; text prompts; an echo that leaves the BOS
out and has null as its first entry, as llama-cpp-python 0.3.36's ``create_completion``). Its
completions echo the prompt with log-probabilities that are a fixed function of each token and the
tokens before it (so ablations change them and a score run has influence to find), plus one
generated token, a space, with its own log-probability (the same function;
``report_generated=False``: the prompt's entries only).

Lies (:data:`FAULTS`) that keep every value plausible: ``shifted`` answers ``true[1:] +
[generated]`` (each prompt token carries the next one's value, the right count, every value finite
and ≤ 0, the tokens as sent), ``shifted_null`` the same behind the null first entry a vLLM echo
has, ``row_after`` scores each prompt token with the row *after* it (llama-cpp-python's own echo
on a model without BOS), its generated token honestly.

``FakeServer(fault)`` answers every completion whose prompt holds ``trigger`` (default: every
completion) with one misbehaviour from :data:`FAULTS`; everything else is answered correctly,
so a run can finish an example before the fault. It counts completions and the bytes it sent.

For concurrency (tests/server/test_concurrency.py) it can also stagger its answers, each request held
``delay`` · u seconds, u ∈ [0, 1) a hash of ``seed`` and the request (so concurrent requests end in
a seeded random order, the same whichever order they arrived in); it counts the requests in flight
(the most ever, all endpoints and completions alone); it can ``hold`` every completion whose prompt
holds a text until ``release()``; and it can die: ``die_after`` completions answered (or
``dead = True``), every request is dropped without an answer, as by a crashed server, until the
test sets ``dead = False`` (the same URL, so a resumed run is the same run).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler

from tests.servers import LoopbackHTTP

BOS = 1
BYTE0 = 3
MODEL = "fake-model"

FAULTS = (
    "positive",  # one log-probability of +0.5
    "nan",  # a NaN log-probability
    "neg_inf",  # a -Infinity log-probability
    "flat",  # every log-probability -0.01: each valid, label probabilities that sum above 1
    "echo",  # the echoed tokens are not the tokens sent
    "short",  # fewer token_logprobs than the prompt has tokens
    "error200",  # HTTP 200 with {"error": {...}}
    "drip",  # a valid answer, one byte every 20 ms (per-read timeouts never fire)
    "huge",  # a 1 GiB answer, no Content-Length, streamed until the client hangs up
    "huge_declared",  # a Content-Length of 1 GiB
    "no_logprobs",  # a valid completion with "logprobs": null (a server that offers none)
    "shifted",  # token_logprobs = true[1:] + [generated]: every value plausible, one token off
    "shifted_null",  # [null] + true[2:] + [generated]: the same shift behind a null first entry
    "row_after",  # prompt token i scored with the row after it, log p(token_i | tokens ≤ i)
)
DIALECTS = ("llama.cpp", "vllm", "llama-cpp-python")
GENERATED = " "
"""The text every completion generates (one token, the byte of a space)."""
ERROR_MESSAGE = "KV cache is full: request 42 rejected (fake overload)"
GIB = 2**30


def encode(text: str, bos: bool = False) -> list[int]:
    return ([BOS] if bos else []) + [b + BYTE0 for b in text.encode("utf-8")]


def decode(tokens) -> str:
    return bytes(t - BYTE0 for t in tokens if t >= BYTE0).decode("utf-8", "replace")


def logprob(before, token: int) -> float:
    """log p(token | before) of the fake model, a function of the token, the one before it and the sum
    of all before it (so removing context anywhere changes it): between -1 and -8.5 nats, in steps of
    0.75 (two values that differ differ by more than the alignment check's tolerance, as a real
    model's sampled token and a fixed one mostly do)."""
    return -(1.0 + 0.75 * ((token * 7 + before[-1] * 3 + sum(before)) % 11))


class FakeServer(LoopbackHTTP):
    """A threaded HTTP server on 127.0.0.1 with one ``fault`` (see :data:`FAULTS`) or none."""

    def __init__(
        self,
        fault: str | None = None,
        trigger: str | None = None,
        *,
        delay: float = 0.0,
        seed: int = 0,
        hold: str | None = None,
        die_after: int | None = None,
        dialect: str = "llama.cpp",
        report_generated: bool = True,
    ):
        assert fault is None or fault in FAULTS, fault
        assert dialect in DIALECTS, dialect
        self.dialect, self.report_generated = dialect, report_generated
        self.fault, self.trigger = fault, trigger
        self.delay, self.seed, self.hold, self.die_after = delay, seed, hold, die_after
        self.completions = self.faulty = 0
        self.sent = 0  # bytes of faulty answers written
        self.in_flight = self.max_in_flight = 0  # requests of every endpoint
        self.completions_in_flight = self.max_completions_in_flight = 0
        self.dead = False
        self.held = threading.Event()  # set: the held completions go on
        self.holding = 0  # completions waiting for release()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if server.dead:
                    return server.drop(self)
                if self.path == "/props" and server.dialect == "llama.cpp":
                    return self._json({"default_generation_settings": {"n_ctx": 2048}, "build_info": "fake-1"})
                if self.path == "/version" and server.dialect == "vllm":
                    return self._json({"version": "fake-vllm-1"})
                if self.path == "/v1/models" and server.dialect == "vllm":
                    return self._json({"data": [{"id": MODEL, "max_model_len": 2048}]})
                return self._json({"error": "not found"}, 404)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                if server.dead:
                    return server.drop(self)
                with server.lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                self.counted = True  # until its answer starts (``answered``)
                if self.path == "/v1/completions":
                    with server.lock:
                        server.completions_in_flight += 1
                        server.max_completions_in_flight = max(
                            server.max_completions_in_flight, server.completions_in_flight
                        )
                    self.completion = True
                try:
                    server.stagger(self.path, raw)
                    self._post(json.loads(raw or b"{}"))
                finally:
                    server.answered(self)

            def _post(self, body):
                dialect = server.dialect
                if self.path == "/tokenize" and dialect == "llama.cpp":
                    return self._json({"tokens": encode(body.get("content", ""), bool(body.get("add_special")))})
                if self.path == "/detokenize" and dialect == "llama.cpp":
                    return self._json({"content": decode(body.get("tokens", []))})
                if self.path == "/tokenize" and dialect == "vllm":
                    tokens = encode(body.get("prompt", ""), bool(body.get("add_special_tokens", True)))
                    return self._json({"tokens": tokens, "count": len(tokens), "max_model_len": 2048})
                if self.path == "/detokenize" and dialect == "vllm":
                    return self._json({"prompt": decode(body.get("tokens", []))})
                if self.path == "/extras/tokenize" and dialect == "llama-cpp-python":
                    return self._json({"tokens": encode(body.get("input", ""), bos=True)})
                if self.path == "/extras/detokenize" and dialect == "llama-cpp-python":
                    return self._json({"text": decode(body.get("tokens", []))})
                if self.path == "/v1/completions":
                    return server._completion(self, body)
                return self._json({"error": "not found"}, 404)

            def _json(self, obj, status=200):
                server.write(self, json.dumps(obj).encode(), status)

        self.serve(Handler)

    # ----- timing and death ------------------------------------------------
    def stagger(self, path: str, raw: bytes) -> None:
        """Hold the request ``delay`` · u seconds, u a hash of the seed and the request."""
        if self.delay > 0:
            digest = hashlib.sha256(f"{self.seed}:{path}:".encode() + raw).digest()
            time.sleep(self.delay * int.from_bytes(digest[:8], "big") / 2**64)

    def release(self) -> None:
        """Let the held completions (``hold``) go on, and every later one."""
        self.held.set()

    def answered(self, handler) -> None:
        """The request of ``handler`` is no longer in flight: its answer starts now (counted before the
        first byte goes out, so a client that sends its next request on reading this answer is never
        seen with one more in flight than it has)."""
        with self.lock:
            if getattr(handler, "counted", False):
                handler.counted = False
                self.in_flight -= 1
            if getattr(handler, "completion", False):
                handler.completion = False
                self.completions_in_flight -= 1

    @staticmethod
    def drop(handler) -> None:
        """No answer: the connection is closed as a crashed server's would be."""
        handler.close_connection = True

    # ----- answers ---------------------------------------------------------
    def write(self, handler, content: bytes, status: int = 200, length: bool = True) -> None:
        self.answered(handler)
        try:
            handler.send_response(status)
            handler.send_header("content-type", "application/json")
            if length:
                handler.send_header("content-length", str(len(content)))
            handler.end_headers()
            handler.wfile.write(content)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _completion(self, handler, body: dict) -> None:
        prompt = body["prompt"]
        if self.dialect == "llama-cpp-python":  # text prompts only; BOS always added
            if not isinstance(prompt, str):
                return self.write(handler, json.dumps({"error": "prompt must be text"}).encode(), 400)
            prompt = encode(prompt, bos=True)
        if self.hold is not None and self.hold in decode(prompt):
            with self.lock:
                self.holding += 1
            self.held.wait()
        with self.lock:
            if self.die_after is not None and self.completions >= self.die_after:
                self.dead = True
            if self.dead:
                return self.drop(handler)
            self.completions += 1
            faulty = self.fault is not None and (self.trigger is None or self.trigger in decode(prompt))
            self.faulty += faulty
        fault = self.fault if faulty else None
        if not body.get("echo") or fault == "no_logprobs":
            choice = {"text": " yes", "index": 0, "logprobs": None}
            return self.write(handler, json.dumps({"choices": [choice]}).encode())
        generated = encode(GENERATED)[0]
        every = [*prompt, generated]
        values = [None] + [logprob(every[:i], every[i]) for i in range(1, len(every))]
        tokens = [decode([t]) for t in every]
        if fault == "shifted":
            values = values[1:] + values[-1:]
        elif fault == "shifted_null":
            values = [None] + values[2:] + values[-1:]
        elif fault == "row_after":
            values = [logprob(every[: i + 1], every[i]) for i in range(len(prompt))] + values[-1:]
        if self.dialect == "llama-cpp-python":  # its echo leaves the BOS out, and nulls its first entry
            values, tokens = [None, *values[2:]], tokens[1:]
        if not self.report_generated:  # the echo of the prompt alone (as ctxlite serve's)
            values, tokens = values[:-1], tokens[:-1]
        if fault == "positive":
            values[-2] = 0.5
        elif fault == "nan":
            values[-2] = math.nan
        elif fault == "neg_inf":
            values[-2] = -math.inf
        elif fault == "flat":
            values = [None] + [-0.01] * (len(values) - 1)
        elif fault == "echo":
            tokens[-2] = "Z" if tokens[-2] != "Z" else "Y"
        elif fault == "short":
            values, tokens = values[:2], tokens[:2]
        elif fault == "error200":
            return self.write(handler, json.dumps({"error": {"message": ERROR_MESSAGE, "code": 503}}).encode())
        answer = {
            "id": "cmpl-fake",
            "object": "text_completion",
            "model": MODEL,
            "choices": [{"text": decode(prompt) + GENERATED, "index": 0, "finish_reason": "length",
                         "logprobs": {"tokens": tokens, "token_logprobs": values}}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": 1},
        }  # fmt: skip
        content = json.dumps(answer).encode()  # NaN and -Infinity as Python writes them (not strict JSON)
        if fault == "drip":
            return self._drip(handler, content)
        if fault in ("huge", "huge_declared"):
            return self._huge(handler, declared=fault == "huge_declared")
        self.write(handler, content)

    def _drip(self, handler, content: bytes) -> None:
        try:
            handler.send_response(200)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(content)))
            handler.end_headers()
            handler.wfile.flush()
            for i in range(len(content)):
                handler.wfile.write(content[i : i + 1])
                handler.wfile.flush()
                self.sent += 1
                time.sleep(0.02)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _huge(self, handler, declared: bool) -> None:
        block = b" " * (1 << 20)
        try:
            handler.send_response(200)
            handler.send_header("content-type", "application/json")
            if declared:
                handler.send_header("content-length", str(GIB))
            handler.send_header("connection", "close")
            handler.end_headers()
            handler.wfile.write(b'{"choices": [{"text": "')
            for _ in range(GIB // len(block)):
                handler.wfile.write(block)
                self.sent += len(block)
        except (BrokenPipeError, ConnectionResetError):
            pass
        handler.close_connection = True
