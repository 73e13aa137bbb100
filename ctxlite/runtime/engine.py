"""llama.cpp engine: one GGUF model and one context, the local :class:`~ctxlite.runtime.backend.Backend`.

It runs the model four ways:

1. Teacher forcing: decode a token sequence once and read log-probabilities of
   every response token from the rows that predict them (``score_tokens``).
   Only those rows are flagged for output: the output projection over a 262k
   vocabulary is a large share of the work.
2. Prefix-shared variants: decode a *base* sequence once, then for each variant
   that shares the prefix ``[0, s)`` with it, drop the cells from ``s`` on
   and decode only the variant's suffix at positions ``s, s+1, ...`` in place
   (``load_base`` / ``score_variant``). Submitting variants in decreasing ``s``
   keeps every prefix valid without recompute; ``exact=True`` decodes the
   variant from scratch instead.
3. Streams: several sequences stepped in lock-step, one token each per batch
   (``Streams``): k sampled continuations of one prompt and the two-stream
   with/without-context stepping of CID decoding. The first prompt goes into
   sequence 0 in place like a variant, so an audit that asks about the same (or
   a prefix-sharing) prompt trial after trial decodes only what changed.
4. Keyed prompts: ``held_logits`` keeps each of several prompts in a sequence of
   its own, so alternating between them decodes each once.

What each sequence holds is the :class:`~ctxlite.runtime.kv.KVCache`'s business. A row reached
through another decode history can differ from an empty-cache decode by rounding: llama.cpp's CPU
kernels round by batch shape (design notes: docs/design.md, "Batch-shape rounding").

Logits are read in place from llama.cpp's float32 buffer as numpy *views* that
are handed to a callback and never escape it: the buffer is overwritten by the
next decode, so keeping a view would be a dangling pointer.

The context is built with the low-level API because the high-level ``Llama``
silently ignores ``kv_unified`` (one cache in which streams share their
prompt's cells), and with ``swa_full`` so that sliding-window layers keep every
prefix cell a re-decoded suffix may attend to (a pruned sliding-window cache
cannot be rolled back to an earlier split point).
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

# import llama_cpp lazily-but-once: it loads a shared library and prints nothing.
import llama_cpp as _llama
import numpy as np

from ctxlite.errors import ContextOverflow, DecodeError, InvalidParameter, ModelError
from ctxlite.identity import software
from ctxlite.runtime import kernels, models
from ctxlite.runtime.backend import (
    RowsCallback,
    Tiling,
    char_cover_of,
    char_spans_of,
    check_targets,
    check_variant,
    sequential_logprobs,
)
from ctxlite.runtime.build import llama_build
from ctxlite.runtime.kv import BASE_SEQ, KVCache, common_prefix
from ctxlite.runtime.models import model_identity, resolve_model

_backend_ready = False


def _init_backend() -> None:
    global _backend_ready
    if _backend_ready:
        return
    if not os.environ.get("CTXLITE_LLAMA_LOG"):
        # a C callback: a Ctrl-C landing in a Python one would be swallowed by ctypes
        _llama.llama_log_set(ctypes.cast(kernels.drop_log_address(), _llama.llama_log_callback), ctypes.c_void_p())
    _llama.llama_backend_init()
    _backend_ready = True


class _InterruptDuringLoad:
    """Ctrl-C while llama.cpp loads a model: remember it, abort the load, raise it after.

    A Python exception raised inside a C callback is printed and swallowed by
    ctypes, so the default handler would lose the interrupt. While loading,
    SIGINT only sets a flag; llama.cpp polls the load's progress callback,
    which returns False to abort once the flag is set.
    """

    pending = False
    progress = 0.0  # how far the last load got (1.0 = complete)

    @staticmethod
    def handler(signum, frame):
        _InterruptDuringLoad.pending = True


@_llama.llama_progress_callback
def _load_progress(progress, user_data):  # pragma: no cover - called from C
    _InterruptDuringLoad.progress = progress
    return not _InterruptDuringLoad.pending


def _load_model(path: Path, n_gpu_layers: int, vocab_only: bool = False):
    """``llama_model_load_from_file`` that a Ctrl-C aborts promptly (``KeyboardInterrupt``);
    ``vocab_only``: the metadata and vocabulary without the weights."""
    mparams = _llama.llama_model_default_params()
    mparams.n_gpu_layers = n_gpu_layers
    mparams.vocab_only = vocab_only
    mparams.progress_callback = _load_progress
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _InterruptDuringLoad.handler) if main else None
    _InterruptDuringLoad.pending, _InterruptDuringLoad.progress = False, 0.0
    try:
        model = _llama.llama_model_load_from_file(str(path).encode(), mparams)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    if _InterruptDuringLoad.pending:
        _InterruptDuringLoad.pending = False
        if model:
            _llama.llama_model_free(model)
        raise KeyboardInterrupt
    if not model:
        raise ModelError(
            f"llama.cpp could not load {path}: truncated, corrupt or unsupported GGUF "
            f"(set CTXLITE_LLAMA_LOG=1 to see llama.cpp's reason)"
        )
    return model


def _meta_str(model, key: str) -> str | None:
    """The model's GGUF metadata value under ``key`` as llama.cpp prints it (any length), or None."""
    n = _llama.llama_model_meta_val_str(model, key.encode(), None, 0)  # snprintf: the length it needs
    if n < 0:
        return None
    buf = ctypes.create_string_buffer(n + 1)
    _llama.llama_model_meta_val_str(model, key.encode(), buf, n + 1)
    return buf.raw[:n].decode("utf-8", "replace")


