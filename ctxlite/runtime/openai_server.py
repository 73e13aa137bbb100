"""A model behind an OpenAI-compatible HTTP server (llama-cpp-python's, llama.cpp's, vLLM) as a Backend.

ctxlite sends requests; the server batches, caches prefixes and spreads over its GPUs. What such a
server offers is *teacher forcing* and its own *sampled completions*: :class:`OpenAIServer` has those
two capabilities of :mod:`ctxlite.runtime.backend` (``TeacherForcing``, ``SampledCompletions``):

* log p(y_t | y_<t) of given tokens: one ``/v1/completions`` request with the token ids as the
  prompt, ``echo`` and ``logprobs``, ``max_tokens = 1`` (the one generated token is ignored). The
  server reports log softmax of the raw logits, i.e. temperature 1: log p_T for T ≠ 1 needs the
  normaliser Σ_v exp(l_v / T) over the whole vocabulary, which no endpoint returns, so T ≠ 1 is
  refused rather than approximated.
* no ``LogitRows``: λ ≠ 1, CID generation and a self-judging judge are refused through
  :func:`~ctxlite.runtime.backend.require`. A classification audit's label distribution is exact
  anyway: P(label) is a product of teacher-forced token probabilities (``ctxlite.audit.oracle``).
* no ``PrefixReuse``: every ablation is sent whole; the server's own prefix cache (vLLM
  ``--enable-prefix-caching``, llama.cpp's slot cache) is what saves the shared prefix.
* ``SampledCompletions``: a generation audit's texts are the server's own sampled completions
  (:meth:`OpenAIServer.sample_texts`), one request per text, with the temperature, ``max_tokens`` and
  a seed per text, and every other filter of the server turned off (top-p 1, top-k and min-p off,
  no repetition penalty), so the text is a sample of softmax(logits / T), as locally.

Tokens must be the server's: tokenization goes through its tokenize/detokenize endpoints, probed
once (llama-cpp-python: ``/extras/tokenize``; llama.cpp server and vLLM: ``/tokenize``); a server
with none is refused. What each server spells its own way (those endpoints, text or token-id
prompts, the echo's alignment, its sampling filters) is its dialect,
:mod:`ctxlite.runtime.server_dialects`. Given a local model's tokenizer
(``OpenAIServer(config, tokenizer=...)``, the CLI's ``--model`` with ``--backend openai``), the
server must tokenize :data:`PARITY_TEXTS` as it does, or the connection is refused
(:func:`tokenizer_mismatch`). The test suite runs the llama-cpp-python dialect
(tests/server/test_openai_server.py) and the vLLM one (tests/vllm, vLLM 0.32 on the CPU); the llama.cpp
dialect follows llama.cpp's documentation and meets only a fake server.

Concurrency: independent requests go out together through ``logprobs_many`` (a scored example's
ablations, the labels of an audit's prompts), at most ``concurrency`` in flight, each result
returned for its own request. The backend is :class:`~ctxlite.runtime.backend.ConcurrentRequests`:
its methods may be called from several threads (a score run's examples in flight together), and
every HTTP exchange holds one of ``concurrency`` slots, so the bound holds across all of them
(the slots and the request pool serve the lower ``in_turn`` rank first: a score run's earliest
example in flight). :meth:`OpenAIServer.request_stats` counts the requests in flight (and the most ever in
flight), ended, and the prompt tokens the server reports, for the CLI's progress line.

A server whose completions carry no ``logprobs`` is found at connection: :func:`connect` gives it as
a :class:`ServedModel` (``prompt_logprobs`` False), without teacher forcing, so scoring is refused
naming the missing capability, and a classification audit takes its answers from sampled
completions instead (``ctxlite.audit.oracle``).

Every answer is checked before it is used (:func:`check_logprobs` and the checks of each endpoint):
it is a JSON object without an ``error`` member (some servers answer HTTP 200 with ``{"error":
...}``), its log-probabilities are finite numbers ≤ ``LOGPROB_TOLERANCE`` (a log-probability is ≤
0; the tolerance only admits float32 rounding of a certain token), there are as many as the prompt
has tokens (plus at most the one generated token), and the tokens the server echoes are the tokens
sent, in order (compared piece by piece with the server's own decoding of each token). Where entry 0
scores the first token the server saw, it must be null (a number there is an echo off by a token),
and the first read of log-probabilities checks, once, that the server's values stand beside their
own tokens (:meth:`ServedModel.check_alignment`: the probe and the probe one token longer must
agree). An answer that fails a check stops the run with a :class:`~ctxlite.errors.ServerError` (exit
9) that names the field, the request and the server's own message; it is not retried (a server that
answers nonsense once will again). ``--request-timeout`` bounds the *whole* request (connecting,
sending, every read of the answer: a server that drips its answer a byte at a time times out like a
silent one), and an answer larger than ``ServerConfig.max_answer_bytes`` (``MAX_ANSWER_BYTES``, 64
MiB) is refused while it streams in, so a runaway answer never fills the memory.

Robustness (:mod:`ctxlite.runtime.server_transport`, the HTTP side): requests run on a thread pool
of ``concurrency`` workers, each with a timeout, retried
on connection errors, timeouts, 429 and 5xx with exponential backoff and full jitter
(delay = U(0, 1) · min(max_backoff, backoff · 2^attempt), or the server's Retry-After). A request
that exhausts its retries opens the circuit breaker: every later request fails at once with the
same one-line :class:`~ctxlite.errors.ServerError` (exit 9), so a dead server ends the run
promptly and a resumed run (``--resume``) continues from the log. The API key is read from
``CTXLITE_API_KEY`` or ``OPENAI_API_KEY`` and lives only in the client's headers: never in
``describe()``, ``identity()`` or a message.
"""

