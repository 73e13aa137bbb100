"""The seam between the two methods and a model: small capability Protocols, checked with ``isinstance``.

A backend is any object with the methods of the capabilities it has; ``ctxlite.influence`` and
``ctxlite.audit`` use nothing else. Every backend is a :class:`Backend` (tokenization, the prompt
budget, and its identity for the run log); the rest it may or may not offer:

* :class:`TeacherForcing` -- log p(y_t | y_<t, prompt) of given tokens, one sequence or several
  (``logprobs_many``: concurrently on a server). Scoring needs it; a classification audit reads its
  exact label distributions through it, and samples its answers from a backend without it
  (a server whose completions carry no log-probabilities).
* :class:`Vocabulary` -- the vocabulary's size (the unigram canary draws rare tokens of it).
* :class:`LogitRows` -- full next-token logit rows (and the end-of-generation ids they are banned
  by). The λ-mixture of Context Influence Decoding, log softmax((λ·l_D + (1−λ)·l_∅)/T), needs both
  rows over the whole vocabulary, so λ ≠ 1, CID generation and the audit's exact label
  distribution from rows need them.
* :class:`PrefixReuse` -- variants that share a prefix with a base are decoded from their split
  point (``load_base`` / ``score_variant``). Without it every variant is decoded whole, the way the
  scorer's exact mode does; with it, ``score_variant(tiling=...)`` repeats a decode in another
  batch tiling (``Tiling``), which the noise floor's probes measure rounding with.
* :class:`Streams` -- lock-step sampling of several prompts (``streams``, ``held_logits``).
* :class:`Embeddings` -- a pooled embedding of a text (``embed``): ESA and the generation detector.
* :class:`SampledCompletions` -- continuations sampled by the backend itself (``sample_texts(requests,
  temperature, max_new_tokens)`` with ``requests`` a list of (prompt tokens, seed)): what a server
  offers instead of rows and streams for the texts of generation audits.
* :class:`ConcurrentRequests` -- independent requests served together, up to ``concurrency`` in
  flight whatever threads send them (a server): a score run keeps several examples in flight on it
  and an audit reads the label distributions of many trials in one ``logprobs_many``.
* :class:`CountsDecodes` -- the tokens it decoded so far (a cost the search records), and
  :class:`DryRun` -- decodes counted, not run (``--plan``).
* :class:`ChatModel` -- the model's own metadata, where its chat template is read.

What needs a capability the backend lacks fails through :func:`require`, naming the backend, the
capability and what needed it.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from ctxlite.choices import Choice
from ctxlite.errors import InvalidParameter

RowsCallback = Callable[[np.ndarray, int], None]
"""``on_rows(view, first)``: ``view`` is an (n, V) float32 view of the logits of ``n`` consecutive
requested rows, the first being row number ``first`` of the request. Valid only during the call."""


@dataclass(frozen=True)
class Tiling:
    """Another batch tiling for a re-decode of ``score_variant`` (the noise floor's probes,
    ``ctxlite.influence.noise``): restart at the position ≡ ``offset`` (mod the engine's row tile)
    at or below the split point instead of a multiple of the tile, and decode in micro-batches of
    ``batch`` tokens instead of ``n_batch`` (from position 0, the first holds ``offset`` tokens).
    The same numbers up to exactly the rounding that moves with batch shape (``n_ubatch``) and the
    kernels' row grouping, which another build of llama.cpp moves too (docs/noise-floor.md)."""

    offset: int
    batch: int

    def __post_init__(self):
        if self.offset < 1 or self.batch < 1:
            raise InvalidParameter(f"a tiling needs offset >= 1 and batch >= 1, got {self}")


class BackendKind(Choice):
    """Which model runtime a command drives: llama.cpp in this process, or an OpenAI-compatible server."""

    LOCAL = "local"
    OPENAI = "openai"


@runtime_checkable
class Backend(Protocol):
    """What every backend does: tokenize (its own vocabulary), check a sequence fits its window, and
    say what it is (``identity`` for the run log, ``describe`` for a person)."""

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = False) -> list[int]: ...
    def detokenize(self, tokens: Sequence[int]) -> str: ...
    def token_bytes(self, token: int) -> bytes: ...
    def char_spans(self, tokens: Sequence[int]) -> list[tuple[int, int]]: ...
    def char_cover(self, tokens: Sequence[int]) -> list[tuple[int, int]]: ...
    @property
    def bos_id(self) -> int | None: ...
    def check_fits(self, n_tokens: int, what: str = "prompt + response") -> None: ...
    def identity(self) -> dict: ...
    def describe(self) -> dict: ...


