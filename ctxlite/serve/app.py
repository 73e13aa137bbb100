"""The HTTP side of ``ctxlite serve`` (FastAPI on uvicorn, the ASGI stack llama-cpp-python's own
server brings): OpenAI's ``/v1/completions``, ``/v1/chat/completions`` (both streamed as
server-sent events with ``stream: true``) and ``/v1/models``; llama-cpp-python's
``/extras/tokenize`` and ``/extras/detokenize`` (the tokenizer ctxlite's own client,
``--backend openai``, needs); ``/health`` and ``/version`` without a key.

Every answer that spends budget carries ``usage.ctxlite`` (what it was charged, ``epsilon_total``
= n·ε for its n sampled tokens, and the budget left) and the header ``X-Ctxlite-Epsilon`` (the same
``epsilon_total``: this answer's charge, not the key's or the server's total; a stream sends it as
its last event's usage instead, since its headers leave before its tokens). Errors are OpenAI's
``{"error": {"message", "type", "param", "code"}}``: 401 for a missing or unknown key, 413 for a
request larger than ``--max-request-bytes``, 400 for a malformed one or a refused parameter, 404
for another model, 403 (``insufficient_quota``) once the budget is spent: a spent budget never
comes back, so 429, which clients (the OpenAI SDK, ctxlite's own) retry, would only be retried.
A server started with ``release_realised`` answers a completion with ``echo`` and ``logprobs`` by
teacher forcing (:meth:`Service.teacher_force`) in llama-cpp-python's echo layout.
"""

from __future__ import annotations

import hmac
import itertools
import json
import time
import uuid

import anyio
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ctxlite._version import __version__
from ctxlite.serve.ledger import key_id
from ctxlite.serve.service import ApiError, Outcome, ServeSettings, Service, unicode_text

