"""What the engine's KV cache holds, sequence by sequence.

llama.cpp keeps the cells; this class keeps what ctxlite knows about them, in one place:

* sequence 0 holds one token list *in place* (the cell of each token is its position): the base
  of prefix-shared variants, or the prompt of the first stream. Its first ``valid`` cells hold
  ``base[:valid]``; ``base_row`` is the logits row after all of ``base`` when it is known.
* sequences 1, 2, ... hold either the other streams of a lock-step run or the keyed prompts of
  ``Engine.held_logits`` (least recently used first out).

Why in place: llama.cpp's CPU reductions over KV cells round differently when a token's cell is
not at its own position, so a suffix copied into another sequence at another offset changes
log-probabilities (design notes: docs/design.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp as _llama
import numpy as np

BASE_SEQ = 0


@dataclass
class KeyedSeq:
    """A sequence of ``held_logits``: the tokens its cells hold and the row after them."""

    seq: int
    tokens: list[int]
    row: np.ndarray | None = None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class KVCache:
    """The bookkeeping of one llama.cpp memory with ``n_seq_max`` sequences."""

    def __init__(self, memory, n_seq_max: int):
        self._mem = memory
        self.n_seq_max = n_seq_max
        self.base: list[int] | None = None
        self.valid = 0
        self.base_row: np.ndarray | None = None
        self.keyed: dict[object, KeyedSeq] = {}

    def clear(self, *, keep_base: bool = False) -> None:
        """Empty every sequence; ``keep_base`` remembers the base's tokens (none of its cells), so a
        variant decoded from position 0 can still say how much of the base it holds afterwards."""
        _llama.llama_memory_clear(self._mem, True)
        self.base = self.base if keep_base else None
        self.valid, self.base_row = 0, None
        self.keyed.clear()

    def drop(self, seq: int, start: int = -1) -> None:
        """Drop the cells of ``seq`` from position ``start`` on (all of them for -1)."""
        _llama.llama_memory_seq_rm(self._mem, seq, start, -1)

    def copy(self, src: int, dst: int, end: int = -1) -> None:
        """Share the cells of ``src`` before ``end`` (all for -1) with ``dst``."""
        _llama.llama_memory_seq_cp(self._mem, src, dst, 0 if end >= 0 else -1, end)

    # ----- sequence 0 -----------------------------------------------------
    def reusable(self, tokens: Sequence[int]) -> int:
        """How many leading cells of sequence 0 hold ``tokens``' prefix."""
        return min(self.valid, common_prefix(tokens, self.base or ()))

    def cut_base(self, start: int) -> None:
        """Drop sequence 0's cells from ``start`` on (they are about to be decoded again)."""
        self.drop(BASE_SEQ, start)
        self.valid = min(self.valid, start)
        self.base_row = None

    def hold_base(self, tokens: Sequence[int], row: np.ndarray | None = None) -> None:
        """Sequence 0 now holds all of ``tokens`` (and ``row`` after them, when given)."""
        self.base, self.valid = list(tokens), len(tokens)
        self.base_row = None if row is None else row.copy()

    def after_variant(self, tokens: Sequence[int], canonical_upto: int | None = None) -> None:
        """Sequence 0 holds a variant of the base: only the prefix they share is still base (and
        only before ``canonical_upto`` when the cells from there on were decoded in another tiling,
        whose rounding a canonical decode must not inherit)."""
        self.valid = common_prefix(tokens, self.base or ())
        if canonical_upto is not None:
            self.valid = min(self.valid, canonical_upto)

    def drop_others(self) -> None:
        """Empty every sequence but 0 (streams and keyed prompts)."""
        for seq in range(1, self.n_seq_max):
            self.drop(seq)
        self.keyed.clear()

    # ----- keyed prompts (sequences 1, 2, ...) ----------------------------
    def take_keyed(self, key, tokens: list[int]) -> KeyedSeq:
        """The sequence of ``key``, made most recently used; a new key gets a free (or the least
        recently used) sequence, sharing the longest prefix any held sequence has with ``tokens``."""
        entry = self.keyed.pop(key, None)
        if entry is None:
            entry = self._new_keyed(tokens)
        self.keyed[key] = entry
        return entry

    def _new_keyed(self, tokens: list[int]) -> KeyedSeq:
        used = {e.seq for e in self.keyed.values()}
        free = [q for q in range(1, self.n_seq_max) if q not in used]
        if not free:
            free = [self.keyed.pop(next(iter(self.keyed))).seq]
        seq = free[0]
        self.drop(seq)
        best, src = 0, None
        for e in self.keyed.values():
            n = common_prefix(tokens, e.tokens)
            if n > best:
                best, src = n, e.seq
        best = min(best, len(tokens) - 1)
        if src is not None and best > 0:
            self.copy(src, seq, best)
        return KeyedSeq(seq=seq, tokens=tokens[:best] if src is not None else [])

    def make_room(self, n_new: int, capacity: int, keep: KeyedSeq) -> None:
        """Evict least recently used keys (never ``keep``) until ``n_new`` more cells surely fit in
        ``capacity`` (shared cells counted twice)."""
        while sum(len(e.tokens) for e in self.keyed.values()) + n_new > capacity:
            victims = [k for k, e in self.keyed.items() if e is not keep]
            if not victims:
                return
            self.drop(self.keyed.pop(victims[0]).seq)