@runtime_checkable
class TeacherForcing(Protocol):
    """log p_T(tokens[t] | tokens[:t]) for t >= targets_from; ``logprobs_many`` does several, in the
    order given (``on_done(k)`` after the k-th ends, in any order of requests)."""

    def logprobs(self, tokens: Sequence[int], targets_from: int, temperature: float = 1.0) -> np.ndarray: ...
    def logprobs_many(
        self,
        requests: Sequence[tuple[Sequence[int], int]],
        temperature: float = 1.0,
        on_done: Callable[[int], None] | None = None,
    ) -> list: ...


@runtime_checkable
class Vocabulary(Protocol):
    """The size of the vocabulary (its tokens are ``token_bytes`` of 0 .. ``n_vocab`` − 1)."""

    n_vocab: int


@runtime_checkable
class LogitRows(Protocol):
    """Full next-token logit rows over the vocabulary, and the end-of-generation ids a generation bans."""

    def logits_rows(self, tokens: Sequence[int], targets_from: int) -> np.ndarray: ...
    def next_logits(self, prompt: Sequence[int], *, exact: bool = False) -> np.ndarray: ...
    @property
    def eog_ids(self) -> np.ndarray: ...
    def is_eog(self, token: int) -> bool: ...


@runtime_checkable
class PrefixReuse(Protocol):
    """Variants of a base decoded from their split point (with logit rows: handed to ``on_rows``)."""

    def load_base(self, tokens: Sequence[int], targets_from: int, on_rows: RowsCallback | None = None) -> None: ...
    def score_variant(
        self,
        tokens: Sequence[int],
        shared: int,
        targets_from: int,
        on_rows: RowsCallback,
        *,
        exact: bool = False,
        tiling: Tiling | None = None,
    ) -> None: ...


@runtime_checkable
class Streams(Protocol):
    """Lock-step sampling of several prompts, and prompts kept by key."""

    def streams(self, prompts: Sequence[Sequence[int]]): ...
    def held_logits(self, tokens: Sequence[int], key) -> np.ndarray: ...
    @property
    def max_streams(self) -> int: ...


@runtime_checkable
class Embeddings(Protocol):
    """A pooled embedding of a text."""

    def embed(self, text: str) -> np.ndarray: ...


@runtime_checkable
class SampledCompletions(Protocol):
    """One completion per (prompt tokens, seed), sampled by the backend at ``temperature``."""

    def sample_texts(
        self, requests: Sequence[tuple[Sequence[int], int]], temperature: float, max_new_tokens: int
    ) -> list[str]: ...


@runtime_checkable
class ConcurrentRequests(Protocol):
    """Independent requests served together: at most ``concurrency`` in flight at once, however many
    threads call it (its methods may be called from several threads at a time). Inside
    ``in_turn(rank)`` (a context manager) the requests a thread sends wait behind those of threads
    with a lower rank."""

    @property
    def concurrency(self) -> int: ...
    def in_turn(self, rank: int) -> AbstractContextManager: ...


@runtime_checkable
class CountsDecodes(Protocol):
    """The tokens decoded so far (every token through the model: a cost counter)."""

    tokens_decoded: int


@runtime_checkable
class DryRun(Protocol):
    """Decodes that can be counted without being run (``dry_run``: flat logits), and an empty cache."""

    dry_run: bool
    decode_calls: int
    tokens_decoded: int

    def clear(self) -> None: ...


@runtime_checkable
class ChatModel(Protocol):
    """The model's GGUF metadata (its chat template is one value of it)."""

    def metadata(self, key: str) -> str | None: ...