def _meta_int(model, key: str) -> int | None:
    """An integer of the model's GGUF metadata under ``{architecture}.{key}``, or None."""
    arch = _meta_str(model, "general.architecture")
    value = _meta_str(model, f"{arch}.{key}") if arch is not None else None
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def model_metadata(model: str | os.PathLike, key: str) -> str | None:
    """One GGUF metadata value of a model (registry name or path) without loading its weights
    (llama.cpp's ``vocab_only`` load); None when the file has no such key."""
    path = resolve_model(model)
    _init_backend()
    loaded = _load_model(path, 0, vocab_only=True)
    try:
        return _meta_str(loaded, key)
    finally:
        _llama.llama_model_free(loaded)


def _available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


ROW_TILE = 16
"""Variants are re-decoded from a position that is a multiple of this, and batches are cut at
multiples of ``n_batch``: llama.cpp's CPU matrix kernels group the rows of a batch in tiles, so a
token's logits round differently with its row modulo the tile. Decoding a variant's suffix from
an aligned position puts every token in the row (modulo the tile) a from-scratch decode puts it
in, and the reuse path then equals ``exact=True`` bit for bit (tests/model/test_engine.py checks every
window at strides 1, 2, 3 and 8). Measured: 4 on AVX2 (every window of stride 1 matched with 4
and 8, 9 of 24 missed with 1); 16 leaves room for wider tiles, for at most 15 extra tokens per
variant. Other builds (AVX2 vs AVX-512 kernels) and other batch sizes still round differently:
the noise floor measures that (``Tiling``)."""


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity where the OS has one, else the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS and Windows have no affinity call
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class EngineConfig:
    """llama.cpp settings (names mirror llama.cpp's CLI flags).

    ``n_ctx`` is the window one sequence may use (prompt + response); the KV
    cache holds ``kv_slots`` such windows so variants, streams and an audit's keyed
    prompts fit beside the base sequence. Every setting but the thread count is part
    of a run's identity (:func:`local_identity`), so the defaults are the ones every
    run uses, the command line's and a library caller's alike: ``kv_slots`` 4 leaves
    an audit's continuation trees three windows of keyed prompts (with 2 a generation
    audit evicts and re-decodes them, 1.7x slower, and its rows round differently;
    scoring uses two windows and gives the same bits with either). Flash attention is
    off by default: on vs off changes log-probs by ~0.05-0.09 nats (design notes:
    docs/design.md) and CPU tests pin it.
    """

    n_ctx: int = 2048
    n_batch: int = 512
    n_threads: int | None = None
    n_gpu_layers: int = 0
    flash_attn: bool = False
    kv_slots: int = 4
    n_seq_max: int = 8

    def __post_init__(self):
        if self.n_ctx < 16:
            raise InvalidParameter(f"n_ctx must be >= 16, got {self.n_ctx}")
        if self.n_batch < 1:
            raise InvalidParameter(f"n_batch must be >= 1, got {self.n_batch}")
        if self.n_threads is not None and self.n_threads < 1:
            raise InvalidParameter(f"n_threads must be >= 1, got {self.n_threads}")
        if self.kv_slots < 1 or self.n_seq_max < 2:
            raise InvalidParameter(f"need kv_slots >= 1 and n_seq_max >= 2, got {self.kv_slots}, {self.n_seq_max}")

    @property
    def threads(self) -> int:
        """``n_threads``, else the CPUs this process may run on (its affinity: ``taskset``, cgroups)."""
        return self.n_threads or usable_cpus()