from __future__ import annotations

import codecs
import itertools
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import as_completed

import numpy as np

from ctxlite.errors import ContextOverflow, InvalidParameter, ServerError
from ctxlite.identity import software
from ctxlite.runtime.server_dialects import Dialect, answer_field, probe_dialect
from ctxlite.runtime.server_transport import Http, Pool, RequestStats, ServerConfig, ranked

LOGPROB_TOLERANCE = 1e-4
"""How far above 0 a served log-probability may be (nats): float32 log-softmax of a token of
probability ~1 rounds to a few 1e-7 above 0. Anything larger is an impossible answer (exit 9)."""
ALIGNMENT_TOLERANCE = 0.5
"""How far apart (nats) two answers of one server may put the log-probability of the same token after
the same tokens (:meth:`ServedModel.check_alignment`). They are two computations of one logits row
that differ only by rounding with the batch's shape and what the server's cache held: 0 measured on
llama-cpp-python's server (Gemma 3 270M, the probe's prefix reused from its cache), at most 5.1e-3
nats against the local engine (tests/server/test_openai_server.py ``TOL_LOGPROB``); llama.cpp rows
decoded after another history differ by 0.1-0.2 nats at likely tokens, and the project bounds that
rounding by 0.5 nats (docs/design.md, batch-shape rounding), the bound taken here; bfloat16 GPU
servers were not measured. A shifted echo moves a compared value by the gap between the sampled
token's log-probability and a fixed token's (:data:`PROBE_EXTRA`, sent after it), typically
several nats."""
UNALIGNED = (
    "the server's log-probabilities are not aligned with the prompt's tokens (an echo shifted by a "
    "token?): refused rather than scored"
)


PROBE_TEXT = "Hi there."
"""The sentence the connection's probe sends (teacher forcing): short, as some servers cost per
echoed token."""
PROBE_EXTRA = (" Hi", ".", "\n")
"""Texts of one token each (in most vocabularies), one of which :meth:`ServedModel.check_alignment`
sends after the probe and the token the server generated: a fixed token, not a sampled one."""


class NoPromptLogprobs(InvalidParameter):
    """The server returns no log-probabilities for completions."""


