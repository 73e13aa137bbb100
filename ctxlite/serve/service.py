"""What ``ctxlite serve`` does with a request, apart from HTTP: check it, build the two prompts
(with and without the private context), run the token loop on the one engine (behind a lock:
requests are served one at a time, in arrival order), charge the ledger, and say what was spent.

The prompts: a completion's ``prompt`` P gives the tokens of ``BOS + context + separator``
followed by P's own tokens (with) and ``BOS + P`` (without: the empty context); a chat's messages
M give the model's chat template of ``[system: context] + M`` (with) and of ``M`` (without). The
private context is a prefix of every with-context prompt, so the engine's KV cache holds its cells
from one request to the next.

Every parameter that would change the sampled distribution away from the mixed one (top-k,
top-p, min-p, typical-p, penalties, logit bias, several choices, greedy decoding) is refused
with an OpenAI-style 400 naming it: a filter puts 0 where p_T(·|∅) is positive, and greedy
decoding is a deterministic function of the context; either voids the bound. Log-probabilities
are never returned (``logprobs`` is null): they are a deterministic function of the context.
A client's ``seed`` chooses nothing (:meth:`Service.stream_seed`), a field the server does not read
is refused, and whether a request fits the window is decided from public numbers only
(:meth:`Service.check_fits`). A server started with ``release_realised`` (for testing a server,
never a deployment) answers a completion with ``echo`` and ``logprobs`` by teacher forcing instead
(:meth:`Service.teacher_force`), so that a client can check the bound on tokens of its choice,
``ctxlite score`` among them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ctxlite.errors import ContextOverflow, CtxliteError, InvalidParameter
from ctxlite.runtime.chat import render_chat
from ctxlite.serve.decoding import Step, StopText, TextStream, forced_steps, steps
from ctxlite.serve.ledger import Ledger

SEPARATOR = "\n\n"
"""Between the private context and a completion's prompt."""

NEUTRAL = {
    "top_p": (1, 1.0),
    "top_k": (0, -1),
    "min_p": (0, 0.0),
    "typical_p": (1, 1.0),
    "tfs_z": (1, 1.0),
    "repeat_penalty": (1, 1.0),
    "repetition_penalty": (1, 1.0),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "n": (1,),
    "best_of": (1,),
    "mirostat_mode": (0,),
}
"""The parameters that change the sampled distribution, and the values that leave it alone
(absent or null is fine too)."""

ACCEPTED = {
    "completions": frozenset({"prompt", "echo", "logprobs", "max_tokens"}),
    "chat": frozenset({"messages", "max_tokens", "max_completion_tokens", "logprobs", "top_logprobs"}),
}
"""The fields each endpoint reads, besides ``COMMON``."""

COMMON = frozenset(NEUTRAL) | {
    "model", "temperature", "seed", "stream", "stream_options", "stop", "logit_bias", "user", "metadata", "store",
    "service_tier",
}  # fmt: skip
"""Fields of both endpoints: the sampling ones read and checked, and OpenAI's bookkeeping fields
(``user``, ``metadata``, ``store``, ``service_tier``, ``stream_options``: the last event of a
stream always carries the usage), which change nothing that is sampled. Any other field is refused
by name: a sampler setting the server ignored (llama.cpp's ``mirostat``, ``top_n_sigma``,
``xtc_probability``, ``dry_multiplier``, vLLM's ``guided_json``, OpenAI's ``response_format``, ...)
would answer from another distribution than the one the client asked for."""

MIN_TEMPERATURE = 0.01
"""The lowest temperature served. The logits are divided by T: at T = 1e-300 every scaled float32
logit is ±inf and no distribution is left to sample (a 500 before this minimum). Above it the
scaled logits stay finite for any logit below 3e36 in magnitude, and max|pmi| scales as 1/T with
the rounding of the log-ratio, so the bound's relative margin (``EPSILON_MARGIN``) is unchanged;
below it the answer is already greedy decoding in all but rounding."""

PUBLIC_PAD = 64
"""The private context's public length is its window share rounded up to a multiple of this many
tokens (:attr:`Service.public_context_tokens`)."""

