"""A model-free backend for tests: deterministic logits from a seeded table, the capabilities it declares.

:class:`FakeBackend` runs everything ctxlite runs on a model (the scorer with and without prefix
reuse, the adaptive search, CID generation, the audit game and its mechanisms, :mod:`ctxlite.runs`)
in milliseconds, with no model file: the fast test layer (``make test-fast``) is built on it, and a
program that embeds ctxlite can test its own plumbing on it. Its numbers mean nothing about any
language model; what it guarantees is their *shape*.

Tokens are the 256 byte values, then BOS and EOS (the one end-of-generation token), then a few
whole words (``WORDS``). The logits that follow a prefix t_0 … t_i are a pure function of it:

    l(t_0..t_i) = B[t_i] + β · log1p(c_i) + γ · H[h_i mod K]

with B (V × V) and H (K × V) standard normal tables drawn from ``seed`` (B lowered for control
bytes, so texts are mostly printable); c_i[v] counts the earlier
positions j < i where the k tokens ending at j equal the k ending at i and t_{j+1} = v, summed
over k = 1 … 3 (an induction head: text of the context is copied, so a context *influences* a
response); h_i = Σ_{j ≤ i} (t_j + 1) · W[j] (mod 2³¹) with W a table of random position weights,
so every token of the prefix moves every later row.

That purity is the point. A row is computed from what the backend's cache holds (its *cells*: the
tokens at positions 0, 1, …), as llama.cpp computes it from its KV cells, and prefix reuse
(``load_base`` / ``score_variant``) keeps the cells the variant shares with the base and writes the
rest. When the shared prefix is honoured, reuse equals a from-scratch decode bit for bit by
construction; when a caller (or a subclass) reuses a cell the variant does not share, the hash term
moves every later row and the difference shows.

``capabilities`` chooses which Protocols of :mod:`ctxlite.runtime.backend` the object has, and it
has exactly those members (``isinstance`` answers truly): :class:`~ctxlite.runtime.backend.Backend`
always; by default teacher forcing, the vocabulary, logit rows, prefix reuse, streams and the decode
counter; :class:`~ctxlite.runtime.backend.Embeddings`,
:class:`~ctxlite.runtime.backend.SampledCompletions` and :class:`~ctxlite.runtime.backend.DryRun`
(a plan's counts) on request. It has no chat template.

>>> from ctxlite.runtime.fake import FakeBackend
>>> backend = FakeBackend(seed=1)
>>> backend.logprobs(backend.tokenize("hello, world", add_bos=True), 3).shape
(10,)
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence

import numpy as np

from ctxlite.errors import ContextOverflow, InvalidParameter
from ctxlite.identity import software
from ctxlite.runtime import kernels
from ctxlite.runtime.backend import (
    CountsDecodes,
    DryRun,
    Embeddings,
    LogitRows,
    PrefixReuse,
    RowsCallback,
    SampledCompletions,
    Streams,
    TeacherForcing,
    Tiling,
    Vocabulary,
    char_cover_of,
    char_spans_of,
    check_targets,
    check_variant,
    sequential_logprobs,
)

BOS, EOS = 256, 257
WORDS = tuple(f" {w}" for w in ("Yes", "No", "yes", "no", "the", "is", "a", "of", "and", "to", "in"))
"""Whole words with their leading space, one token each after the bytes, BOS and EOS (so a judge's
" Yes" and " No" differ in their first token, as in a real vocabulary)."""
N_VOCAB = 258 + len(WORDS)
HASH_BUCKETS = 251
INDUCTION_ORDERS = (1, 2, 3)
EMBEDDING_DIM = 64
EMBEDDING_BUCKETS = 1021
MEMO_ROWS = 4096

_WORD_BYTES = tuple(w.encode() for w in WORDS)
_WORD_PATTERN = re.compile(
    b"(?:" + b"|".join(re.escape(w) for w in sorted(_WORD_BYTES, key=len, reverse=True)) + b")(?![A-Za-z])"
)

DEFAULT_CAPABILITIES = (TeacherForcing, Vocabulary, LogitRows, PrefixReuse, Streams, CountsDecodes)
"""What a :class:`FakeBackend` has unless told otherwise: everything the local engine has but the
chat template, dry runs and embeddings."""


class _Core:
    """Tokenizer, tables, the cells of the cache and the rows they give (every backend has these)."""

    def __init__(
        self,
        seed: int = 0,
        *,
        n_ctx: int = 8192,
        rows_per_call: int = 5,
        induction: float = 2.0,
        hash_weight: float = 0.05,
        tiling_noise: float = 0.0,
        max_streams: int = 8,
    ):
        rng = np.random.default_rng(seed)
        self.seed, self.n_ctx, self.rows_per_call = int(seed), int(n_ctx), int(rows_per_call)
        self.induction, self.hash_weight, self.tiling_noise = float(induction), float(hash_weight), float(tiling_noise)
        self._max_streams = int(max_streams)
        self._bigram = rng.standard_normal((N_VOCAB, N_VOCAB))
        printable = np.zeros(N_VOCAB, dtype=bool)
        printable[32:127] = printable[258:] = True
        self._bigram[:, ~printable] -= 6.0  # texts are mostly printable ASCII
        self._bigram[:, BOS] = -30.0  # BOS is never generated
        self._bigram[:, EOS] += 2.0  # not as rare as the other control tokens: texts do end
        self._hashed = rng.standard_normal((HASH_BUCKETS, N_VOCAB))
        self._weights = rng.integers(1, 2**31 - 1, size=self.n_ctx + 1, dtype=np.int64)
        self._embedding = rng.standard_normal((EMBEDDING_BUCKETS, EMBEDDING_DIM))
        self._cells: list[int] = []  # the tokens the cache holds (sequence 0), by position
        self._base: list[int] | None = None
        self._decoded, self._calls, self._dry = 0, 0, False
        self._memo: dict[tuple[int, ...], np.ndarray] = {}  # rows after whole prompts, most recent last
        self._dry_memo: dict[tuple[int, ...], np.ndarray] = {}  # the same, of a dry run (flat rows)

    # ----- Backend --------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = False) -> list[int]:
        """The UTF-8 bytes of ``text``, a word of ``WORDS`` (followed by no ASCII letter) as one token, BOS
        first with ``add_bos``; there are no special tokens to parse."""
        data, out, at = text.encode("utf-8"), [BOS] if add_bos else [], 0
        for m in _WORD_PATTERN.finditer(data):
            out += data[at : m.start()]
            out.append(258 + _WORD_BYTES.index(m.group()))
            at = m.end()
        return out + list(data[at:])

    def token_bytes(self, token: int) -> bytes:
        """The byte of a byte token, the word of a word token; BOS and EOS print as nothing (control tokens)."""
        if 258 <= token < N_VOCAB:
            return _WORD_BYTES[token - 258]
        return bytes([token]) if 0 <= token < 256 else b""

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def char_spans(self, tokens: Sequence[int]) -> list[tuple[int, int]]:
        """Character span of each token in ``detokenize(tokens)`` (a character is the token's that completes it)."""
        return char_spans_of(self.token_bytes, tokens)

    def char_cover(self, tokens: Sequence[int]) -> list[tuple[int, int]]:
        """The characters each token holds bytes of (overlapping where a character is split)."""
        return char_cover_of(self.token_bytes, tokens)

    @property
    def bos_id(self) -> int | None:
        return BOS

    def check_fits(self, n_tokens: int, what: str = "prompt + response") -> None:
        if n_tokens > self.n_ctx:
            raise ContextOverflow(f"{what} is {n_tokens} tokens but the context window is {self.n_ctx} tokens")

    def identity(self) -> dict:
        """What identifies the numbers: the tables' parameters (as a "model" hash) and ctxlite's version."""
        params = {
            "seed": self.seed,
            "induction": self.induction,
            "hash_weight": self.hash_weight,
            "tiling_noise": self.tiling_noise,
        }
        digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()
        return {
            "software": software(),
            "model": {"sha256": digest, "size_bytes": 0, "name": "fake"},
            "engine": {"backend": "fake", **params, "n_ctx": self.n_ctx},
        }

    def describe(self) -> dict:
        return {"backend": "fake", "model": f"fake(seed={self.seed})", "n_vocab": N_VOCAB, "n_ctx": self.n_ctx}

    # ----- the rows -------------------------------------------------------
    def _rows(self, cells: Sequence[int], lo: int, hi: int, tiling: Tiling | None = None) -> np.ndarray:
        """The (hi − lo, V) float32 logits that follow ``cells[:i + 1]`` for i in [lo, hi)."""
        toks = np.asarray(cells, dtype=np.int64)
        hashes = np.cumsum((toks + 1) * self._weights[: len(toks)]) % (2**31)
        out = np.empty((hi - lo, N_VOCAB), dtype=np.float64)
        for i in range(lo, hi):
            counts = np.zeros(N_VOCAB)
            for k in INDUCTION_ORDERS:
                if i < k:
                    break
                # earlier j (k-1 <= j < i) whose k tokens ending at j are the k ending at i: t_(j+1) follows
                match = np.ones(i - (k - 1), dtype=bool)
                for d in range(k):
                    match &= toks[k - 1 - d : i - d] == toks[i - d]
                counts += np.bincount(toks[k : i + 1][match], minlength=N_VOCAB)
            row = self._bigram[toks[i]] + self.induction * np.log1p(counts)
            row += self.hash_weight * self._hashed[hashes[i] % HASH_BUCKETS]
            if tiling is not None and self.tiling_noise:  # another batch shape rounds otherwise
                bucket = (hashes[i] + 7919 * tiling.offset + 104729 * tiling.batch) % HASH_BUCKETS
                row += self.tiling_noise * self._hashed[bucket]
            out[i - lo] = row
        return out.astype(np.float32)

    def _decode(
        self, tokens: Sequence[int], start: int, rows_from: int, on_rows: RowsCallback | None, tiling=None
    ) -> None:
        """Write ``tokens[start:]`` into the cells from position ``start`` (the cells before it are kept
        as they are) and hand the rows predicting ``tokens[rows_from + 1:]`` to ``on_rows``, a few at a time."""
        self._cells = self._cells[:start] + list(tokens[start:])
        self._decoded += len(tokens) - start
        self._calls += 1
        if on_rows is None:
            return
        if self._dry:  # planning: the same calls and counts, flat logits, nothing computed
            rows = np.zeros((len(tokens) - 1 - rows_from, N_VOCAB), dtype=np.float32)
        else:
            rows = self._rows(self._cells, rows_from, len(tokens) - 1, tiling)
        for first in range(0, len(rows), self.rows_per_call):
            on_rows(rows[first : first + self.rows_per_call], first)

    def _row_after(self, tokens: Sequence[int]) -> np.ndarray:
        """The (V,) float32 row after ``tokens``, whatever the cache holds (a pure function of them)."""
        tokens = list(tokens)
        if not tokens:
            raise InvalidParameter("a row needs at least one token before it")
        self.check_fits(len(tokens))
        key, memo = tuple(tokens), self._dry_memo if self._dry else self._memo
        row = memo.pop(key, None)
        if row is None:  # a pure function of the tokens: kept for the next ask (the oldest dropped)
            self._decoded += len(tokens)
            self._calls += 1
            row = np.zeros(N_VOCAB, np.float32) if self._dry else self._rows(tokens, len(tokens) - 1, len(tokens))[0]
            row.setflags(write=False)
            if len(memo) >= MEMO_ROWS:
                del memo[next(iter(memo))]
        memo[key] = row
        return row.copy()

    def _clear(self) -> None:
        self._cells, self._base = [], None


class _TeacherForcing:
    def logprobs(self, tokens: Sequence[int], targets_from: int, temperature: float = 1.0) -> np.ndarray:
        """log p_T(tokens[t] | tokens[:t]) for t >= targets_from (from an empty cache)."""
        check_targets(self, tokens, targets_from)
        targets = np.asarray(tokens[targets_from:], dtype=np.int32)
        out = np.empty(len(targets))

        def take(view, first):
            rows = slice(first, first + len(view))
            out[rows] = kernels.logprob_gather(view, targets[rows], temperature)

        self._clear()
        self._decode(tokens, 0, targets_from - 1, take)
        return out

    def logprobs_many(
        self,
        requests: Sequence[tuple[Sequence[int], int]],
        temperature: float = 1.0,
        on_done: Callable[[int], None] | None = None,
    ) -> list:
        """:meth:`logprobs` of each request in turn."""
        return sequential_logprobs(self, requests, temperature, on_done)


class _Vocabulary:
    @property
    def n_vocab(self) -> int:
        return N_VOCAB


class _LogitRows:
    def logits_rows(self, tokens: Sequence[int], targets_from: int) -> np.ndarray:
        """The (n_targets, V) float32 logits predicting ``tokens[targets_from:]`` (from an empty cache)."""
        check_targets(self, tokens, targets_from)
        out = np.empty((len(tokens) - targets_from, N_VOCAB), dtype=np.float32)

        def take(view, first):
            out[first : first + len(view)] = view

        self._clear()
        self._decode(tokens, 0, targets_from - 1, take)
        return out

    def next_logits(self, prompt: Sequence[int], *, exact: bool = False) -> np.ndarray:
        return self._row_after(prompt)

    @property
    def eog_ids(self) -> np.ndarray:
        return np.array([EOS], dtype=np.int32)

    def is_eog(self, token: int) -> bool:
        return token == EOS


class _PrefixReuse:
    def load_base(self, tokens: Sequence[int], targets_from: int, on_rows: RowsCallback | None = None) -> None:
        """Decode the base into the cells and keep it."""
        check_targets(self, tokens, targets_from)
        self._clear()
        self._decode(tokens, 0, targets_from - 1, on_rows)
        self._base = list(tokens)

    def score_variant(
        self,
        tokens: Sequence[int],
        shared: int,
        targets_from: int,
        on_rows: RowsCallback,
        *,
        exact: bool = False,
        tiling: Tiling | None = None,
    ) -> None:
        """A variant of the base that equals it on ``[0, shared)``: the cells it shares with the base
        are kept and the rest decoded (``exact``: all of it). The contract of the engine's
        ``score_variant``, refused the same way."""
        check_targets(self, tokens, targets_from)
        if exact:
            start = 0
        else:
            check_variant(self._base, tokens, shared, targets_from)
            start = self._reuse_from(shared)
        self._decode(tokens, start, targets_from - 1, on_rows, tiling)

    def _reuse_from(self, shared: int) -> int:
        """The first cell to decode again: the cells before it hold the base's tokens."""
        valid = 0
        for a, b in zip(self._cells, self._base):
            if a != b:
                break
            valid += 1
        return min(shared, valid)


class _Streams:
    @property
    def max_streams(self) -> int:
        return self._max_streams

    def streams(self, prompts: Sequence[Sequence[int]]) -> _FakeStreams:
        """Lock-step streams, one per prompt (each row a pure function of its stream's tokens)."""
        return _FakeStreams(self, prompts)

    def held_logits(self, tokens: Sequence[int], key) -> np.ndarray:
        return self._row_after(tokens)


class _FakeStreams:
    """``last_logits`` (n, V) after each stream's tokens; ``step`` appends one token to the active ones."""

    def __init__(self, backend: _Core, prompts: Sequence[Sequence[int]]):
        if not 1 <= len(prompts) <= backend.max_streams:
            raise InvalidParameter(f"number of streams must be in [1, {backend.max_streams}], got {len(prompts)}")
        for i, prompt in enumerate(prompts):
            if not prompt:
                raise InvalidParameter(f"stream {i} has an empty prompt")
            backend.check_fits(len(prompt), f"prompt of stream {i}")
        self.backend = backend
        self.tokens = [list(p) for p in prompts]
        self.last_logits = np.stack([backend._row_after(p) for p in self.tokens])

    def step(self, tokens: Sequence[int], active: Sequence[bool] | None = None) -> np.ndarray:
        idx = range(len(self.tokens)) if active is None else np.flatnonzero(np.asarray(active, dtype=bool))
        for i in idx:
            self.tokens[i].append(int(tokens[i]))
            self.backend.check_fits(len(self.tokens[i]), "prompt + generated tokens")
            self.last_logits[i] = self.backend._row_after(self.tokens[i])
        return self.last_logits


class _CountsDecodes:
    @property
    def tokens_decoded(self) -> int:
        """Every token written into the cells (or read for a row) so far."""
        return self._decoded


class _DryRun:
    """Decodes counted, not computed (``dry_run``: flat rows), as the engine's planning needs; ``clear``
    empties the cache and the kept rows, so a plan and the run after it start alike."""

    @property
    def dry_run(self) -> bool:
        return self._dry

    @dry_run.setter
    def dry_run(self, value: bool) -> None:
        self._dry = bool(value)
        self._dry_memo.clear()

    @property
    def decode_calls(self) -> int:
        return self._calls

    @decode_calls.setter
    def decode_calls(self, value: int) -> None:
        self._calls = int(value)

    @property
    def tokens_decoded(self) -> int:
        return self._decoded

    @tokens_decoded.setter
    def tokens_decoded(self, value: int) -> None:
        self._decoded = int(value)

    def clear(self) -> None:
        self._clear()
        self._memo.clear()
        self._dry_memo.clear()


class _Embeddings:
    def embed(self, text: str) -> np.ndarray:
        """The mean of a seeded vector per byte bigram of ``text``: texts that share words embed close."""
        toks = [BOS, *self.tokenize(text)]
        pairs = np.asarray(toks[:-1]) * N_VOCAB + np.asarray(toks[1:]) if len(toks) > 1 else np.asarray([BOS])
        return self._embedding[pairs % EMBEDDING_BUCKETS].mean(axis=0)


class _SampledCompletions:
    def sample_texts(
        self, requests: Sequence[tuple[Sequence[int], int]], temperature: float, max_new_tokens: int
    ) -> list[str]:
        """One completion per (prompt tokens, seed), drawn from the rows at ``temperature`` (0: greedy)."""
        texts = []
        for prompt, seed in requests:
            rng, path = np.random.default_rng(seed), list(prompt)
            for _ in range(max_new_tokens):
                row = self._row_after(path).astype(np.float64)
                if temperature == 0:
                    tok = int(np.argmax(row))
                else:
                    p = np.exp((row - row.max()) / temperature)
                    tok = int(rng.choice(N_VOCAB, p=p / p.sum()))
                if tok == EOS:
                    break
                path.append(tok)
            texts.append(self.detokenize(path[len(prompt) :]))
        return texts


_MIXINS = {
    TeacherForcing: _TeacherForcing,
    Vocabulary: _Vocabulary,
    LogitRows: _LogitRows,
    PrefixReuse: _PrefixReuse,
    Streams: _Streams,
    DryRun: _DryRun,  # before CountsDecodes: its counter can be set back (a plan restores it)
    CountsDecodes: _CountsDecodes,
    Embeddings: _Embeddings,
    SampledCompletions: _SampledCompletions,
}
_CLASSES: dict[tuple, type] = {}


class FakeBackend(_Core):
    """A backend with deterministic logits and exactly the ``capabilities`` asked for (see the module).

    ``seed`` draws the tables; ``n_ctx`` is the window; ``rows_per_call`` how many rows each
    ``on_rows`` call hands over (so callers see rows in several chunks, as from llama.cpp);
    ``induction`` and ``hash_weight`` are β and γ; ``tiling_noise`` moves the rows of a decode in
    another batch tiling (``score_variant(tiling=...)``) by that much times a seeded row, as rounding
    would (0: a noise floor of exactly 0)."""

    def __new__(cls, seed: int = 0, *, capabilities: Sequence[type] = DEFAULT_CAPABILITIES, **_):
        unknown = [c for c in capabilities if c not in _MIXINS]
        if unknown:
            raise InvalidParameter(f"a FakeBackend cannot have {unknown}")
        if DryRun in capabilities and CountsDecodes not in capabilities:
            raise InvalidParameter("a FakeBackend that runs dry counts its decodes: give it CountsDecodes too")
        key = (cls, *sorted(capabilities, key=lambda c: list(_MIXINS).index(c)))
        made = _CLASSES.get(key)
        if made is None:
            mixins = tuple(_MIXINS[c] for c in key[1:])
            made = _CLASSES[key] = type(cls.__name__, (cls, *mixins), {"__doc__": cls.__doc__})
        return object.__new__(made)

    def __init__(self, seed: int = 0, *, capabilities: Sequence[type] = DEFAULT_CAPABILITIES, **options):
        super().__init__(seed, **options)
        self.capabilities = tuple(capabilities)

    def close(self) -> None:
        """Nothing to release (as ``Engine.close``)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
