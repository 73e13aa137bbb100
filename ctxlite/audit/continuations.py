"""Exact i.i.d. continuations of repeated prompts, with a memo of next-token distributions.

An audit asks the same prompt (or a few) hundreds of times. A sampled
continuation is a walk down the tree of token paths, and the next-token
distribution at a node, p(v | prompt + path) = softmax(l / T)(v) over the
tokens within ``window`` nats of the best one, is a fixed function of the
node: a walk that revisits a node needs no decode. The default model copies
a lot: on the bundled dialogue audit, 42 walks of 16 tokens visited 152
distinct nodes (Z = 1) and 285 (Z = 0) out of ~650 draws.

Each node keeps its most likely tokens (largest p first, ties by id; enough
to cover ``1 - 1e-3`` of the mass, at most ``top_k``) with their running sums
and the total mass P. A draw inverts u·P over that fixed order: one of the
kept tokens, or -- with the node's tail mass -- the tail. The first tail draw
at a node decodes the row again and keeps the tail's running sums (the other
allowed tokens by id, in proportion to their p in that row) for later draws,
within a budget of ``max_tail_entries``. Every walk is thus an independent
token-by-token sample from the model's (windowed) next-token distributions,
and a replayed walk (same uniforms) takes the same path without decoding.

Rounding. llama.cpp's CPU kernels round differently with the batch shape a
token is decoded in: a row decoded after another history can differ by up to
~1 logit unit on Gemma-3-270M (0.1-0.2 nats at likely tokens; design notes:
docs/design.md#batch-shape-rounding). A node's distribution is the one
computed at its first visit; a run is deterministic given its seed and order
of calls, and a resumed run, which
rebuilds its memo, may draw differently where u lands within that rounding of
a boundary. The tail's re-decoded row only splits the memoised tail mass.

EOG tokens end a walk (they are banned below ``min_new_tokens``); so does a
text (leading whitespace ignored) that contains one of ``stop``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ctxlite.errors import InvalidParameter
from ctxlite.runtime.sampling import TOP_P_WINDOW_NATS


@dataclass
class _Node:
    """One memoised next-token distribution: kept tokens, running sums of p, total P, tail."""

    ids: np.ndarray  # int64, most likely first
    cum: np.ndarray  # float64 running sums of p over ids
    total: float  # sum of p over every allowed token in the window
    tail_ids: np.ndarray | None = None  # int32, the other allowed tokens by id (after a tail draw)
    tail_cum: np.ndarray | None = None  # float64 running sums of their p

    @property
    def tail_mass(self) -> float:
        return self.total - float(self.cum[-1])


class ContinuationTree:
    """Sample continuations of prompts, decoding each distinct (prompt, path) node once.

    ``temperature = 0`` is greedy. ``max_nodes`` bounds the memo (at most
    ``top_k`` x 16 bytes per node) and ``max_tail_entries`` the kept tails
    (12 bytes each); past them, rows are decoded and not kept.
    ``rows_decoded`` counts next-token rows computed (tail re-decodes included).
    """

    KEEP_MASS = 1.0 - 1e-3

    def __init__(
        self,
        engine,
        temperature: float,
        max_new_tokens: int,
        *,
        min_new_tokens: int = 1,
        stop: Sequence[str] = ("\n",),
        top_k: int = 1024,
        max_nodes: int = 20_000,
        max_tail_entries: int = 4_000_000,
        window: float = TOP_P_WINDOW_NATS,
    ):
        if not temperature >= 0:
            raise InvalidParameter(f"temperature must be >= 0, got {temperature}")
        if max_new_tokens < 1 or not 0 <= min_new_tokens <= max_new_tokens:
            raise InvalidParameter(
                f"need 0 <= min_new_tokens <= max_new_tokens >= 1, got {min_new_tokens}, {max_new_tokens}"
            )
        if top_k < 1 or max_nodes < 0 or max_tail_entries < 0 or not window > 0:
            raise InvalidParameter("need top_k >= 1, max_nodes >= 0, max_tail_entries >= 0 and window > 0")
        self.engine = engine
        self.temperature = float(temperature)
        self.max_new_tokens = int(max_new_tokens)
        self.min_new_tokens = int(min_new_tokens)
        self.stop = tuple(s for s in stop if s)
        self.top_k, self.max_nodes, self.window = int(top_k), int(max_nodes), float(window)
        self.tail_budget = int(max_tail_entries)
        self._prompt_ids: dict[tuple[int, ...], int] = {}
        self._nodes: dict[tuple, _Node] = {}
        self.rows_decoded = 0
        self.tail_draws = 0

    # ----- one node -------------------------------------------------------
    def _probs(self, tokens: list[int], depth: int, pid: int) -> np.ndarray:
        """p over the vocabulary relative to the best allowed token (0 outside the window or banned).

        Each prompt keeps its own KV sequence (``Engine.held_logits``), so
        walks that alternate between prompts do not decode a prompt again.
        """
        row = self.engine.held_logits(tokens, key=("continuations", pid)).astype(np.float64)
        self.rows_decoded += 1
        if depth < self.min_new_tokens:
            row[self.engine.eog_ids] = -np.inf
        if self.temperature == 0:
            p = np.zeros(len(row))
            p[int(np.argmax(row))] = 1.0
            return p
        z = (row - row.max()) / self.temperature
        return np.where(z >= -self.window, np.exp(z), 0.0)

    def _node(self, key: tuple, tokens: list[int], depth: int) -> _Node:
        node = self._nodes.get(key)
        if node is not None:
            return node
        p = self._probs(tokens, depth, key[0])
        k = min(self.top_k, len(p))
        ids = np.argpartition(-p, k - 1)[:k]
        ids = ids[np.lexsort((ids, -p[ids]))]  # largest p first, ties by id
        ids = ids[p[ids] > 0]
        cum = np.cumsum(p[ids])
        total = float(p.sum())
        keep = min(len(ids), int(np.searchsorted(cum, self.KEEP_MASS * total)) + 1)
        node = _Node(ids=ids[:keep], cum=cum[:keep], total=total)
        if len(self._nodes) < self.max_nodes:
            self._nodes[key] = node
        return node

    def _draw(self, node: _Node, tokens: list[int], depth: int, pid: int, u: float) -> int:
        target = u * node.total
        k = int(np.searchsorted(node.cum, target, side="right"))
        if k < len(node.ids):
            return int(node.ids[k])
        # the tail (probability tail_mass / P): the other allowed tokens by id, in proportion to
        # their p in a re-decoded row; kept on the node (within budget) for later draws
        self.tail_draws += 1
        tail_ids, tail_cum = node.tail_ids, node.tail_cum
        if tail_ids is None:
            p = self._probs(tokens, depth, pid)
            p[node.ids] = 0.0
            tail_ids = np.flatnonzero(p).astype(np.int32)
            tail_cum = np.cumsum(p[tail_ids])
            if len(tail_ids) <= self.tail_budget:
                self.tail_budget -= len(tail_ids)
                node.tail_ids, node.tail_cum = tail_ids, tail_cum
        if len(tail_ids) == 0:  # rounding put u*P past the kept tokens' own sum
            return int(node.ids[-1])
        v = (target - node.cum[-1]) / node.tail_mass  # uniform on [0, 1) given the tail
        j = int(np.searchsorted(tail_cum, v * tail_cum[-1], side="right"))
        return int(tail_ids[min(j, len(tail_ids) - 1)])

    # ----- walks ----------------------------------------------------------
    def sample(self, prompt: Sequence[int], rng: np.random.Generator) -> list[int]:
        """One continuation of ``prompt`` (token ids, EOG excluded)."""
        prompt = list(prompt)
        self.engine.check_fits(len(prompt) + self.max_new_tokens)
        pid = self._prompt_ids.setdefault(tuple(prompt), len(self._prompt_ids))
        path: list[int] = []
        for depth in range(self.max_new_tokens):
            tokens = prompt + path
            key = (pid, *path)
            tok = self._draw(self._node(key, tokens, depth), tokens, depth, pid, float(rng.random()))
            if self.engine.is_eog(tok):
                break
            path.append(tok)
            if self.stop and any(s in self.engine.detokenize(path).lstrip() for s in self.stop):
                break
        return path

    @property
    def nodes(self) -> int:
        """Distinct nodes kept in the memo."""
        return len(self._nodes)