CHAT_SLACK = 8
"""Tokens added to the chat system message's measured share before rounding: the chat template
renders the context inside a conversation, where the tokens at its edges may merge otherwise."""

BUDGET_SPENT = "privacy_budget"
"""The ``finish_reason`` of a response cut short because the budget ran out."""

TEACHER_FORCED = "teacher_forced"
"""The ``finish_reason`` a teacher-forcing answer is logged with (its answer says ``length``)."""


class ApiError(Exception):
    """An OpenAI-style error answer: HTTP ``status`` and ``{"error": {message, type, param, code}}``."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param=None, code=None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ServeSettings:
    """What the operator fixed at start."""

    model_name: str
    epsilon: float | None
    lam: float = 1.0
    max_tokens_cap: int = 256
    max_request_bytes: int = 65536
    api_keys: frozenset = field(default_factory=frozenset)
    release_realised: bool = False
    """Also answer each token's realised bound and λ_t* (``epsilon_per_token``, ``lambda_per_token``),
    and the mixed distribution's log-probabilities of given tokens (teacher forcing: ``echo`` with
    ``logprobs``). Off by default: the tight λ_t* reveals where the log-ratio reaches ε wherever
    the bound binds, and a log-probability is a deterministic function of the private context; the
    sampling bound covers neither. The log keeps both."""
    replay_secret: bytes | None = None
    """The operator's secret for replayable answers: a request with a ``seed`` is sampled from a
    generator seeded by HMAC-SHA256(secret, the request's endpoint, prompt tokens, temperature,
    max_tokens and seed), so the same request gets the same answer and two requests that differ in
    any of these are sampled independently. None (the default): every answer is sampled from the
    operator system's entropy and a client's ``seed`` is ignored."""
    public_context_tokens: int | None = None
    """The private context's length as the operator declares it public (None: its window share
    rounded up to a multiple of ``PUBLIC_PAD``); never below that share."""


@dataclass
class Request:
    """A checked request: the two prompts and how to sample."""

    endpoint: str
    prompt_with: list[int]
    prompt_without: list[int]
    max_tokens: int
    temperature: float
    seed: int | None
    stream: bool
    echo: str = ""
    stop: tuple[str, ...] = ()
    forced: tuple[int, ...] = ()
    """Teacher forcing (``echo`` with ``logprobs`` on a ``release_realised`` server): the tokens of
    ``prompt_without`` after its first, each scored after both prompts' tokens before it, nothing
    sampled."""


@dataclass
class Outcome:
    """A response as it ends: its tokens' steps, text, why it stopped and what it cost."""

    steps: list[Step]
    text: str
    finish_reason: str
    charged: float
    budget_left: float
    key_id: str
    delta: float | None = None
    composed_key: float | None = None
    neighbour: float | None = None
    """The answer's ε against a neighbouring context: 2nε, or with δ its n tokens composed
    optimally at 2ε per token (None: 2·``charged``)."""
    composed_key_neighbour: float | None = None
    """With δ: the key's tokens composed optimally at 2ε per token (not twice ``composed_key``)."""

    def usage_extension(self, epsilon: float | None, release_realised: bool = False) -> dict:
        """``usage.ctxlite``: what the answer was charged, and each token's realised bound and λ_t*
        only when the operator releases them (:attr:`ServeSettings.release_realised`)."""
        realised = (
            {"epsilon_per_token": [s.epsilon for s in self.steps], "lambda_per_token": [s.lam for s in self.steps]}
            if release_realised
            else {"realised": "withheld: a function of the private context outside the bound (in the server's log)"}
        )
        return {
            "epsilon": epsilon,
            "token_ids": [s.token for s in self.steps],
            **realised,
            "epsilon_total": self.charged,
            "epsilon_total_neighbour": 2 * self.charged if self.neighbour is None else self.neighbour,
            "budget_left": None if math.isinf(self.budget_left) else self.budget_left,
            "composition": "basic: epsilon per sampled token (end-of-generation included), summed",
            **(
                {}
                if self.delta is None
                else {
                    "composition": "optimal (Kairouz, Oh and Viswanath 2015): epsilon per sampled token "
                    "(end-of-generation included), budgets kept as (epsilon, delta)",
                    "delta": self.delta,
                    "epsilon_spent_key": self.composed_key,
                    "epsilon_spent_key_neighbour": self.composed_key_neighbour,
                }
            ),
        }