def check_logprobs(logprobs, tokens: Sequence[int], offset: int, piece, where: str, *, first_null: bool = True) -> list:
    """The prompt's ``token_logprobs`` of one echoed completion, checked (a ServerError names what fails).

    ``tokens`` were sent; the server's entry j is token j + ``offset`` (llama-cpp-python drops a
    leading BOS: offset 1), so it must return ``len(tokens) - offset`` prompt entries, plus at most
    the one token it generated. Each prompt entry is None (the first, which has no context) or a
    finite number ≤ ``LOGPROB_TOLERANCE``; ``logprobs.tokens[j]``, the text of the token it
    scored, must be ``piece(tokens[j + offset])`` wherever that piece is known and shows (the
    server's own decoding of the token alone: None for part of a character, "" for a special token).
    ``first_null``: entry 0 scores the first token the server saw, which has no context: a number
    there is refused (a server that shifts its echo by a token puts the second token's value there)."""
    values, echoed = logprobs.get("token_logprobs"), logprobs.get("tokens")
    need = len(tokens) - offset
    field = "choices.0.logprobs.token_logprobs"
    if not isinstance(values, list):
        raise ServerError(f"{where}: {field} is not a list ({type(values).__name__})")
    if not need <= len(values) <= need + 1:
        raise ServerError(
            f"{where}: {field} has {len(values)} entries for a prompt of {need} echoed tokens "
            f"(expected {need}, or {need + 1} with the generated token)"
        )
    if first_null and values and values[0] is not None:
        raise ServerError(
            f"{where}: {field}[0] is {json.dumps(values[0])[:40]}, but the first token sent has no context to "
            f"score it by (the entry must be null): {UNALIGNED}"
        )
    for j, v in enumerate(values[:need]):
        if v is None and j == 0:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ServerError(f"{where}: {field}[{j}] is {json.dumps(v)[:40]}, not a number")
        if not math.isfinite(v) or v > LOGPROB_TOLERANCE:
            raise ServerError(
                f"{where}: {field}[{j}] is {v!r}, not a log-probability (a finite number ≤ 0, "
                f"up to {LOGPROB_TOLERANCE:g} of rounding)"
            )
    field = "choices.0.logprobs.tokens"
    if not isinstance(echoed, list) or len(echoed) < need:
        shown = f"{len(echoed)} entries" if isinstance(echoed, list) else "missing"
        raise ServerError(
            f"{where}: {field} is {shown}: the echoed prompt cannot be checked against the {need} tokens sent"
        )
    for j in range(need):
        token = tokens[j + offset]
        text = piece(token)
        if text and echoed[j] != text:
            raise ServerError(
                f"{where}: {field}[{j}] is {str(echoed[j])[:40]!r} but the token sent there is {token} "
                f"({text[:40]!r}): the server scored other tokens than the ones sent"
            )
    return values


PARITY_TEXTS = (
    "Dana takes 10 mg lisinopril daily.",
    "Question: What was prescribed?\nAnswer:",
    " a leading space,  two spaces,\ttabs and a newline\n\n",
    "Über 10 µg, naïve café ☕ 東京 — 1234567.89 %",
)
"""Texts a server must tokenize as a local model does (:func:`tokenizer_mismatch`): words, digits,
punctuation, runs of whitespace, newlines and characters of every UTF-8 length. No text spells a
special token: vLLM's and llama-cpp-python's endpoints always parse those (docs/servers.md)."""


def tokenizer_mismatch(server, local, texts: Sequence[str] = PARITY_TEXTS) -> str | None:
    """Where ``server`` and ``local`` (both with ``tokenize`` and ``bos_id``) tokenize differently:
    their BOS tokens, or the first text whose token ids differ (without BOS, then with it), in a
    short line; None where they agree on every text."""
    if server.bos_id != local.bos_id:
        return f"the BOS token is {server.bos_id} there and {local.bos_id} locally"
    for text in texts:
        for add_bos in (False, True):
            there, here = server.tokenize(text, add_bos=add_bos), local.tokenize(text, add_bos=add_bos)
            if there != here:
                return f"{text[:40]!r} is tokens {_head(there)} there and {_head(here)} locally"
    return None


def _head(tokens: Sequence[int], n: int = 8) -> str:
    return "[" + ", ".join(map(str, tokens[:n])) + (", ...]" if len(tokens) > n else "]")


