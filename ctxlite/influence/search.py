"""Which n-grams to ablate: all of them, or a coarse-to-fine search for the K most influential.

Exhaustive search ablates every window w_0 < … < w_{W−1} of D. Its cost is Σ_i (L − w_i) decoded
tokens with prefix reuse: quadratic in the context length L.

Adaptive search answers "which K spans leak most?" with far fewer ablations, by hierarchical
pruning in the manner of AttriBoT (Liu et al., "AttriBoT: A Bag of Tricks for Efficiently
Approximating Leave-One-Out Context Attribution", ICLR 2025). The windows are the leaves of a tree
whose nodes are runs of consecutive windows, ``branching`` children per node. Removing node
B = [i, j) removes the union of its windows' tokens, [w_i, w_{j−1} + n), and its influence is
measured like an n-gram's,

    τ_B = Σ_t | log p̄_λ(y_t | D, x, y<t) − log p̄_λ(y_t | D ∖ B, x, y<t) |.

The top level has at most ``top_blocks`` nodes. Each round then *refines* (measures the children
of) every measured, unrefined node with τ_B ≥ ρ·τ_(K) and τ_B > 0, where τ_(K) is the K-th largest
n-gram influence found so far; while fewer than K n-grams are known it refines the K largest
nodes instead. It stops when no node qualifies, or when the next round would exceed the budget
(by default W ablations: never more than exhaustive search). A leaf is the exhaustive search's
own ablation, so every reported n-gram carries its exact τ_i; only the *choice* of which n-grams
to measure is heuristic. With several keys (a λ sweep scored on one response) a node is refined
when it qualifies for any of them, so one search serves every λ.

What can make it miss: τ is not monotone in the removed set, so no τ_B bounds the τ_i inside it.
A top-K n-gram is missed when its enclosing block moves the response by less than ρ·τ_(K) while
the n-gram alone moves it more: removing the block takes away both the n-gram and text whose
removal moves the response the opposite way. Redundant copies of a fact behave the other way
round: removing one copy leaves the other, so each copy's τ_i is small (in exhaustive search
too); a block holding both copies has a large τ_B and small children, which the search reports
as measured blocks (``blocks``) but not as n-grams.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from ctxlite.errors import InvalidParameter

Node = tuple[int, int]
"""A run of consecutive windows [i, j) (indices into the window list); a leaf has j = i + 1."""

Measure = Callable[[list[Node]], list[dict[Hashable, float]]]
"""``measure(nodes)`` removes each node's tokens from D and returns its τ per key."""

SEARCHES = ("auto", "exhaustive", "adaptive")

ADAPTIVE_FROM_TOKENS = 512
"""``search="auto"`` uses adaptive search for contexts of at least this many tokens, exhaustive
search below (where ablating every n-gram is cheap and the n-gram position profile needs them)."""


def choose_search(search: str, context_tokens: int) -> str:
    """The search a setting means for a context of ``context_tokens`` tokens."""
    if search not in SEARCHES:
        raise InvalidParameter(f"search must be one of {', '.join(SEARCHES)}, got {search!r}")
    if search == "auto":
        return "adaptive" if context_tokens >= ADAPTIVE_FROM_TOKENS else "exhaustive"
    return search


@dataclass(frozen=True)
class AdaptiveRule:
    """The refinement rule: find ``top`` n-grams, refine nodes with τ_B ≥ ``refine_ratio`` · τ_(K)."""

    top: int = 5
    refine_ratio: float = 0.5
    branching: int = 4
    top_blocks: int = 16

    def __post_init__(self):
        if self.top < 1:
            raise InvalidParameter(f"adaptive search needs top >= 1 n-grams to find, got {self.top}")
        if not 0 < self.refine_ratio <= 1:
            raise InvalidParameter(f"refine_ratio must be in (0, 1], got {self.refine_ratio}")
        if self.branching < 2 or self.top_blocks < 1:
            raise InvalidParameter(f"need branching >= 2 and top_blocks >= 1, got {self.branching}, {self.top_blocks}")

    def block_size(self, n_windows: int) -> int:
        """Windows per top-level node: the smallest power of ``branching`` giving ≤ ``top_blocks`` nodes."""
        size = 1
        while math.ceil(n_windows / size) > self.top_blocks:
            size *= self.branching
        return size


