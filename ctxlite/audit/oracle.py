"""Model access for audits: exact label distributions, memoised sampling, embeddings.

Classification fast path. The answer to a classification prompt is decided by
its first token, so the distribution of a sampled answer is read *exactly*
from the logits of one forward pass: at temperature T,

    P(label j) = softmax(l / T)[first token of " " + label_j],
    P(other)   = 1 - sum_j P(label j)          (any other first token, EOG included),

and temperature 0 puts all mass on the argmax token's class. The distribution
is cached by prompt tokens, so n queries on one prompt cost one forward pass
plus one multinomial draw, and a prompt seen in an earlier trial, ε or
reference run costs nothing. The row is decoded from an empty cache (no
prefix reuse), so it depends on the prompt alone and a classification audit
is reproducible whatever ran before it (a resume included).
``tests/test_audit.py`` checks it against real token sampling
(``sampling.sample_continuations``) with a chi-square test.

Generation. ``sample_texts`` samples one continuation per prompt by a walk
down a ``continuations.ContinuationTree``: each distinct (prompt, path) node
is decoded once, and the walks are exact i.i.d. samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxlite.audit.continuations import ContinuationTree
from ctxlite.errors import InvalidParameter


class ModelOracle:
    """The audited model (and optionally an embedding model) behind caches."""

    def __init__(
        self, engine, labels: Sequence[str] = (), temperature: float = 1.0, embedder=None, max_new_tokens: int = 24
    ):
        if not temperature >= 0:
            raise InvalidParameter(f"temperature must be >= 0, got {temperature}")
        self.engine = engine
        self.embedder = embedder
        self.labels = tuple(labels)
        self.temperature = float(temperature)
        self.max_new_tokens = int(max_new_tokens)
        self.first_ids = np.array([self._first_token(l) for l in self.labels], dtype=np.int64)
        if len(set(self.first_ids.tolist())) != len(self.first_ids):
            raise InvalidParameter(
                f"labels {self.labels} must start with distinct tokens for the exact-distribution path"
            )
        self._dist_cache: dict[tuple[int, ...], np.ndarray] = {}
        self._next_cache: dict[tuple[int, ...], np.ndarray] = {}
        self._embed_cache: dict[str, np.ndarray] = {}
        self._trees: dict[str, ContinuationTree] = {}
        self._label_rows = 0

    def _first_token(self, label: str) -> int:
        toks = self.engine.tokenize(" " + label)
        if not toks:
            raise InvalidParameter(f"label {label!r} tokenizes to nothing")
        return toks[0]

    @property
    def forward_passes(self) -> int:
        """Next-token rows decoded so far (label distributions, judge verdicts, continuation nodes)."""
        return self._label_rows + sum(t.rows_decoded for t in self._trees.values())

    @property
    def n_outcomes(self) -> int:
        """Number of answer classes: the labels plus "other"."""
        return len(self.labels) + 1

    def tokens(self, prompt: str) -> tuple[int, ...]:
        return tuple(self.engine.tokenize(prompt, add_bos=True))

    def _last_row_logprobs(self, toks: tuple[int, ...], ids: np.ndarray, temperature: float) -> np.ndarray:
        """log softmax(l/T)[ids] of the row that follows ``toks`` (one forward pass)."""
        row = self.engine.next_logits(toks, exact=True)  # from an empty cache: a function of the prompt alone
        self._label_rows += 1
        if temperature == 0:
            return np.where(ids == int(np.argmax(row)), 0.0, -np.inf)
        z = row.astype(np.float64) / temperature
        m = z.max()
        lse = m + np.log(np.exp(z - m).sum())
        return z[ids] - lse

    def label_distribution(self, prompt: str) -> np.ndarray:
        """Exact P(answer) over (labels..., other) for ``prompt`` (cached by its tokens)."""
        toks = self.tokens(prompt)
        hit = self._dist_cache.get(toks)
        if hit is not None:
            return hit
        p = np.exp(self._last_row_logprobs(toks, self.first_ids, self.temperature))
        dist = np.append(p, max(0.0, 1.0 - p.sum()))
        dist /= dist.sum()
        dist.setflags(write=False)
        self._dist_cache[toks] = dist
        return dist

    def sample_answers(self, prompt: str, n: int, rng: np.random.Generator) -> np.ndarray:
        """Counts over (labels..., other) of ``n`` independent sampled answers."""
        return rng.multinomial(n, self.label_distribution(prompt))

    def next_token_probs(self, prompt: str, words: Sequence[str]) -> np.ndarray:
        """P(first token of " " + word) at T = 1 for each word (cached), e.g. a judge's Yes/No."""
        ids = np.array([self._first_token(w) for w in words], dtype=np.int64)
        toks = self.tokens(prompt)
        key = toks + (-1,) + tuple(ids.tolist())
        hit = self._next_cache.get(key)
        if hit is None:
            hit = np.exp(self._last_row_logprobs(toks, ids, 1.0))
            self._next_cache[key] = hit
        return hit

    # ----- generation --------------------------------------------------
    def sample_texts(self, prompts: Sequence[str], rng: np.random.Generator, stop: str = "\n") -> list[str]:
        """One sampled continuation per prompt, cut at ``stop`` (``continuations.ContinuationTree``).

        The walks are seeded by one integer taken from ``rng``, so a trial
        replayed at another ε (same seeds: common random numbers) draws the
        same texts, from memoised nodes, without decoding.
        """
        tree = self._trees.get(stop)
        if tree is None:
            tree = ContinuationTree(
                self.engine, self.temperature, self.max_new_tokens, min_new_tokens=1, stop=(stop,) if stop else ()
            )
            self._trees[stop] = tree
        walk_rng = np.random.default_rng(int(rng.integers(2**63)))
        texts = []
        for p in prompts:
            text = self.engine.detokenize(tree.sample(self.tokens(p), walk_rng)).lstrip()
            texts.append(text.split(stop, 1)[0].strip() if stop else text.strip())
        return texts

    # ----- embeddings --------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm embeddings (rows) of ``texts`` from the embedding engine (cached by text).

        One text per decode: batching texts as sequences of one decode was
        1.2x faster but moved a short text's embedding by up to 0.2 % in cosine
        (its KV cells sit at another offset; see
        docs/design.md#batch-shape-rounding). An empty output
        is embedded as "None", the text a withheld output is replaced by.
        """
        if self.embedder is None:
            raise InvalidParameter("this audit needs an embedding engine (Engine(..., embeddings=True))")
        for text in texts:
            if text not in self._embed_cache:
                e = self.embedder.embed(text if text.strip() else "None")
                n = np.linalg.norm(e)
                e = e / n if n > 0 else e
                e.setflags(write=False)
                self._embed_cache[text] = e
        return np.vstack([self._embed_cache[t] for t in texts])
