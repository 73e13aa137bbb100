"""Near-duplicate units: a fact copied into two passages is invisible to leave-one-out, since
removing either copy leaves the other (each copy's τ_u falls). For each unit whose most similar
other unit is a near-duplicate, the scorer also removes the two together (τ_pair); a fact stated
three times or more survives every pair, so each cluster of three or more near-duplicates
(:func:`clusters`) is removed as a whole too (τ_cluster), and so is each group of units joined by a
run of :data:`SHARED_RUN` words in common (a fact copied into passages that differ around it).

Similarity is the Jaccard index of word 3-gram shingles (Broder, "On the resemblance and
containment of documents", 1997): J(u, v) = |S(u) ∩ S(v)| / |S(u) ∪ S(v)|, where S is the set of
runs of ``SHINGLE`` consecutive words (``WORD``: Unicode word characters, lowercased); a unit of
fewer words is one shingle of all of them. It is deterministic and model-free, symmetric, 1 for a
verbatim copy and near 0 for passages that only share entities (a name shared by two passages
makes one or two common shingles out of dozens), which is why shingles and not single words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxlite.errors import InvalidParameter

SHINGLE = 3
"""Words per shingle."""

WORD = re.compile(r"\w+")
"""A word: a run of Unicode word characters."""

DUPLICATE_THRESHOLD = 0.5
"""The default similarity from which two units are near-duplicates."""

SHARED_RUN = 8
"""Words in a row two units must share to be removed together whatever their similarity: a fact
copied into passages that differ around it (J ~ 0.2) is as invisible to leave-one-out as a copy."""


def check_threshold(threshold: float | None) -> float | None:
    """``threshold`` if it is None (no pairs) or in (0, 1], else ``InvalidParameter``."""
    if threshold is not None and not (isinstance(threshold, (int, float)) and 0 < threshold <= 1):
        raise InvalidParameter(f"duplicate_threshold must be in (0, 1] (or None: off), got {threshold!r}")
    return threshold


def shingles(text: str) -> frozenset[tuple[str, ...]]:
    """The word ``SHINGLE``-grams of ``text``, lowercased (fewer words: one shingle of them all)."""
    words = [w.lower() for w in WORD.findall(text)]
    if len(words) <= SHINGLE:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i : i + SHINGLE]) for i in range(len(words) - SHINGLE + 1))


def similarity(a: str, b: str) -> float:
    """Jaccard similarity of the shingles of ``a`` and ``b`` (0 where either has no word)."""
    return _jaccard(shingles(a), shingles(b))


def _jaccard(sa: frozenset, sb: frozenset) -> float:
    return len(sa & sb) / len(sa | sb) if sa and sb else 0.0


def partners(texts: Sequence[str], threshold: float | None) -> list[tuple[int, float] | None]:
    """For each text, its most similar other text (the first in order on a tie) and their
    similarity, where it is >= ``threshold``; None otherwise (and everywhere for ``None``)."""
    out: list[tuple[int, float] | None] = [None] * len(texts)
    if threshold is None:
        return out
    sets = [shingles(t) for t in texts]
    for i, si in enumerate(sets):
        best = None
        for j, sj in enumerate(sets):
            if j != i and si and sj:
                s = _jaccard(si, sj)
                if best is None or s > best[1]:
                    best = (j, s)
        if best is not None and best[1] >= threshold:
            out[i] = best
    return out


def runs(text: str) -> frozenset[tuple[str, ...]]:
    """The runs of :data:`SHARED_RUN` consecutive words of ``text``, lowercased (none if fewer)."""
    words = [w.lower() for w in WORD.findall(text)]
    return frozenset(tuple(words[i : i + SHARED_RUN]) for i in range(len(words) - SHARED_RUN + 1))


def clusters(texts: Sequence[str], threshold: float | None) -> list[tuple[tuple[int, ...], float]]:
    """The clusters to remove whole: the connected components of the graph whose edges join two
    texts at least ``threshold`` similar or sharing a run of :data:`SHARED_RUN` words, each as its
    members' indices (in order) and the smallest similarity of two of its members (below
    ``threshold`` where the cluster is a chain or joined by a shared run); in the order of their
    first member: every component of three or more, and each of two whose texts are not
    near-duplicates (only a shared run joins them). None (off): no clusters.

    Components, not cliques: they partition the texts (each text in one cluster, so one removal each
    and at most a third as many removals as texts), they are unique where maximal cliques overlap and
    are exponentially many, and each holds every clique, so every copy of a fact whose copies are
    pairwise near-duplicates is removed with the others. A chain (a ~ b ~ c, a and c not similar)
    is removed whole: τ_cluster is then exact for a larger set than one fact's copies, which a gate
    reads as a leak of that set, never as a pass. A component of two is a mutual pair of
    :func:`partners` (each is the other's most similar text), measured as τ_pair, so it is not
    repeated here; two texts joined by a shared run alone are no such pair, so they are a cluster."""
    if threshold is None:
        return []
    sets = [shingles(t) for t in texts]
    sims = {(i, j): _jaccard(sets[i], sets[j]) for i in range(len(sets)) for j in range(i + 1, len(sets))}
    shared = [runs(t) for t in texts]
    near = {(i, j) for (i, j), s in sims.items() if s >= threshold or shared[i] & shared[j]}
    parent = list(range(len(texts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in sorted(near):
        ri, rj = root(i), root(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    groups: dict[int, list[int]] = {}
    for i in range(len(texts)):
        groups.setdefault(root(i), []).append(i)
    out = []
    for members in sorted(groups.values()):
        if len(members) >= 3 or (len(members) == 2 and sims[tuple(members)] < threshold):
            low = min(sims[(i, j)] for k, i in enumerate(members) for j in members[k + 1 :])
            out.append((tuple(members), low))
    return out


__all__ = [
    "DUPLICATE_THRESHOLD",
    "SHARED_RUN",
    "SHINGLE",
    "WORD",
    "check_threshold",
    "clusters",
    "partners",
    "runs",
    "shingles",
    "similarity",
]