def _number(body: Mapping, name: str, default, *, integer: bool = False):
    value = body.get(name, default)
    if value is None:
        return default
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or (not integer and not math.isfinite(value)):
        raise ApiError(400, f"{name} must be a {'whole ' if integer else ''}number, got {value!r}", param=name)
    return value


def _shown(name: str) -> str:
    """A client's field name as an error may show it: a lone surrogate escaped (JSON cannot carry it)."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def unicode_text(value: str, param: str) -> str:
    """``value`` if it is Unicode text that UTF-8 can encode, else a 400 naming ``param``."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ApiError(
            400, f"{param} is not valid Unicode text: a lone surrogate at character {exc.start}", param=param
        ) from None
    return value


def replay_seed(secret: bytes, endpoint: str, prompt: Sequence[int], temperature: float, max_tokens: int, seed: int):
    """The generator seed of a replayed request: HMAC-SHA256 of its endpoint, prompt tokens (without
    the context), temperature, ``max_tokens`` and ``seed`` under the operator's secret, as an integer."""
    request = {
        "endpoint": endpoint, "prompt": [int(t) for t in prompt], "temperature": float(temperature).hex(),
        "max_tokens": int(max_tokens), "seed": int(seed),
    }  # fmt: skip
    digest = hmac.new(secret, json.dumps(request, sort_keys=True).encode(), hashlib.sha256).digest()
    return int.from_bytes(digest, "big")


MAX_STOPS, MAX_STOP_CHARS = 4, 64
"""OpenAI's limit on stop sequences, and ours on each one's length."""


def _stops(body: Mapping) -> tuple[str, ...]:
    """A request's ``stop``: absent, null, one string or a list of up to ``MAX_STOPS`` non-empty strings."""
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    ok = isinstance(stops, list) and len(stops) <= MAX_STOPS
    if not ok or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stops):
        raise ApiError(
            400,
            f"stop must be a string or a list of at most {MAX_STOPS} non-empty strings of at most {MAX_STOP_CHARS} "
            f"characters, got {stop!r}",
            param="stop",
        )
    return tuple(stops)