class Engine:
    """One loaded GGUF model and a llama.cpp context over it: a backend with every capability of
    :mod:`ctxlite.runtime.backend` but embeddings, which ``Engine(..., embeddings=True)`` has (it
    makes an :class:`EmbeddingEngine`, whose context pools its hidden states).

    >>> eng = Engine("gemma-3-270m")                       # doctest: +SKIP
    >>> toks = eng.tokenize("Paris is the capital of France")  # doctest: +SKIP
    >>> eng.logprobs(toks, targets_from=3)                 # doctest: +SKIP
    """

    def __new__(cls, model=None, config=None, *, embeddings: bool = False):
        if embeddings and cls is Engine:
            cls = EmbeddingEngine
        return super().__new__(cls)

    def __init__(
        self, model: str | os.PathLike | None = None, config: EngineConfig | None = None, *, embeddings: bool = False
    ):
        self.config = config or EngineConfig()
        self.model_path: Path = resolve_model(model)
        self.embeddings = embeddings
        _init_backend()
        self._ctx = None
        self._batch = None
        self._model = _load_model(self.model_path, self.config.n_gpu_layers)
        self._vocab = _llama.llama_model_get_vocab(self._model)
        self.n_vocab: int = _llama.llama_vocab_n_tokens(self._vocab)
        self.n_ctx_train: int = _llama.llama_model_n_ctx_train(self._model)
        self.n_embd: int = _llama.llama_model_n_embd(self._model)
        try:
            self._check_resources()
        except InvalidParameter:
            self.close()
            raise
        self._make_context()
        self.kv = KVCache(self._mem, self.config.n_seq_max)
        self.tokens_decoded = 0  # every token through llama_decode (a cost counter)
        self.decode_calls = 0  # llama_decode calls (the other cost counter)
        self.dry_run = False  # count the decodes a run needs without running them (planning): flat logits
        self._eog_ids: np.ndarray | None = None

    @property
    def max_streams(self) -> int:
        """How many streams (or keyed prompts) run at once: every sequence but the base's."""
        return self.config.n_seq_max - 1

    # ----- lifecycle -------------------------------------------------------
    def kv_cache_bytes(self) -> int:
        """Bytes of the f16 KV cache this config allocates: cells × layers × (K + V widths) × 2."""
        n_layer = _llama.llama_model_n_layer(self._model)
        n_head = max(1, _llama.llama_model_n_head(self._model))
        n_head_kv = _llama.llama_model_n_head_kv(self._model) or n_head
        head_dim = _meta_int(self._model, "attention.key_length") or self.n_embd // n_head
        v_dim = _meta_int(self._model, "attention.value_length") or head_dim
        cells = self.config.n_ctx * self.config.kv_slots
        return cells * n_layer * n_head_kv * (head_dim + v_dim) * 2

    def _check_resources(self) -> None:
        """Refuse a context the model was not trained for, or whose KV cache would not fit in memory."""
        name = self.model_path.name
        if self.config.n_ctx > self.n_ctx_train:
            raise InvalidParameter(
                f"--n-ctx {self.config.n_ctx} is larger than the {self.n_ctx_train} tokens {name} "
                f"was trained on: use at most {self.n_ctx_train}"
            )
        need, free = self.kv_cache_bytes(), _available_memory()
        if self.config.n_gpu_layers == 0 and free is not None and need > 0.8 * free:
            raise InvalidParameter(
                f"--n-ctx {self.config.n_ctx} needs a {need / 2**30:.1f} GiB KV cache ({self.config.kv_slots} "
                f"windows) but only {free / 2**30:.1f} GiB of memory is available: lower --n-ctx"
            )

    def _make_context(self) -> None:
        cfg = self.config
        cp = _llama.llama_context_default_params()
        cp.n_ctx = cfg.n_ctx * cfg.kv_slots
        cp.n_batch = cfg.n_batch
        cp.n_ubatch = cfg.n_batch
        cp.n_seq_max = cfg.n_seq_max
        cp.n_threads = cfg.threads
        cp.n_threads_batch = cfg.threads
        cp.kv_unified = True
        cp.swa_full = True
        cp.flash_attn_type = (
            _llama.LLAMA_FLASH_ATTN_TYPE_ENABLED if cfg.flash_attn else _llama.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        cp.no_perf = True
        if self.embeddings:
            cp.embeddings = True
            cp.pooling_type = _llama.LLAMA_POOLING_TYPE_MEAN
        self._ctx = _llama.llama_init_from_model(self._model, cp)
        if not self._ctx:
            raise ModelError(f"llama.cpp could not create a context of {cp.n_ctx} cells for {self.model_path.name}")
        self._mem = _llama.llama_get_memory(self._ctx)
        self._batch = _llama.llama_batch_init(cfg.n_batch, 0, cfg.n_seq_max)
        b = self._batch
        n = cfg.n_batch
        self._b_token = np.ctypeslib.as_array(b.token, shape=(n,))
        self._b_pos = np.ctypeslib.as_array(b.pos, shape=(n,))
        self._b_nseq = np.ctypeslib.as_array(b.n_seq_id, shape=(n,))
        self._b_logits = np.ctypeslib.as_array(b.logits, shape=(n,))
        self._b_seq = [np.ctypeslib.as_array(b.seq_id[i], shape=(cfg.n_seq_max,)) for i in range(n)]

    def close(self) -> None:
        """Free the context and model (idempotent)."""
        if getattr(self, "_batch", None) is not None:
            _llama.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            _llama.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            _llama.llama_model_free(self._model)
            self._model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    # ----- tokenizer -------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = False) -> list[int]:
        """Token ids of ``text`` (no BOS unless ``add_bos``)."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (_llama.llama_token * cap)()
        n = _llama.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
        if n < 0:
            cap = -n
            buf = (_llama.llama_token * cap)()
            n = _llama.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
        return list(buf[:n])

    def token_bytes(self, token: int) -> bytes:
        """The raw bytes of one token (may be a partial UTF-8 sequence)."""
        buf = ctypes.create_string_buffer(64)
        n = _llama.llama_token_to_piece(self._vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = _llama.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def char_spans(self, tokens: Sequence[int]) -> list[tuple[int, int]]:
        """Character span ``[start, end)`` of each token in ``detokenize(tokens)``.

        A character split over several tokens belongs to the token that completes it.
        """
        return char_spans_of(self.token_bytes, tokens)

    def char_cover(self, tokens: Sequence[int]) -> list[tuple[int, int]]:
        """The characters each token holds bytes of (:func:`~ctxlite.runtime.backend.char_cover_of`)."""
        return char_cover_of(self.token_bytes, tokens)

    @property
    def bos_id(self) -> int | None:
        return int(_llama.llama_vocab_bos(self._vocab)) if _llama.llama_vocab_get_add_bos(self._vocab) else None

    @property
    def eog_ids(self) -> np.ndarray:
        """Sorted int32 ids of every end-of-generation token (EOS, EOT, ...)."""
        if self._eog_ids is None:
            self._eog_ids = np.array(
                [t for t in range(self.n_vocab) if _llama.llama_vocab_is_eog(self._vocab, t)], dtype=np.int32
            )
        return self._eog_ids

    def is_eog(self, token: int) -> bool:
        return bool(_llama.llama_vocab_is_eog(self._vocab, token))

    # ----- decoding core ---------------------------------------------------
    def check_fits(self, n_tokens: int, what: str = "prompt + response") -> None:
        """Raise ``ContextOverflow`` naming both numbers if one sequence is too long."""
        limit = self.config.n_ctx
        if n_tokens > limit:
            raise ContextOverflow(
                f"{what} is {n_tokens} tokens but the context window is {limit} tokens "
                f"(shorten the input or raise --n-ctx; the model was trained on {self.n_ctx_train})"
            )

    def decode(
        self,
        tokens: np.ndarray,
        pos: np.ndarray,
        seqs: np.ndarray,
        want: np.ndarray,
        on_rows: RowsCallback | None,
        first_chunk: int | None = None,
        chunk: int | None = None,
    ) -> None:
        """Decode arbitrary (token, position, sequence) entries in chunks of ``chunk`` (default
        ``n_batch``; at most it), the first of ``first_chunk`` entries when given.

        Entries with ``want`` set produce logits; after each chunk ``on_rows`` is
        called with a view of that chunk's requested rows and the index of the
        first of them among all requested rows.
        """
        n_batch = self.config.n_batch if chunk is None else min(chunk, self.config.n_batch)
        first_chunk = n_batch if first_chunk is None else min(first_chunk, n_batch)
        cuts = [0, *range(first_chunk, len(tokens), n_batch)]
        done_rows = 0
        for lo in cuts:
            hi = min(lo + (first_chunk if lo == 0 else n_batch), len(tokens))
            n = hi - lo
            self._b_token[:n] = tokens[lo:hi]
            self._b_pos[:n] = pos[lo:hi]
            self._b_nseq[:n] = 1
            self._b_logits[:n] = want[lo:hi]
            for i in range(n):
                self._b_seq[i][0] = seqs[lo + i]
            self._batch.n_tokens = n
            self.tokens_decoded += n
            self.decode_calls += 1
            n_out = int(np.count_nonzero(want[lo:hi]))
            if self.dry_run:  # planning: the same calls and counts, flat logits, nothing decoded
                if n_out and on_rows is not None:
                    on_rows(np.zeros((n_out, self.n_vocab), dtype=np.float32), done_rows)
                done_rows += n_out
                continue
            rc = _llama.llama_decode(self._ctx, self._batch)
            if rc != 0:
                reason = {1: "no free KV-cache slot (raise --n-ctx)", 2: "aborted"}.get(rc, "see CTXLITE_LLAMA_LOG=1")
                raise DecodeError(f"llama_decode returned {rc}: {reason}")
            if n_out and on_rows is not None:
                ptr = _llama.llama_get_logits(self._ctx)
                view = np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))
                on_rows(view, done_rows)
            done_rows += n_out

    def decode_sequence(
        self,
        tokens: Sequence[int],
        seq: int,
        pos0: int,
        rows_from: int,
        on_rows: RowsCallback | None,
        rows_to: int | None = None,
        tiling: Tiling | None = None,
    ) -> None:
        """Decode ``tokens`` into one sequence at positions ``pos0...``; request rows
        (token indices relative to ``tokens``) in ``[rows_from, rows_to)``.

        Batches are cut at absolute positions (multiples of ``n_batch``), where a decode of the
        whole sequence from position 0 cuts them, so a token lands in the same batch row modulo
        the kernels' tile however much of the sequence was reused (see ``ROW_TILE``).
        ``tiling``: its micro-batches from ``pos0`` instead (from position 0 the first holds
        ``tiling.offset`` tokens)."""
        n = len(tokens)
        rows_to = n if rows_to is None else rows_to
        want = np.zeros(n, dtype=np.int8)
        want[max(rows_from, 0) : rows_to] = 1
        self.decode(
            np.asarray(tokens, dtype=np.int32),
            np.arange(pos0, pos0 + n, dtype=np.int32),
            np.full(n, seq, dtype=np.int32),
            want,
            on_rows,
            first_chunk=self.config.n_batch - pos0 % self.config.n_batch
            if tiling is None
            else (tiling.offset if pos0 == 0 else tiling.batch),
            chunk=None if tiling is None else tiling.batch,
        )

    def clear(self) -> None:
        """Empty the KV cache (forgets any base sequence)."""
        self.kv.clear()

    # ----- 1. teacher forcing ---------------------------------------------
    def score_tokens(self, tokens: Sequence[int], targets_from: int, on_rows: RowsCallback) -> None:
        """Decode ``tokens`` from scratch; hand over the rows predicting
        ``tokens[targets_from:]`` (row j predicts target ``targets_from + j``)."""
        self._check_targets(tokens, targets_from)
        self.clear()
        self.decode_sequence(tokens, BASE_SEQ, 0, targets_from - 1, on_rows, len(tokens) - 1)

    def logprobs(self, tokens: Sequence[int], targets_from: int, temperature: float = 1.0) -> np.ndarray:
        """log p_T(tokens[t] | tokens[:t]) for t >= targets_from, in one forward pass."""
        targets = np.asarray(tokens[targets_from:], dtype=np.int32)
        out = np.empty(len(targets))

        def take(view, first):
            out[first : first + len(view)] = kernels.logprob_gather(
                view, targets[first : first + len(view)], temperature
            )

        self.score_tokens(tokens, targets_from, take)
        return out

    def logprobs_many(
        self,
        requests: Sequence[tuple[Sequence[int], int]],
        temperature: float = 1.0,
        on_done: Callable[[int], None] | None = None,
    ) -> list[np.ndarray]:
        """:meth:`logprobs` of each (tokens, targets_from), one after the other, in the order given."""
        return sequential_logprobs(self, requests, temperature, on_done)

    def logits_rows(self, tokens: Sequence[int], targets_from: int) -> np.ndarray:
        """Copy of the (n_targets, V) float32 logits predicting ``tokens[targets_from:]``."""
        out = np.empty((len(tokens) - targets_from, self.n_vocab), dtype=np.float32)

        def take(view, first):
            out[first : first + len(view)] = view

        self.score_tokens(tokens, targets_from, take)
        return out

    def _check_targets(self, tokens: Sequence[int], targets_from: int) -> None:
        check_targets(self, tokens, targets_from)

    # ----- 2. prefix-shared variants --------------------------------------
    def load_base(self, tokens: Sequence[int], targets_from: int, on_rows: RowsCallback | None = None) -> None:
        """Decode the base sequence into the cache (sequence 0) and keep it there."""
        self._check_targets(tokens, targets_from)
        self.clear()
        self.decode_sequence(tokens, BASE_SEQ, 0, targets_from - 1, on_rows, len(tokens) - 1)
        self.kv.hold_base(tokens)

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
        """Score a variant of the base that equals it on ``[0, shared)``.

        Reuse path: drop the cache cells from the multiple of ``ROW_TILE`` at or
        below ``shared`` on and decode the variant from there in place (contiguous),
        handing over the rows predicting ``tokens[targets_from:]``. The cells of
        ``[0, shared)`` must still hold base tokens: they do when variants come
        in decreasing ``shared`` (otherwise the missing base tokens are decoded
        again, correct but slower). A variant equal to the base (a null
        ablation) restores it. Decoding in place keeps each token's cell equal
        to its position, as in a from-scratch decode, so llama.cpp's SIMD
        reductions over cells round the same way; copying the prefix into a
        second sequence instead put the suffix at another offset and moved
        summed log-probs by ~1 nat, and made attention span both sequences.
        ``exact=True``: decode the whole variant from position 0.

        ``tiling``: the same decode in another batch tiling (a noise-floor probe, see ``Tiling``):
        restarted from the position ≡ ``tiling.offset`` (mod ``ROW_TILE``) at or below the split
        point (position 0 with ``exact``), in its micro-batches. Its cells from the restart on are
        then not canonical, so the cache stops counting them as base: a later variant re-decodes
        them from an aligned position (the same numbers, a few tokens slower).
        """
        self._check_targets(tokens, targets_from)
        if exact:
            # a clean cache: also drop other sequences' cells (e.g. earlier streams),
            # whose presence would change where the variant's cells land
            self.kv.clear(keep_base=True)
            start = 0
        else:
            # the row predicting the first target sits at targets_from - 1: it must be re-decoded
            check_variant(self.kv.base, tokens, shared, targets_from)
            reusable = min(shared, self.kv.valid)
            if tiling is not None:  # the other alignment (position 0 when no such position is shared)
                start = reusable - (reusable - tiling.offset) % ROW_TILE if reusable >= tiling.offset else 0
            else:
                start = reusable // ROW_TILE * ROW_TILE  # the canonical row alignment
        self.kv.cut_base(start)
        self.decode_sequence(
            tokens[start:], BASE_SEQ, start, targets_from - 1 - start, on_rows, len(tokens) - 1 - start, tiling
        )
        self.kv.after_variant(tokens, canonical_upto=None if tiling is None else start)

    # ----- 3. streams -----------------------------------------------------
    def streams(self, prompts: Sequence[Sequence[int]]) -> Streams:
        """Start one stream per prompt (identical prompts are decoded once and
        their KV copied); see ``Streams``."""
        return Streams(self, prompts)

    def next_logits(self, prompt: Sequence[int], *, exact: bool = False) -> np.ndarray:
        """Copy of the (V,) float32 logits that follow ``prompt`` (one stream, no step).

        The cells ``prompt`` shares with what sequence 0 holds are reused from
        a multiple of ``ROW_TILE`` (``hold_prompt``), so the row is the one
        ``exact=True`` decodes from an empty cache, bit for bit on one build
        with a batch size that is a multiple of ``ROW_TILE`` (``hold_prompt``).
        """
        if exact:
            self.clear()
        return self.streams([prompt]).last_logits[0]

    def hold_prompt(self, prompt: Sequence[int], out_row: np.ndarray) -> None:
        """Put ``prompt`` in sequence 0 in place and write the logits after it to ``out_row``.

        Every other sequence is dropped and sequence 0 keeps only the cells it
        shares with ``prompt`` up to a multiple of ``ROW_TILE``, so each token
        still sits in the cell of its position (llama.cpp moves its cell search
        back to the first freed cell) and in the batch row, modulo the kernels'
        tile, that an empty-cache decode puts it in: the row is the empty-cache
        decode's bit for bit, whatever the cache held before (the decode history
        of a server's earlier requests cannot change a later answer), with a
        batch size that is a multiple of ``ROW_TILE`` (the default 512; at
        others, batches are cut where a reused suffix's first one can be a few
        rows long, which rounds otherwise: tests/model/test_engine.py).
        """
        kv = self.kv
        kv.drop_others()
        shared = kv.reusable(prompt)
        if shared == len(prompt) == len(kv.base or ()) and kv.base_row is not None:
            kv.drop(BASE_SEQ, shared)
            out_row[:] = kv.base_row
            return
        keep = min(shared, len(prompt) - 1)  # the last token is decoded again: its row is wanted
        keep -= keep % ROW_TILE
        kv.base, kv.valid, kv.base_row = None, 0, None
        self._decode_tail(BASE_SEQ, prompt, keep, out_row)
        kv.hold_base(prompt, out_row)

    def _decode_tail(self, seq: int, tokens: Sequence[int], keep: int, out_row: np.ndarray) -> None:
        """Drop ``seq``'s cells from ``keep`` on, decode ``tokens`` from there (at least the last
        token, whose row is needed) and write the logits after ``tokens`` to ``out_row``."""
        keep = min(keep, len(tokens) - 1)
        self.kv.drop(seq, keep)

        def take(view, first):
            out_row[:] = view[-1]

        self.decode_sequence(tokens[keep:], seq, keep, len(tokens) - 1 - keep, take)

    # ----- 4. keyed prompts ------------------------------------------------
    def held_logits(self, tokens: Sequence[int], key) -> np.ndarray:
        """Copy of the logits after ``tokens``, whose cells stay in the sequence of ``key``.

        Up to ``n_seq_max - 1`` keys (e.g. the distinct prompts of an audit)
        each keep a sequence of their own (1, 2, ...; least recently used
        first out). A call drops the key's cells past the prefix ``tokens``
        shares with what it holds and decodes the rest; a key seen for the
        first time starts from the longest prefix any held sequence shares
        with ``tokens``, whose cells it shares (``seq_cp``). So alternating
        between prompts (Z = 0 / 1 trials) decodes each prompt once. Rows
        depend on the decode history by rounding (see ``next_logits``).
        Sequence 0 and its users (variants, streams) are separate: starting
        streams or clearing the cache forgets every key.
        """
        tokens = list(tokens)
        if not tokens:
            raise InvalidParameter("held_logits needs at least one token")
        self.check_fits(len(tokens))
        entry = self.kv.take_keyed(key, tokens)
        keep = common_prefix(tokens, entry.tokens)
        if keep == len(tokens) == len(entry.tokens) and entry.row is not None:
            return entry.row.copy()
        keep = min(keep, len(tokens) - 1)  # the last token is decoded again for its row
        entry.tokens, entry.row = tokens[:keep], None
        # one window is left to sequence 0 when there are several
        self.kv.make_room(len(tokens) - keep, self.config.n_ctx * max(1, self.config.kv_slots - 1), entry)
        row = np.empty(self.n_vocab, dtype=np.float32)
        try:
            self._decode_tail(entry.seq, tokens, keep, row)
        except DecodeError:
            if not keep and len(self.kv.keyed) == 1 and self.kv.base is None:
                raise  # alone in an empty cache: a real failure
            self.clear()  # the cache was full (sequence 0 holds cells too): start over once
            return self.held_logits(tokens, key)
        entry.tokens, entry.row = tokens, row
        return row.copy()

    # ----- metadata -------------------------------------------------------
    def metadata(self, key: str) -> str | None:
        """The model's GGUF metadata value under ``key`` (e.g. ``tokenizer.chat_template``), or None.

        Values are strings as llama.cpp prints them (numbers in decimal); arrays are not readable here.
        """
        return _meta_str(self._model, key)

    def identity(self) -> dict:
        """What identifies this engine's numbers in a run log (:func:`local_identity`)."""
        return local_identity(self.model_path, self.config)

    def describe(self) -> dict:
        """Run metadata: model file, llama.cpp build and engine settings."""
        info = models.describe(self.model_path)
        info.update(
            backend="llama.cpp",
            llama_cpp_python=_llama.__version__,
            n_vocab=self.n_vocab,
            n_ctx=self.config.n_ctx,
            n_batch=self.config.n_batch,
            n_threads=self.config.threads,
            n_gpu_layers=self.config.n_gpu_layers,
            flash_attn=self.config.flash_attn,
        )
        return info


