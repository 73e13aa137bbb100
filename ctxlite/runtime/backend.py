"""The seam between the two methods and a model: what the scorer and the audit need from it.

:class:`Backend` is a structural Protocol: the local llama.cpp :class:`~ctxlite.runtime.engine.Engine`
implements it, and any other model runtime (an inference server, say) plugs in by implementing the
same methods; ``ctxlite.influence`` and ``ctxlite.audit`` use nothing else.

A backend declares what it can do in ``capabilities``. Everything needs tokenization; scoring
needs teacher forcing (log p(y_t | y_<t, prompt) of given tokens), which every backend has but a
server whose completions carry no log-probabilities (:func:`teacher_forcing`), and a
classification audit reads its exact label distributions through it where it can (else it
samples its answers: ``SAMPLES``). The rest is optional:

* ``LOGIT_ROWS`` -- full next-token logit rows. The λ-mixture of Context Influence Decoding,
  log softmax((λ·l_D + (1−λ)·l_∅)/T), needs both rows over the whole vocabulary, so λ ≠ 1, CID
  generation and the audit's exact label distribution need them.
* ``PREFIX_REUSE`` -- variants that share a prefix with a base are decoded from their split point
  (``load_base`` / ``score_variant``). Without it every variant is decoded whole, the way the
  scorer's exact mode does; with it, ``score_variant(tiling=...)`` repeats a decode in another
  batch tiling (``Tiling``), which the noise floor's probes measure rounding with.
* ``STREAMS`` -- lock-step sampling of several prompts (``streams``, ``held_logits``).
* ``EMBEDDINGS`` -- a pooled embedding of a text (``embed``): ESA and the generation detector.
* ``SAMPLES`` -- continuations sampled by the backend itself (``sample_texts(requests, temperature,
  max_new_tokens)`` with ``requests`` a list of (prompt tokens, seed)): what a server offers
  instead of ``LOGIT_ROWS`` + ``STREAMS`` for the texts of generation audits.

A command that needs a capability the backend lacks fails through :func:`require`, with a message
that names the backend, the capability and what needed it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
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


class Capability(enum.Enum):
    """What a backend can do beyond tokenization and teacher forcing."""

    LOGIT_ROWS = "full next-token logit rows"
    PREFIX_REUSE = "prefix-shared variants (KV-cache reuse)"
    STREAMS = "lock-step sampling of several prompts"
    EMBEDDINGS = "text embeddings"
    SAMPLES = "sampled completions"


class BackendKind(Choice):
    """Which model runtime a command drives: llama.cpp in this process, or an OpenAI-compatible server."""

    LOCAL = "local"
    OPENAI = "openai"


@runtime_checkable
class Backend(Protocol):
    """A language model as ctxlite uses it (see the module docstring for the capabilities)."""

    n_vocab: int

    @property
    def capabilities(self) -> frozenset[Capability]: ...

    # tokenizer
    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = False) -> list[int]: ...
    def detokenize(self, tokens: Sequence[int]) -> str: ...
    def token_bytes(self, token: int) -> bytes: ...
    def char_spans(self, tokens: Sequence[int]) -> list[tuple[int, int]]: ...
    @property
    def bos_id(self) -> int | None: ...
    @property
    def eog_ids(self) -> np.ndarray: ...
    def is_eog(self, token: int) -> bool: ...
    def check_fits(self, n_tokens: int, what: str = "prompt + response") -> None: ...

    # teacher forcing (always)
    def logprobs(self, tokens: Sequence[int], targets_from: int, temperature: float = 1.0) -> np.ndarray: ...

    # LOGIT_ROWS
    def logits_rows(self, tokens: Sequence[int], targets_from: int) -> np.ndarray: ...
    def next_logits(self, prompt: Sequence[int], *, exact: bool = False) -> np.ndarray: ...

    # PREFIX_REUSE (with LOGIT_ROWS: the rows are handed to ``on_rows``)
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

    # STREAMS
    def streams(self, prompts: Sequence[Sequence[int]]): ...
    def held_logits(self, tokens: Sequence[int], key) -> np.ndarray: ...
    @property
    def max_streams(self) -> int: ...

    # EMBEDDINGS
    def embed(self, text: str) -> np.ndarray: ...

    # the run record
    def identity(self) -> dict: ...
    def describe(self) -> dict: ...


def require(backend, needed: Iterable[Capability], for_what: str) -> None:
    """Refuse (InvalidParameter) unless ``backend`` declares every capability in ``needed``."""
    have = backend.capabilities
    missing = [c for c in needed if c not in have]
    if missing:
        name = backend.describe().get("backend", type(backend).__name__)
        raise InvalidParameter(
            f"{for_what} needs {' and '.join(c.value for c in missing)}, which the {name} backend does not provide"
        )


def teacher_forcing(backend) -> bool:
    """Whether ``backend`` returns log-probabilities of given tokens: every backend but a server whose
    completions carry none (``prompt_logprobs = False``; ``ctxlite.runtime.openai_server``)."""
    return getattr(backend, "prompt_logprobs", True) is not False


def require_teacher_forcing(backend, for_what: str) -> None:
    """Refuse (InvalidParameter) a backend without teacher forcing, naming what needed it."""
    if not teacher_forcing(backend):
        name = backend.describe().get("backend", type(backend).__name__)
        raise InvalidParameter(
            f"{for_what} needs log-probabilities of given tokens, which the {name} backend does not return "
            "(its completions carry no logprobs)"
        )


def logprobs_many(
    backend,
    requests: Sequence[tuple[Sequence[int], int]],
    temperature: float = 1.0,
    on_done: Callable[[int], None] | None = None,
) -> list:
    """``backend.logprobs(tokens, targets_from, temperature)`` of each request, in the order given,
    concurrently where the backend can (a server's ``logprobs_many``), else one after the other;
    ``on_done(k)`` after the k-th request ends (in the calling thread, in any order of requests)."""
    many = getattr(backend, "logprobs_many", None)
    if many is not None:
        return many(requests, temperature, on_done)
    out = []
    for tokens, targets_from in requests:
        out.append(backend.logprobs(tokens, targets_from, temperature))
        if on_done is not None:
            on_done(len(out))
    return out