@dataclass
class SearchOutcome:
    """What a search measured: τ per key of every node, which were refined, and its cost."""

    tau: dict[Node, dict[Hashable, float]] = field(default_factory=dict)
    refined: set[Node] = field(default_factory=set)
    rounds: int = 0
    converged: bool = True

    @property
    def leaves(self) -> list[int]:
        """Window indices measured as n-grams (exact τ_i), in increasing order."""
        return sorted(i for (i, j) in self.tau if j == i + 1)

    @property
    def blocks(self) -> list[Node]:
        """Measured nodes of more than one window, in order."""
        return sorted(node for node in self.tau if node[1] > node[0] + 1)

    @property
    def ablations(self) -> int:
        return len(self.tau)


def children(node: Node, branching: int) -> list[Node]:
    """``node`` cut into ``branching`` consecutive runs of (nearly) equal length (fewer when short)."""
    i, j = node
    size = math.ceil((j - i) / branching)
    return [(a, min(a + size, j)) for a in range(i, j, size)]


def kth_largest(values: Sequence[float], k: int) -> float | None:
    return sorted(values, reverse=True)[k - 1] if len(values) >= k else None


def adaptive_search(
    n_windows: int, keys: Sequence[Hashable], measure: Measure, rule: AdaptiveRule, budget: int | None = None
) -> SearchOutcome:
    """Coarse-to-fine search for the ``rule.top`` windows of largest τ per key (module docstring).

    ``budget`` caps the number of ablations (default: ``n_windows``, exhaustive search's count); a
    search stopped by it has ``converged = False``."""
    if n_windows < 1:
        raise InvalidParameter("adaptive search needs at least one window")
    budget = n_windows if budget is None else budget
    out = SearchOutcome()
    size = rule.block_size(n_windows)
    frontier = [(a, min(a + size, n_windows)) for a in range(0, n_windows, size)]
    if len(frontier) > budget:
        raise InvalidParameter(f"a budget of {budget} ablations cannot cover the {len(frontier)} top-level blocks")
    while frontier:
        for node, tau in zip(frontier, measure(frontier)):
            out.tau[node] = tau
        out.rounds += 1
        frontier = []
        for node in _to_refine(out, keys, rule):  # best first, as many as the budget allows
            kids = children(node, rule.branching)
            if out.ablations + len(frontier) + len(kids) > budget:
                out.converged = False
                break
            frontier += kids
            out.refined.add(node)
    return out


def _to_refine(out: SearchOutcome, keys: Sequence[Hashable], rule: AdaptiveRule) -> list[Node]:
    """The measured, unrefined blocks that qualify for some key, most promising first."""
    open_blocks = [node for node in out.blocks if node not in out.refined]
    leaves = [(i, i + 1) for i in out.leaves]
    picked: dict[Node, float] = {}
    for key in keys:
        tau = {node: out.tau[node][key] for node in open_blocks}
        kth = kth_largest([out.tau[leaf][key] for leaf in leaves], rule.top)
        if kth is None:  # not yet K n-grams: the K largest blocks
            chosen = sorted(open_blocks, key=lambda node: -tau[node])[: rule.top]
        else:
            chosen = [node for node in open_blocks if tau[node] > 0 and tau[node] >= rule.refine_ratio * kth]
        scale = kth if kth else max(tau.values(), default=0.0) or 1.0
        for node in chosen:
            picked[node] = max(picked.get(node, 0.0), tau[node] / scale)
    return sorted(picked, key=lambda node: (-picked[node], node))


def exhaustive_reference(n_windows: int, keys: Sequence[Hashable], measure: Measure, top: int) -> dict:
    """Slow and obviously right: measure every window, return the ``top`` largest per key (tests)."""
    taus = measure([(i, i + 1) for i in range(n_windows)])
    return {key: sorted(range(n_windows), key=lambda i: -taus[i][key])[:top] for key in keys}