class ServedModel:
    """An OpenAI-compatible completions server as a :class:`~ctxlite.runtime.backend.Backend` with
    :class:`~ctxlite.runtime.backend.SampledCompletions` only: what a server whose completions carry
    no log-probabilities is (:func:`connect` connects to either kind)."""

    on_request: Callable[[], None] | None = None
    """Called in the thread that sent a batch after each of its requests ends (the CLI redraws its
    progress line; several threads at once when a score run keeps examples in flight)."""

    def __init__(self, config: ServerConfig, *, sleep=time.sleep, tokenizer=None, tokenizer_name: str = ""):
        """Connect: probe the server (:meth:`_probe`); with a local ``tokenizer`` (a backend, named
        ``tokenizer_name``), refuse a server that tokenizes otherwise (:meth:`check_tokenizer`)."""
        self.config = config
        self._http = Http(config, sleep)
        self._pool = Pool(config.concurrency)
        self._pieces: dict[int, bytes | None] = {}
        self._texts: dict[tuple[int, ...], str] = {}
        self.tokenizer_checked: str | None = None  # the local model whose tokens the server's were found to be
        self._probe_answer: tuple | None = None  # the probe's tokens, checked entries, echoed texts
        self._alignment_lock = threading.Lock()
        self._alignment: str | None = None  # check_alignment's verdict: "" (aligned) or its message
        try:
            self._probe()
            if tokenizer is not None:
                self.check_tokenizer(tokenizer, tokenizer_name or "the local model")
        except BaseException:
            self.close()
            raise

    # ----- what the server offers -------------------------------------
    def _probe(self) -> None:
        """Find the server's dialect (:func:`~ctxlite.runtime.server_dialects.probe_dialect`), its
        version and context window; check that completions return prompt log-probabilities."""
        self.dialect: Dialect = probe_dialect(self.config, self._http)
        version, n_ctx = self.dialect.server_info()
        n_ctx = self.config.n_ctx or n_ctx
        if n_ctx is not None and (isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 1):
            n_ctx = None  # a context size that is no count is no information
        self.server_version, self.n_ctx = (None if version is None else str(version)), n_ctx
        sample = self.tokenize(PROBE_TEXT, add_bos=True)  # short: some servers cost per echoed token
        if len(sample) < 3:
            raise InvalidParameter(f"the server at {self.config.root} tokenized a probe sentence into {sample}")
        self.prompt_logprobs = True
        try:
            self._probe_answer = (sample, *self._echo(sample))
        except NoPromptLogprobs:
            self.prompt_logprobs = False

    def check_tokenizer(self, local, name: str) -> None:
        """Refuse (InvalidParameter) a server whose tokens are not those of ``local``, the local model
        ``name`` (:func:`tokenizer_mismatch` on :data:`PARITY_TEXTS`): its numbers could not be set
        beside that model's token for token, and a server that serves another model than the one
        meant says so here rather than in the results."""
        mismatch = tokenizer_mismatch(self, local)
        if mismatch is not None:
            raise InvalidParameter(
                f"the server at {self.config.base_url} ({self.config.model_name}) does not tokenize as {name}: "
                f"{mismatch}; serve that model (or leave out --model)"
            )
        self.tokenizer_checked = name

    # ----- tokenizer ----------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = False) -> list[int]:
        """The server's token ids of ``text`` (no BOS unless ``add_bos``; ``special``: a text that
        spells a special token, ``<bos>``, tokenizes as it where the server parses them)."""
        return self.dialect.tokenize(text, add_bos, special)

    def _detokenize_bytes(self, tokens: Sequence[int], *, probe: bool = False) -> bytes | None:
        """The UTF-8 bytes of ``tokens`` as the server decodes them; None (``probe``) where the
        server cannot decode them alone (a partial UTF-8 character: an error or U+FFFD)."""
        url, payload, key = self.dialect.detokenize_request([int(t) for t in tokens])
        what = "detokenizing"
        body = self._http.post(url, payload, what=what, probe=probe)
        if "_status" in body:
            return None
        text = answer_field(body, [key], url, what)
        if not isinstance(text, str):
            raise ServerError(f"{what}: the answer of {url} has a {key} that is not text ({type(text).__name__})")
        if probe and "\ufffd" in text:
            return None
        return text.encode("utf-8")

    def _piece(self, token: int) -> bytes | None:
        if token not in self._pieces:
            self._pieces[token] = self._detokenize_bytes([token], probe=True)
        return self._pieces[token]

    def _prefetch(self, tokens: Sequence[int]) -> None:
        todo = sorted({int(t) for t in tokens} - set(self._pieces))
        for t, piece in zip(todo, self._map(lambda t: self._detokenize_bytes([t], probe=True), todo)):
            self._pieces[t] = piece

    def token_bytes(self, token: int) -> bytes:
        piece = self._piece(int(token))
        if piece is None:
            raise ServerError(f"the server cannot detokenize token {token} alone (a partial UTF-8 character)")
        return piece

    def detokenize(self, tokens: Sequence[int]) -> str:
        return (self._detokenize_bytes(tokens) or b"").decode("utf-8", errors="replace") if len(tokens) else ""

    def char_spans(self, tokens: Sequence[int]) -> list[tuple[int, int]]:
        """Character span ``[start, end)`` of each token in ``detokenize(tokens)``.

        Each character belongs to the token that completes it (the local engine's rule). Each token's
        piece comes from the server alone; a token the server cannot decode alone (it ends in part of
        a character) is grouped with the tokens that follow until the group decodes, and the group's
        characters are shared out by :meth:`_complete_chars` of its prefixes (a token ``" \xe2"``
        before the rest of ``"☕"`` holds the space; the token that ends the ``☕`` holds it)."""
        return [span for span, _ in self._char_groups(tokens)]

    def char_cover(self, tokens: Sequence[int]) -> list[tuple[int, int]]:
        """The characters each token holds bytes of: its :meth:`char_spans` span, widened by the
        character it ends inside of (every token of a group but its last: the group grows only while
        its tokens end inside a character)."""
        return [(a, b + inside) for (a, b), inside in self._char_groups(tokens)]

    def _char_groups(self, tokens: Sequence[int]) -> list[tuple[tuple[int, int], bool]]:
        """Per token, its :meth:`char_spans` span and whether it ends inside a character."""
        self._prefetch(tokens)
        spans, n_chars, group = [], 0, []
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        for t in tokens:
            group.append(int(t))
            piece = self._pieces.get(int(t)) if len(group) == 1 else self._detokenize_bytes(group, probe=True)
            if piece is None and len(group) < 4:
                continue
            text = decoder.decode(piece) if piece is not None else "\ufffd"
            done = [0] + [min(self._complete_chars(group[:j]), len(text)) for j in range(1, len(group))]
            done = [*itertools.accumulate(done, max), len(text)]
            spans += [((n_chars + done[j], n_chars + done[j + 1]), j < len(group) - 1) for j in range(len(group))]
            n_chars += len(text)
            group = []
        spans += [((n_chars, n_chars), True)] * len(group)
        return spans

    def _complete_chars(self, tokens: Sequence[int]) -> int:
        """How many characters the server's decoding of ``tokens`` has before the part of a character
        they end in (which decodes to replacement characters, or to nothing)."""
        text = (self._detokenize_bytes(tokens) or b"").decode("utf-8", "replace")
        return len(text.rstrip("\ufffd"))

    @property
    def bos_id(self) -> int | None:
        return self.dialect.bos

    @property
    def concurrency(self) -> int:
        """The most requests in flight at once (``--concurrency``), whatever threads send them."""
        return self.config.concurrency

    def in_turn(self, rank: int):
        """A context in which the batches this thread sends wait behind those of lower ``rank``
        (the score run's examples in input order: the one logged next goes first)."""
        return ranked(rank)

    def check_fits(self, n_tokens: int, what: str = "prompt + response") -> None:
        """Refuse a sequence longer than the server's context window, where it is known."""
        if self.n_ctx is not None and n_tokens > self.n_ctx:
            raise ContextOverflow(f"{what} is {n_tokens} tokens but the server's context window is {self.n_ctx} tokens")

    # ----- teacher forcing ----------------------------------------------
    def _teacher_forced(self, tokens: Sequence[int], targets_from: int, temperature: float = 1.0) -> np.ndarray:
        """log p(tokens[t] | tokens[:t]) for t >= targets_from, from the server's echoed prompt
        log-probabilities (one completion request). Temperature 1 only (see the module docstring)."""
        if temperature != 1.0:
            raise InvalidParameter(
                f"log-probabilities at temperature {temperature:g} need the full next-token distribution, "
                "which an OpenAI-compatible server does not return: use -T/--temperature 1 with --backend openai"
            )
        if not self.prompt_logprobs:
            raise NoPromptLogprobs(self._no_logprobs)
        tokens = [int(t) for t in tokens]
        if not 1 <= targets_from < len(tokens):
            raise InvalidParameter(f"targets_from must be in [1, {len(tokens)}), got {targets_from}")
        self.check_alignment()
        offset = self.dialect.echo_offset
        values, _, where = self._echo(tokens)
        out = values[targets_from - offset : len(tokens) - offset]
        if any(v is None for v in out):
            raise ServerError(f"{where}: choices.0.logprobs.token_logprobs has null where a log-probability is needed")
        return np.asarray(out, dtype=np.float64)

    def _echo(self, tokens: list[int]) -> tuple[list, list, str]:
        """One teacher-forcing request of ``tokens``: its checked entries (:func:`check_logprobs`: the
        prompt's, then the generated token's where the server sent it), the echoed token texts, and
        the request's description for a message."""
        self.check_fits(len(tokens) + 1)
        self.dialect.check_echo(tokens)
        offset = self.dialect.echo_offset
        url, what = f"{self.config.base_url.rstrip('/')}/completions", "teacher forcing (echo + logprobs)"
        payload = {
            "model": self.config.model_name,
            "prompt": self._prompt(tokens),
            "max_tokens": 1,
            # the one generated token is discarded, and the echoed entries are log softmax of the raw
            # logits whatever the temperature: sampled at T = 1, so that a server that refuses greedy
            # decoding (ctxlite serve: no epsilon holds for it) answers the probe too
            "temperature": 1.0,
            "echo": True,
            "logprobs": 1,
        }
        body = self._http.post(url, payload, what=what)
        self._http.count_prompt_tokens(body)
        choice = answer_field(body, ["choices", 0], url, what)
        if not isinstance(choice, dict) or not isinstance(choice.get("logprobs"), dict):
            raise NoPromptLogprobs(self._no_logprobs)
        where = f"{what}: the answer of {url} to a prompt of {len(tokens)} tokens"
        first_null = self.dialect.first_entry_null
        values = check_logprobs(choice["logprobs"], tokens, offset, self._piece_text, where, first_null=first_null)
        return values, choice["logprobs"]["tokens"], where

    def check_alignment(self) -> None:
        """Refuse (ServerError, exit 9) a server whose echoed log-probabilities are not those of the
        tokens they stand beside, though each looks right (an echo one token off: every value finite
        and ≤ 0, the right count, the tokens as sent). Done once, by the first read of
        log-probabilities (a run that reads none is not refused for them); the verdict is kept.

        The probe prompt P was sent on connecting; one more request sends P + [x, t]: x the token
        the server generated after P where it reported one that tokenizes back alone, t a fixed
        token of :data:`PROBE_EXTRA` (else P + [x], or P + [t]). A token's log-probability depends
        only on the tokens before it, so both answers must agree on P's tokens, and x's value after
        P must be the one the server reported when it generated x, each within
        :data:`ALIGNMENT_TOLERANCE` (an echo shifted forward puts t's value there instead).
        docs/servers.md says which lies this catches and which it cannot."""
        with self._alignment_lock:
            if self._alignment is None and self._probe_answer is not None:
                self._alignment = self._misalignment() or ""
        if self._alignment:
            raise ServerError(self._alignment)

    def _misalignment(self) -> str | None:
        """What :meth:`check_alignment` finds wrong, in a line; None where the answers agree."""
        tokens, values, echoed, _ = self._probe_answer
        need = len(tokens) - self.dialect.echo_offset
        generated = self._generated_token(values, echoed, need)
        shown = echoed[need] if len(values) > need and len(echoed) > need else None
        fixed = []  # tokens of PROBE_EXTRA, not sampled: after the probe, each far from the generated one
        for text in PROBE_EXTRA:
            ids = self.tokenize(text)
            if len(ids) == 1 and text != shown:
                fixed.append(ids[0])
        tails = [] if generated is None else [*([generated, t] for t in fixed), [generated]]
        for tail in [*tails, *([t] for t in fixed)]:
            try:
                longer, _, _ = self._echo([*tokens, *tail])
            except InvalidParameter:  # a text-only server: P + tail is not the tokenization of its text
                continue
            break
        else:
            return None  # nothing to compare with: the probe alone was checked (docs/servers.md)
        where = f"the server at {self.config.base_url} ({self.config.model_name})"
        for j in range(need):
            before, after = values[j], longer[j]
            if (before is None) != (after is None) or (
                before is not None and not abs(before - after) <= ALIGNMENT_TOLERANCE
            ):
                return (
                    f"{where} gives token {j + self.dialect.echo_offset} of the probe {PROBE_TEXT!r} the "
                    f"log-probability {before} alone and {after} with {len(tail)} more token(s) sent after it "
                    f"(a token's log-probability depends only on the tokens before it; tolerance "
                    f"{ALIGNMENT_TOLERANCE:g}): {UNALIGNED}"
                )
        if tail[0] == generated and not abs(longer[need] - values[need]) <= ALIGNMENT_TOLERANCE:
            return (
                f"{where} generated {shown!r} after the probe {PROBE_TEXT!r} with the log-probability "
                f"{values[need]}, and gives it {longer[need]} when it is sent after the probe (tolerance "
                f"{ALIGNMENT_TOLERANCE:g}): {UNALIGNED}"
            )
        return None

    def _generated_token(self, values: list, echoed: list, need: int) -> int | None:
        """The token the server generated after the probe, where it reported its log-probability and
        its text tokenizes alone into one token of that text (a text that does not is left out)."""
        if len(values) <= need or values[need] is None or len(echoed) <= need:
            return None
        text = echoed[need]
        if not isinstance(text, str) or not text:
            return None
        ids = self.tokenize(text)
        return ids[0] if len(ids) == 1 and self._piece_text(ids[0]) == text else None

    def _piece_text(self, token: int) -> str | None:
        """The text of ``token`` alone as this server decodes it (None: part of a character)."""
        piece = self._piece(int(token))
        return None if piece is None else piece.decode("utf-8", "replace")

    # ----- sampled completions -------------------------------------------
    def sample_texts(self, requests: Sequence[tuple[Sequence[int], int]], temperature: float, max_new_tokens: int):
        """One completion of each (prompt tokens, seed), sampled by the server at ``temperature``
        (0: greedy) and at most ``max_new_tokens`` tokens, in the order given (``concurrency`` in
        flight); the texts as the server returns them."""
        if not temperature >= 0 or max_new_tokens < 1:
            raise InvalidParameter(
                f"need temperature >= 0 and max_new_tokens >= 1, got {temperature} and {max_new_tokens}"
            )
        url, what = f"{self.config.base_url.rstrip('/')}/completions", "sampling a completion"

        def one(request) -> str:
            tokens, seed = [int(t) for t in request[0]], int(request[1])
            self.check_fits(len(tokens) + max_new_tokens)
            payload = {
                "model": self.config.model_name,
                "prompt": self._prompt(tokens),
                "max_tokens": int(max_new_tokens),
                "temperature": float(temperature),
                "top_p": 1.0,
                "seed": seed,
                "n": 1,
                **self.dialect.sampling_off,  # the server's own filters off (not plain sampling by default)
            }
            body = self._http.post(url, payload, what=what)
            self._http.count_prompt_tokens(body)
            text = answer_field(body, ["choices", 0, "text"], url, what)
            if not isinstance(text, str):
                raise ServerError(f"{what}: the server at {url} returned a completion that is not text")
            return text

        return self._map(one, requests)

    @property
    def _no_logprobs(self) -> str:
        return (
            f"the server at {self.config.base_url} returns no log-probabilities for completions (echo + logprobs): "
            "scoring needs them (an audit samples its answers instead)"
        )

    def _prompt(self, tokens: list[int]) -> list[int] | str:
        """What to send as the prompt so that the server decodes exactly ``tokens``: the ids (vLLM,
        llama.cpp), or for llama-cpp-python, whose server takes text only, their text after BOS,
        checked to tokenize back to the same ids (an ablation that leaves text which tokenizes
        otherwise, or a cut through a character, is refused rather than scored on other tokens)."""
        if self.dialect.takes_token_ids:
            return tokens
        key = tuple(tokens)
        if key in self._texts:
            return self._texts[key]
        raw = self._detokenize_bytes(tokens[1:], probe=True)
        text = raw.decode("utf-8") if raw is not None else None
        if text is None or self.tokenize(text, add_bos=True, special=True) != tokens:
            raise InvalidParameter(
                "llama-cpp-python's server takes text prompts only, and the text of this token sequence "
                "tokenizes to other tokens: it cannot be sent there as these tokens (use vLLM, which takes "
                "token ids)"
            )
        if len(self._texts) < 4096:  # an audit repeats its prompts: checked once each
            self._texts[key] = text
        return text

    def request_stats(self) -> RequestStats:
        """The requests sent so far (what the CLI's progress line shows: in flight, rates)."""
        return self._http.stats()

    def _map(self, fn, items, on_done: Callable[[int], None] | None = None) -> list:
        """``[fn(x) for x in items]`` on the pool, results in the order of ``items``. After each call
        ends, in the calling thread: ``on_done(number ended)`` and the ``on_request`` hook. The first
        failure to end is raised and what has not started is cancelled (so is it on a Ctrl-C)."""
        items = list(items)
        if len(items) <= 1 or self.config.concurrency == 1:
            out = []
            for x in items:
                out.append(fn(x))
                self._ended(len(out), on_done)
            return out
        futures = [self._pool.submit(fn, x) for x in items]
        try:
            for k, future in enumerate(as_completed(futures), 1):
                future.result()  # the first failure ends the batch
                self._ended(k, on_done)
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise

    def _ended(self, k: int, on_done) -> None:
        if on_done is not None:
            on_done(k)
        if self.on_request is not None:
            self.on_request()

    # ----- the run record -------------------------------------------------
    @property
    def requests(self) -> int:
        return self._http.requests

    def identity(self) -> dict:
        """What identifies this backend's numbers: the ctxlite version and which server answered (base URL,
        model name, its reported version and tokenizer dialect). Never the API key."""
        return {
            "software": {"ctxlite": software()["ctxlite"]},
            "server": {
                "base_url": self.config.base_url.rstrip("/"),
                "model_name": self.config.model_name,
                "version": self.server_version,
                "dialect": self.dialect.name,
                **({} if self.prompt_logprobs else {"prompt_logprobs": False}),  # answers sampled, not read
            },
        }

    def describe(self) -> dict:
        return {
            "backend": "openai",
            "base_url": self.config.base_url.rstrip("/"),
            "model_name": self.config.model_name,
            "server_version": self.server_version or "not reported",
            "tokenizer": self.dialect.name,
            "prompt_logprobs": self.prompt_logprobs,
            "tokenizer_checked_against": self.tokenizer_checked,
            "n_ctx": self.n_ctx,
            "concurrency": self.config.concurrency,
            "request_timeout_s": self.config.timeout,
            "retries": self.config.retries,
            "prefix_caching": "the server's own prefix cache replaces local KV reuse (each sequence is sent whole)",
            "requests": self._http.requests,
            "retried": self._http.retried,
        }

    # ----- lifecycle --------------------------------------------------------
    def close(self) -> None:
        self._pool.shutdown()
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class OpenAIServer(ServedModel):
    """An OpenAI-compatible completions server as a backend with teacher forcing too: log p(y_t | y_<t)
    from the completions' echoed prompt log-probabilities (:class:`~ctxlite.runtime.backend.TeacherForcing`).

    Connecting probes the server and refuses one whose completions carry no log-probabilities
    (:func:`connect` gives that one as a :class:`ServedModel`).

    >>> server = OpenAIServer(ServerConfig("http://127.0.0.1:8000/v1", "gemma"))  # doctest: +SKIP
    >>> server.logprobs(server.tokenize("Paris is the capital of France", add_bos=True), 3)  # doctest: +SKIP
    """

    def __init__(self, config: ServerConfig, *, sleep=time.sleep, tokenizer=None, tokenizer_name: str = ""):
        """Connect (:class:`ServedModel`); refuse (:class:`NoPromptLogprobs`) a server whose completions
        carry no log-probabilities: :func:`connect` takes either kind."""
        super().__init__(config, sleep=sleep, tokenizer=tokenizer, tokenizer_name=tokenizer_name)
        if not self.prompt_logprobs:
            self.close()
            raise NoPromptLogprobs(
                f"the server at {config.base_url} ({config.model_name}) returns no log-probabilities for "
                "completions: no teacher forcing (connect() gives it as a ServedModel, sampled completions only)"
            )

    def logprobs(self, tokens: Sequence[int], targets_from: int, temperature: float = 1.0) -> np.ndarray:
        """log p(tokens[t] | tokens[:t]) for t >= targets_from, from the server's echoed prompt
        log-probabilities (one completion request). Temperature 1 only (see the module docstring).
        The first call checks the server's alignment (:meth:`check_alignment`)."""
        return self._teacher_forced(tokens, targets_from, temperature)

    def logprobs_many(
        self,
        requests: Sequence[tuple[Sequence[int], int]],
        temperature: float = 1.0,
        on_done: Callable[[int], None] | None = None,
    ) -> list:
        """``logprobs`` of each (tokens, targets_from), in the order given, ``concurrency`` requests
        in flight at a time; ``on_done(k)`` after the k-th of them ends (in the calling thread)."""
        return self._map(lambda r: self.logprobs(r[0], r[1], temperature), requests, on_done)


def connect(config: ServerConfig, *, sleep=time.sleep, tokenizer=None, tokenizer_name: str = "") -> ServedModel:
    """The server of ``config`` as the backend it is: an :class:`OpenAIServer` (teacher forcing and
    sampled completions) where its completions carry prompt log-probabilities, else a
    :class:`ServedModel` (sampled completions only: scoring refuses it by name, an audit samples its
    answers). With a local ``tokenizer``, a server that tokenizes otherwise is refused."""
    try:
        return OpenAIServer(config, sleep=sleep, tokenizer=tokenizer, tokenizer_name=tokenizer_name)
    except NoPromptLogprobs:
        return ServedModel(config, sleep=sleep, tokenizer=tokenizer, tokenizer_name=tokenizer_name)