CAPABILITIES = {
    Vocabulary: "the vocabulary's size",
    TeacherForcing: "log-probabilities of given tokens",
    LogitRows: "full next-token logit rows",
    PrefixReuse: "prefix-shared variants (KV-cache reuse)",
    Streams: "lock-step sampling of several prompts",
    Embeddings: "text embeddings",
    SampledCompletions: "sampled completions",
    ConcurrentRequests: "concurrent requests",
    ChatModel: "the model's metadata (its chat template)",
}
"""What each capability is, as a refusal names it."""


def require(backend, needed: Iterable[type], for_what: str) -> None:
    """Refuse (InvalidParameter) unless ``backend`` has every capability in ``needed``."""
    missing = [CAPABILITIES[c] for c in needed if not isinstance(backend, c)]
    if missing:
        name = backend.describe().get("backend", type(backend).__name__)
        raise InvalidParameter(f"{for_what} needs {' and '.join(missing)}, which the {name} backend does not provide")


def check_targets(backend: Backend, tokens: Sequence[int], targets_from: int) -> None:
    """Refuse a teacher-forced request whose first target is not in ``[1, len(tokens))`` or that does
    not fit the backend's window."""
    if not 1 <= targets_from < len(tokens):
        raise InvalidParameter(f"targets_from must be in [1, {len(tokens)}), got {targets_from}")
    backend.check_fits(len(tokens))


def check_variant(base: Sequence[int] | None, tokens: Sequence[int], shared: int, targets_from: int) -> None:
    """Refuse a :class:`PrefixReuse` variant that does not share its first ``shared`` tokens with the
    ``base`` (None: no base loaded) or whose split is not before its first target."""
    if base is None:
        raise InvalidParameter("score_variant needs load_base() first (or exact=True)")
    if not 1 <= shared < targets_from or shared > len(base) or list(tokens[:shared]) != list(base[:shared]):
        raise InvalidParameter(
            f"variant must share its first {shared} tokens with the base and "
            f"1 <= shared < targets_from ({targets_from})"
        )


def _decoded_chars(token_bytes: Callable[[int], bytes], tokens: Sequence[int]) -> Iterator[tuple[int, int, bool]]:
    """Per token of ``tokens``: the characters of the UTF-8 text decoded before it and with it, and
    whether it ends inside a character (bytes the decoder holds for the next token)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    n_chars = 0
    for t in tokens:
        start = n_chars
        n_chars += len(decoder.decode(token_bytes(t)))
        yield start, n_chars, bool(decoder.getstate()[0])


def char_spans_of(token_bytes: Callable[[int], bytes], tokens: Sequence[int]) -> list[tuple[int, int]]:
    """Character span ``[start, end)`` of each token in the UTF-8 text of ``tokens`` (each token's bytes
    from ``token_bytes``); a character split over several tokens belongs to the token that completes it."""
    return [(a, b) for a, b, _ in _decoded_chars(token_bytes, tokens)]


def char_cover_of(token_bytes: Callable[[int], bytes], tokens: Sequence[int]) -> list[tuple[int, int]]:
    """The characters ``[start, end)`` of ``detokenize(tokens)`` that each token holds bytes of: its
    :func:`char_spans_of` span, widened by the character it ends inside of (a token ``" \\xe2"`` before
    the rest of ``"☕"`` holds the space and part of the ``☕``). Spans overlap where a character is
    split; removing a token removes bytes of every character in its cover."""
    return [(a, b + inside) for a, b, inside in _decoded_chars(token_bytes, tokens)]


def sequential_logprobs(
    backend: TeacherForcing,
    requests: Sequence[tuple[Sequence[int], int]],
    temperature: float = 1.0,
    on_done: Callable[[int], None] | None = None,
) -> list:
    """``logprobs_many`` of a backend that decodes one sequence at a time: each in turn."""
    out = []
    for tokens, targets_from in requests:
        out.append(backend.logprobs(tokens, targets_from, temperature))
        if on_done is not None:
            on_done(len(out))
    return out