class EmbeddingEngine(Engine):
    """An :class:`Engine` whose context pools the final hidden states: it has embeddings too
    (``Engine(model, config, embeddings=True)`` makes one)."""

    def __init__(self, model: str | os.PathLike | None = None, config: EngineConfig | None = None, **_):
        super().__init__(model, config, embeddings=True)

    def embed(self, text: str) -> np.ndarray:
        """Mean-pooled final hidden state of ``text``."""
        tokens = self.tokenize(text, add_bos=True) or [self.bos_id or 0]
        self.check_fits(len(tokens), "text to embed")
        self.clear()
        self.decode_sequence(tokens, BASE_SEQ, 0, len(tokens), None)
        if self.dry_run:
            return np.full(self.n_embd, 1.0 / math.sqrt(self.n_embd))
        ptr = _llama.llama_get_embeddings_seq(self._ctx, BASE_SEQ)
        if not ptr:
            raise DecodeError("llama.cpp returned no pooled embedding")
        return np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).astype(np.float64)


def local_identity(model_path, config: EngineConfig) -> dict:
    """Identity of the model runtime: software versions, the model file's content, the engine settings.

    The thread count is left out: it changes speed, not the numbers. Everything
    else of ``EngineConfig`` can change rounding (batch shapes, offloaded
    layers, flash attention, the KV room an audit's keyed prompts have) and is part
    of the identity, and so are the instruction sets llama.cpp was compiled for
    (``software.llama_build``): an AVX-512 build rounds differently from an AVX2 one,
    so a log is resumed only by the build that wrote it.
    """
    cfg = {k: v for k, v in asdict(config).items() if k != "n_threads"}
    build = llama_build()
    return {
        "software": {**software(), "llama_build": {"features": build["features"]}},
        "model": model_identity(model_path),
        "engine": cfg,
    }