HEADER = "X-Ctxlite-Epsilon"


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def build_app(service: Service) -> FastAPI:
    """The ASGI application over ``service``."""
    app = FastAPI(title="ctxlite serve", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    settings = service.settings
    keys = [k.encode() for k in settings.api_keys]

    def authorise(request: Request) -> str:
        if not keys:
            return key_id(None)
        given = request.headers.get("authorization", "")
        token = given[7:].strip() if given[:7].lower() == "bearer " else ""
        if not token or not any(hmac.compare_digest(token.encode(), k) for k in keys):
            raise ApiError(401, "a valid API key is needed (Authorization: Bearer KEY)", code="invalid_api_key")
        return key_id(token)

    async def body_of(request: Request) -> dict:
        cap = settings.max_request_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise ApiError(413, f"the request is larger than {cap} bytes (--max-request-bytes)", code="too_large")
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > cap:
                raise ApiError(413, f"the request is larger than {cap} bytes (--max-request-bytes)", code="too_large")
        try:
            body = json.loads(raw)
        except ValueError:
            raise ApiError(400, "the request body is not JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        return body

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        return _error(exc)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/version")
    async def version():
        return {"version": f"ctxlite-serve {__version__}"}

    @app.get("/v1/models")
    async def models(request: Request):
        authorise(request)
        return {"object": "list", "data": [{"id": settings.model_name, "object": "model", "owned_by": "ctxlite"}]}

    @app.post("/extras/tokenize")
    async def tokenize(request: Request):
        authorise(request)
        text = (await body_of(request)).get("input")
        if not isinstance(text, str):
            raise ApiError(400, "input must be a string", param="input")
        return {"tokens": service.engine.tokenize(unicode_text(text, "input"), add_bos=True, special=True)}

    @app.post("/extras/detokenize")
    async def detokenize(request: Request):
        authorise(request)
        tokens = (await body_of(request)).get("tokens")
        n_vocab = service.engine.n_vocab
        if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n_vocab for t in tokens
        ):
            raise ApiError(400, f"tokens must be a list of token ids in [0, {n_vocab})", param="tokens")
        text = b"".join(service.engine.token_bytes(t) for t in tokens).decode("utf-8", "replace")
        return {"text": text}

    async def serve(request: Request, endpoint: str):
        kid = authorise(request)
        body = await body_of(request)
        req = service.completion_request(body) if endpoint == "completions" else service.chat_request(body)
        made, rid = int(time.time()), ("cmpl-" if endpoint == "completions" else "chatcmpl-") + uuid.uuid4().hex
        if req.forced:
            outcome, values = await run_in_threadpool(service.teacher_force, kid, req)
            piece = lambda t: service.engine.token_bytes(t).decode("utf-8", "replace")  # noqa: E731
            answer = _forced_answer(rid, made, outcome, values, settings, req, piece)
            return JSONResponse(answer, headers={HEADER: "0.0"})
        gen = service.generate(kid, req)
        first = await run_in_threadpool(next, gen)  # a refusal (403, 400) comes here, before any answer
        if req.stream:
            return StreamingResponse(_events(first, gen, req, endpoint, rid, made), media_type="text/event-stream")
        rest = await anyio.to_thread.run_sync(list, gen)  # to its end in one go: a cancel waits for it
        outcome = (rest or [first])[-1][1]
        text = req.echo + outcome.text
        answer = _answer(endpoint, rid, made, text, outcome, settings, req)
        return JSONResponse(answer, headers={HEADER: repr(outcome.charged)})

    async def _events(first, gen, req, endpoint, rid, made):
        def chunk(piece: str, finish=None, outcome: Outcome | None = None) -> str:
            if endpoint == "completions":
                choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": finish}
                obj = "text_completion"
            else:
                choice = {"index": 0, "delta": {"content": piece} if piece else {}, "finish_reason": finish}
                obj = "chat.completion.chunk"
            out = {"id": rid, "object": obj, "created": made, "model": settings.model_name, "choices": [choice]}
            if outcome is not None:
                out["usage"] = _usage(outcome, settings, req)
            return f"data: {json.dumps(out)}\n\n"

        try:
            if endpoint == "chat":
                yield f"data: {json.dumps(_role_chunk(rid, made, settings.model_name))}\n\n"
            if req.echo:
                yield chunk(req.echo)
            item = first
            while True:
                piece, outcome = item
                if outcome is not None:
                    yield chunk("", outcome.finish_reason, outcome)
                    break
                yield chunk(piece)
                item = await anyio.to_thread.run_sync(next, gen)  # a cancel waits for the token in hand
            yield "data: [DONE]\n\n"
        finally:
            # a client gone mid-stream: end its generation (logged, finish "interrupted") and free the
            # engine's lock; shielded, since a cancelled stream would otherwise never get here
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(gen.close)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await serve(request, "completions")

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await serve(request, "chat")

    return app


def _role_chunk(rid: str, made: int, model: str) -> dict:
    choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
    return {"id": rid, "object": "chat.completion.chunk", "created": made, "model": model, "choices": [choice]}


SEED_IGNORED = (
    "ignored: every answer is sampled from the server's own entropy (a client's seed would make it a "
    "deterministic function of the private context)"
)
SEED_REPLAYED = (
    "replayed: sampled from the server's replay secret and this request (endpoint, prompt, temperature, "
    "max_tokens, seed): the same request gets the same answer, another request an independent one"
)


def _usage(outcome: Outcome, settings: ServeSettings, req) -> dict:
    n = len(outcome.steps)
    ext = outcome.usage_extension(settings.epsilon, settings.release_realised)
    if req.seed is not None:
        ext["seed"] = SEED_IGNORED if settings.replay_secret is None else SEED_REPLAYED
    return {
        "prompt_tokens": len(req.prompt_without),
        "completion_tokens": n,
        "total_tokens": len(req.prompt_without) + n,
        "ctxlite": ext,
    }


def _answer(endpoint, rid, made, text, outcome: Outcome, settings: ServeSettings, req) -> dict:
    if endpoint == "completions":
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": outcome.finish_reason}
        obj = "text_completion"
    else:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": outcome.finish_reason}
        obj = "chat.completion"
    return {
        "id": rid,
        "object": obj,
        "created": made,
        "model": settings.model_name,
        "choices": [choice],
        "usage": _usage(outcome, settings, req),
    }


def _forced_answer(rid, made, outcome: Outcome, values: list[float], settings: ServeSettings, req, piece) -> dict:
    """A teacher-forcing answer in llama-cpp-python's echo layout (the dialect of the tokenizer routes
    this server offers): entry j scores prompt token j + 1 (the first prompt token, BOS, has none);
    ``text`` is the prompt, nothing is generated; ``usage.ctxlite`` has each position's realised
    bound and λ_t* (a ``release_realised`` server releases them) and the nothing it charged.
    ``piece(token)``: a token's text alone."""
    pieces = [piece(s.token) for s in outcome.steps]
    offsets = list(itertools.accumulate(map(len, pieces), initial=0))[:-1]
    logprobs = {
        "tokens": pieces,
        "token_logprobs": values,
        "top_logprobs": [{p: v} for p, v in zip(pieces, values)],
        "text_offset": offsets,
    }
    choice = {"index": 0, "text": req.echo, "logprobs": logprobs, "finish_reason": "length"}
    usage = _usage(outcome, settings, req)
    n = len(req.prompt_without) + len(req.forced)
    usage.update(prompt_tokens=n, completion_tokens=0, total_tokens=n)
    usage["ctxlite"]["teacher_forced"] = True
    return {"id": rid, "object": "text_completion", "created": made, "model": settings.model_name,
            "choices": [choice], "usage": usage}  # fmt: skip


class Server(uvicorn.Server):
    """uvicorn's server, remembering the signal that stopped it (``stopped_by``: None, or
    ``signal.SIGINT`` / ``SIGTERM``): it answers the requests in flight first, then returns."""

    stopped_by: int | None = None

    def handle_exit(self, sig, frame) -> None:
        self.stopped_by = self.stopped_by or sig
        super().handle_exit(sig, frame)


def server(service: Service, host: str, port: int) -> Server:
    """A :class:`Server` of :func:`build_app` on ``host:port``, quiet: no access log, so no request
    line, path or header reaches a log."""
    config = uvicorn.Config(build_app(service), host=host, port=port, log_level="warning", access_log=False)
    return Server(config)
