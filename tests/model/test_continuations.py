"""ContinuationTree on the real default model: draws fit the model's own probabilities
(chi-square, tail draws included), nodes are decoded once, runs are deterministic."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from ctxlite.audit.continuations import ContinuationTree
from ctxlite.errors import InvalidParameter

pytestmark = pytest.mark.model

PROMPT = "Text: The cat sat on the mat.\nLabel:"


def _softmax(row, T=1.0):
    z = row.astype(np.float64) / T
    z -= z.max()
    p = np.exp(z)
    return p / p.sum()


def _walk_counts(tree, toks, seed: int, n: int) -> dict:
    """How often each continuation comes out of n walks."""
    rng = np.random.default_rng(seed)
    counts: dict = {}
    for _ in range(n):
        out = tuple(tree.sample(toks, rng))
        counts[out] = counts.get(out, 0) + 1
    return counts


def _fit(observed: dict, probs: dict, n: int) -> float:
    """Chi-square p-value of counts over the listed outcomes plus "everything else"."""
    keys = list(probs)
    obs = [observed.get(k, 0) for k in keys] + [n - sum(observed.get(k, 0) for k in keys)]
    exp = [probs[k] * n for k in keys] + [(1.0 - sum(probs.values())) * n]
    return chisquare(obs, exp).pvalue


@pytest.mark.parametrize("top_k, tail_budget", [(1, 0), (1, 10**6), (1024, 10**6)])
def test_first_token_frequencies_match_the_model(engine, top_k, tail_budget):
    """top_k = 1 sends ~half the draws through the tail: re-decoded every time (no budget) or kept."""
    toks = engine.tokenize(PROMPT, add_bos=True)
    p = _softmax(engine.next_logits(toks))
    tree = ContinuationTree(engine, 1.0, 1, min_new_tokens=0, stop=(), top_k=top_k, max_tail_entries=tail_budget)
    n = 4000
    counts = _walk_counts(tree, toks, 11, n)
    top = np.argsort(-p)[:6]
    eog = set(engine.eog_ids.tolist())
    probs = {(() if int(t) in eog else (int(t),)): float(p[t]) for t in top}
    assert _fit(counts, probs, n) > 1e-3
    assert tree.nodes == 1
    if top_k == 1:
        assert tree.tail_draws > n * (1 - p.max()) * 0.8
    assert tree.rows_decoded == (1 + tree.tail_draws if tail_budget == 0 else 1 + (tree.tail_draws > 0))


def test_two_token_paths_match_the_model_and_nodes_are_decoded_once(engine):
    toks = engine.tokenize(PROMPT, add_bos=True)
    tree = ContinuationTree(engine, 1.0, 2, min_new_tokens=1, stop=())
    n = 1000
    counts = _walk_counts(tree, toks, 5, n)
    assert tree.rows_decoded < n  # most draws reuse a node
    assert tree.rows_decoded <= tree.nodes + min(tree.tail_draws, tree.nodes)  # each row once, each tail once
    # exact path probabilities from fresh rows (EOG banned at depth 0: min_new_tokens = 1)
    row0 = engine.next_logits(toks).copy()
    row0[engine.eog_ids] = -np.inf
    p0 = _softmax(row0)
    eog = set(engine.eog_ids.tolist())
    probs = {}
    for path, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:6]:
        p1 = _softmax(engine.next_logits(toks + [path[0]]))
        second = p1[list(eog)].sum() if len(path) == 1 else p1[path[1]]
        probs[path] = float(p0[path[0]] * second)
    assert _fit(counts, probs, n) > 1e-3


def test_walks_replay_from_the_memo_and_are_deterministic(engine):
    toks = engine.tokenize(PROMPT, add_bos=True)
    a = ContinuationTree(engine, 1.0, 6)
    walks = [a.sample(toks, np.random.default_rng(s)) for s in range(12)]
    rows = a.rows_decoded
    assert [a.sample(toks, np.random.default_rng(s)) for s in range(12)] == walks
    assert a.rows_decoded == rows  # a replay decodes nothing
    assert len({tuple(w) for w in walks}) > 1  # and the walks are not all the same
    # the same calls from the same engine state give the same walks
    engine.clear()
    b = ContinuationTree(engine, 1.0, 6)
    first = [b.sample(toks, np.random.default_rng(s)) for s in range(12)]
    engine.clear()
    c = ContinuationTree(engine, 1.0, 6)
    assert [c.sample(toks, np.random.default_rng(s)) for s in range(12)] == first


def test_greedy_walk_is_the_argmax_path_and_stops_at_newline(engine):
    toks = engine.tokenize(PROMPT, add_bos=True)
    tree = ContinuationTree(engine, 0.0, 8, stop=("\n",))
    got = tree.sample(toks, np.random.default_rng(0))
    path: list[int] = []
    for depth in range(8):
        row = engine.next_logits(toks + path).copy()
        if depth < 1:
            row[engine.eog_ids] = -np.inf
        tok = int(np.argmax(row))
        if engine.is_eog(tok):
            break
        path.append(tok)
        if "\n" in engine.detokenize(path).lstrip():
            break
    assert got == path
    assert tree.sample(toks, np.random.default_rng(1)) == path


def test_bad_parameters(engine):
    for kwargs in (dict(temperature=-1.0), dict(max_new_tokens=0), dict(top_k=0), dict(min_new_tokens=5)):
        args = dict(temperature=1.0, max_new_tokens=3) | kwargs
        with pytest.raises(InvalidParameter):
            ContinuationTree(engine, args.pop("temperature"), args.pop("max_new_tokens"), **args)