@dataclass(frozen=True)
class LocalModel:
    """A llama.cpp model not loaded yet: its identity is known (the file is hashed) without loading
    it, and :meth:`open` loads it. A run (:mod:`ctxlite.runs`) takes one where it may refuse its log
    before any model work, and opens it only then; an open :class:`Engine` serves the same."""

    model: str | os.PathLike | None = None
    config: EngineConfig = field(default_factory=EngineConfig)
    embeddings: bool = False

    def identity(self) -> dict:
        return local_identity(resolve_model(self.model), self.config)

    def open(self) -> Engine:
        return Engine(self.model, self.config, embeddings=self.embeddings)


class Streams:
    """Several sequences decoded in lock-step: one token per stream per batch.

    ``last_logits`` holds a copy of each stream's newest (n_streams, V) logits
    row; ``step(tokens)`` appends one token to every stream and refreshes it.
    Used for k sampled continuations of one prompt and for CID's with/without
    context pair.
    """

    def __init__(self, engine: Engine, prompts: Sequence[Sequence[int]]):
        if not 1 <= len(prompts) <= engine.max_streams:
            raise InvalidParameter(f"number of streams must be in [1, {engine.max_streams}], got {len(prompts)}")
        self.engine = engine
        self.n = len(prompts)
        self.positions = np.array([len(p) for p in prompts], dtype=np.int32)
        self.last_logits = np.empty((self.n, engine.n_vocab), dtype=np.float32)
        for i, prompt in enumerate(prompts):
            if not prompt:
                raise InvalidParameter(f"stream {i} has an empty prompt")
            engine.check_fits(len(prompt), f"prompt of stream {i}")
        engine.hold_prompt(list(prompts[0]), self.last_logits[0])
        first_of: dict[tuple[int, ...], int] = {tuple(prompts[0]): 0}
        for i, prompt in enumerate(prompts):
            if i == 0:
                continue
            key = tuple(prompt)
            if key in first_of:  # same prompt: share its KV cells, copy its last row
                src = first_of[key]
                engine.kv.copy(src, i)
                self.last_logits[i] = self.last_logits[src]
                continue
            first_of[key] = i

            def keep(view, first, i=i):
                self.last_logits[i] = view[-1]

            engine.decode_sequence(prompt, i, 0, len(prompt) - 1, keep)

    def step(self, tokens: Sequence[int], active: Sequence[bool] | None = None) -> np.ndarray:
        """Append ``tokens[i]`` to stream i (only where ``active``); return ``last_logits``."""
        idx = np.arange(self.n) if active is None else np.flatnonzero(np.asarray(active, dtype=bool))
        if len(idx) == 0:
            return self.last_logits
        if int(self.positions[idx].max()) + 1 > self.engine.config.n_ctx:
            self.engine.check_fits(int(self.positions[idx].max()) + 1, "prompt + generated tokens")
        toks = np.asarray(tokens, dtype=np.int32)[idx]

        def keep(view, first):
            self.last_logits[idx] = view

        self.engine.decode(
            toks, self.positions[idx].copy(), idx.astype(np.int32), np.ones(len(idx), dtype=np.int8), keep
        )
        self.positions[idx] += 1
        return self.last_logits