class Service:
    """One engine, one private context, one ledger; :meth:`generate` serves one request at a time."""

    def __init__(self, engine, context: str, settings: ServeSettings, ledger: Ledger):
        self.engine, self.context, self.settings, self.ledger = engine, context, settings, ledger
        self.lock = threading.Lock()
        self._chat = None
        self._prefix = engine.tokenize(context + SEPARATOR, add_bos=True, special=True)
        self.window = int(engine.describe()["n_ctx"])
        bos = engine.bos_id
        need = max(len(self._prefix) - (1 if bos is not None and self._prefix[:1] == [bos] else 0), self._chat_share())
        declared = settings.public_context_tokens
        if declared is not None and declared < need:
            raise InvalidParameter(
                f"--public-context-tokens {declared} is less than the {need} tokens the private context takes "
                "in a prompt: declare at least that"
            )
        self.public_context_tokens = declared if declared is not None else -(-need // PUBLIC_PAD) * PUBLIC_PAD
        """The private context's share of the window, public: what decides whether a request fits
        (with the request's own numbers), the only length of the context an answer or an error
        reveals. The guarantee holds between contexts of the same public length."""
        if self.public_context_tokens >= self.window:
            raise InvalidParameter(
                f"the private context's public length ({self.public_context_tokens} tokens) leaves no room in the "
                f"context window ({self.window} tokens): raise --n-ctx"
            )

    def _chat_share(self) -> int:
        """The tokens the context's system message adds to a conversation (with ``CHAT_SLACK``), or 0
        for a model without a chat template."""
        probe = [{"role": "user", "content": "Hello."}]
        try:
            with_ = render_chat(self.engine, [{"role": "system", "content": self.context}, *probe])
            without = render_chat(self.engine, probe)
        except CtxliteError:
            return 0
        tok = self.engine.tokenize
        return len(tok(with_, add_bos=True, special=True)) - len(tok(without, add_bos=True, special=True)) + CHAT_SLACK

    def check_fits(self, prompt_tokens: int, max_tokens: int, param: str = "prompt") -> None:
        """Refuse a request that does not fit the window, decided from public numbers only (its own
        prompt's tokens, ``max_tokens``, the context's public length and the window): the neighbour's
        server accepts and refuses alike, with the same words."""
        public, window = self.public_context_tokens, self.window
        total = prompt_tokens + public + max_tokens
        if total > window:
            asked = f" + max_tokens ({max_tokens})" if max_tokens else ""
            raise ApiError(
                400,
                f"the prompt ({prompt_tokens} tokens){asked} + the private context's public length ({public} tokens) "
                f"is {total} tokens but the context window is {window} tokens",
                param=param if prompt_tokens + public + min(max_tokens, 1) > window else "max_tokens",
                code="context_length_exceeded",
            )

    def stream_seed(self, req: Request) -> int | None:
        """The seed of a request's generator: None (the system's entropy) unless the operator set a
        replay secret and the request has a ``seed``; then HMAC-SHA256(secret, the request's endpoint,
        prompt tokens, temperature, max_tokens and seed). ``stop``, ``stream`` and ``echo`` only cut
        or present the sampled tokens, and do not enter."""
        secret = self.settings.replay_secret
        if secret is None or req.seed is None:
            return None
        return replay_seed(secret, req.endpoint, req.prompt_without, req.temperature, req.max_tokens, req.seed)

    # ----- checking a request ---------------------------------------------
    def check_sampling(self, body: Mapping, endpoint: str) -> tuple[int, float, int | None, bool]:
        """(max_tokens, temperature, seed, stream) of a request, or an ApiError."""
        unknown = sorted(set(body) - COMMON - ACCEPTED[endpoint])
        if unknown:
            names = ", ".join(map(_shown, unknown))
            raise ApiError(
                400,
                f"unsupported field(s) {names}: ctxlite serve refuses what it does not implement, since a sampler "
                "setting it ignored would answer from another distribution than the one asked for "
                "(docs/serve.md lists the fields it reads)",
                param=_shown(unknown[0]),
            )
        for name, neutral in NEUTRAL.items():
            v = body.get(name)
            if v is not None and v not in neutral:
                raise ApiError(
                    400,
                    f"{name}={v!r} is refused: ctxlite serve samples the whole epsilon-bounded mixed distribution "
                    f"(a filter or penalty voids the bound); leave {name} out or set it to {neutral[0]}",
                    param=name,
                )
        if body.get("logit_bias"):
            raise ApiError(400, "logit_bias is refused: it changes the bounded distribution", param="logit_bias")
        model = body.get("model")
        if model is not None and model != self.settings.model_name:
            raise ApiError(
                404, f"the model {model!r} does not exist: this server serves {self.settings.model_name!r}",
                param="model", code="model_not_found",
            )  # fmt: skip
        names = ("max_completion_tokens", "max_tokens") if endpoint == "chat" else ("max_tokens",)
        given = [body.get(n) for n in names if body.get(n) is not None]
        default = 16 if endpoint == "completions" else self.settings.max_tokens_cap
        max_tokens = _number({"max_tokens": given[0] if given else None}, "max_tokens", default, integer=True)
        cap = self.settings.max_tokens_cap
        if not 1 <= max_tokens <= cap:
            raise ApiError(400, f"max_tokens must be in [1, {cap}] (this server's cap), got {max_tokens}",
                           param="max_tokens")  # fmt: skip
        temperature = float(_number(body, "temperature", 1.0))
        if not temperature > 0:
            raise ApiError(
                400,
                f"temperature must be > 0, got {temperature:g}: greedy decoding is a deterministic function of the "
                "private context, so no epsilon holds for it",
                param="temperature",
            )
        if temperature < MIN_TEMPERATURE:
            raise ApiError(
                400,
                f"temperature must be >= {MIN_TEMPERATURE:g}, got {temperature:g}: below it the scaled logits "
                "overflow (and the answer is greedy decoding in all but rounding)",
                param="temperature",
            )
        seed = _number(body, "seed", None, integer=True)
        if seed is not None and seed < 0:
            raise ApiError(400, f"seed must be >= 0, got {seed}", param="seed")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise ApiError(400, f"stream must be true or false, got {stream!r}", param="stream")
        return max_tokens, temperature, seed, stream

    def completion_request(self, body: Mapping) -> Request:
        max_tokens, temperature, seed, stream = self.check_sampling(body, "completions")
        prompt = body.get("prompt", "")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise ApiError(400, "prompt must be one string (token ids and batches are not supported)", param="prompt")
        echo = body.get("echo", False)
        if not isinstance(echo, bool):
            raise ApiError(400, f"echo must be true or false, got {echo!r}", param="echo")
        without = self.engine.tokenize(unicode_text(prompt, "prompt"), add_bos=True, special=True)
        if echo and body.get("logprobs") is not None and self.settings.release_realised:
            return self._forced_request(body, prompt, without, max_tokens, temperature, stream)
        bos = self.engine.bos_id
        with_ = self._prefix + without[1 if bos is not None and without[:1] == [bos] else 0 :]
        return Request(
            "completions", with_, without, max_tokens, temperature, seed, stream, prompt if echo else "", _stops(body)
        )

    def _forced_request(self, body: Mapping, prompt: str, without: list[int], max_tokens: int, temperature, stream):
        """A teacher-forcing request: the with-context prompt is ``BOS + context + separator`` followed
        by the prompt's own tokens (so both prompts force the same tokens; a sampled completion
        tokenizes context, separator and prompt together instead). Its two prompts are what comes
        before the first forced token."""
        n = body.get("logprobs")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ApiError(400, f"logprobs must be an integer >= 0, got {n!r}", param="logprobs")
        if stream:
            raise ApiError(400, "echo with logprobs (teacher forcing) is answered in one piece: stream must be false",
                           param="stream")  # fmt: skip
        bos = self.engine.bos_id
        skip = 1 if bos is not None and without[0] == bos else 0
        if len(without) < 2:
            need = "one token after BOS" if skip else "two tokens (the first is not scored)"
            raise ApiError(400, f"echo with logprobs needs a prompt of at least {need}", param="prompt")
        prefix = self._prefix
        return Request(
            "completions", prefix + without[skip:1], without[:1], max_tokens, temperature, None, False, prompt,
            forced=tuple(without[1:]),
        )  # fmt: skip

    def chat_request(self, body: Mapping) -> Request:
        max_tokens, temperature, seed, stream = self.check_sampling(body, "chat")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "messages must be a non-empty list", param="messages")
        try:
            without = render_chat(self.engine, messages)
            with_ = render_chat(self.engine, [{"role": "system", "content": self.context}, *messages])
        except CtxliteError as exc:
            raise ApiError(400, str(exc), param="messages") from None
        except UnicodeEncodeError as exc:
            raise ApiError(
                400, f"messages are not valid Unicode text: a lone surrogate ({exc.object[exc.start]!r})",
                param="messages",
            ) from None  # fmt: skip
        tok = self.engine.tokenize
        return Request(
            "chat",
            tok(with_, add_bos=True, special=True),
            tok(without, add_bos=True, special=True),
            max_tokens,
            temperature,
            seed,
            stream,
            stop=_stops(body),
        )

    # ----- serving --------------------------------------------------------
    def generate(self, kid: str, req: Request) -> Iterator[tuple[str, Outcome | None]]:
        """Yield ``(text piece, None)`` as tokens come, then ``("", Outcome)``. Holds the engine lock
        from the first ``next`` to the end (or to ``close``: a disconnected client's response is
        logged with what was sampled). Raises ApiError 403 before anything when the budget is spent."""
        with self.lock:
            ledger, eps = self.ledger, self.settings.epsilon
            affordable = ledger.affordable(kid)
            if affordable is not None and affordable < 1:
                raise ApiError(
                    403,
                    f"{ledger.spent_message(kid)}: nothing more can be released over the private context",
                    kind="insufficient_quota",
                    code="privacy_budget_exhausted",
                )
            asked = "prompt" if req.endpoint == "completions" else "messages"
            self.check_fits(len(req.prompt_without), req.max_tokens, asked)
            if len(req.prompt_with) > len(req.prompt_without) + self.public_context_tokens:  # a chat template only
                raise ApiError(
                    400,
                    f"this conversation renders the private context in more than its public length "
                    f"({self.public_context_tokens} tokens); start the server with a larger --public-context-tokens",
                    param="messages", code="context_length_exceeded",
                )  # fmt: skip
            n = req.max_tokens if affordable is None else min(req.max_tokens, affordable)
            record = ledger.open(kid, req.endpoint, n)
            taken: list[Step] = []
            finish, parts = "interrupted", []  # what a response closed before its end (a client gone) logs
            text, shown = TextStream(self.engine), StopText(req.stop)
            try:
                for step in steps(
                    self.engine, req.prompt_with, req.prompt_without, self.settings.lam, eps,
                    req.temperature, n, self.stream_seed(req),
                ):  # fmt: skip
                    taken.append(step)
                    if step.eog:
                        finish = "stop"
                        break
                    piece = shown.add(text.add(step.token))
                    parts.append(piece)
                    if piece:
                        yield piece, None
                    if shown.stopped:
                        finish = "stop"
                        break
                else:
                    finish = BUDGET_SPENT if n < req.max_tokens else "length"
                tail = shown.add(text.flush())
                tail += shown.flush()
                if tail:
                    parts.append(tail)
                    yield tail, None
            finally:
                charged = ledger.close(record, kid, req.endpoint, taken, finish)
            yield "", self._outcome(taken, "".join(parts), finish, charged, kid)

    def teacher_force(self, kid: str, req: Request) -> tuple[Outcome, list[float]]:
        """Answer a teacher-forcing request (:attr:`Request.forced`): at each forced token the step
        sampling would take (the tight λ_t*, so |log p̄ − log p_T(·|∅)| ≤ ε
        over the whole vocabulary) and log p̄(token); logged before it is answered, charged nothing (a
        log-probability is not a sampled release, and no budget covers it: only a server started
        with ``release_realised`` answers this). The Outcome (no text, nothing charged) and the
        log-probabilities."""
        self.check_fits(len(req.prompt_without) + len(req.forced), 0)
        with self.lock:
            try:
                forced = forced_steps(
                    self.engine, req.prompt_with, req.prompt_without, req.forced, self.settings.lam,
                    self.settings.epsilon, req.temperature,
                )  # fmt: skip
            except ContextOverflow as exc:  # its first check, before any decode
                raise ApiError(400, str(exc), param="prompt", code="context_length_exceeded") from None
            taken, values = [s for s, _ in forced], [v for _, v in forced]
            self.ledger.forced(kid, req.endpoint, taken, values)
            return self._outcome(taken, "", TEACHER_FORCED, 0.0, kid), values

    def _outcome(self, taken: list[Step], text: str, finish: str, charged: float, kid: str) -> Outcome:
        """An answer's Outcome with the budget state after it (with δ, the key's composed ε, and
        against a neighbour the optimal composition at 2ε per token: :meth:`Ledger.composed_neighbour`)."""
        ledger = self.ledger
        delta = ledger.budgets.delta
        if delta is None:
            return Outcome(taken, text, finish, charged, ledger.left(kid), kid)
        n_key = ledger.tokens.get(kid, 0)
        neighbour = ledger.composed_neighbour(len(taken) if charged else 0)  # a forced answer counts no token
        return Outcome(
            taken, text, finish, charged, ledger.left(kid), kid, delta, ledger.composed(n_key), neighbour,
            ledger.composed_neighbour(n_key),
        )  # fmt: skip
