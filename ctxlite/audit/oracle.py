"""Model access for audits: exact label distributions, memoised sampling, embeddings.

Classification. A sampled answer is the label whose tokens it starts with. The distribution of
that answer is read *exactly* by teacher forcing: with ``t_j`` the tokens of label j (after the
format's answer prefix, e.g. " subjective") and p_T the model's next-token distribution at
temperature T,

    P(label j) = p_T(t_j | prompt) · (1 − Σ_{c ∈ C_j} p_T(c | prompt, t_j)),
    P(other)   = 1 − Σ_j P(label j)        (any other answer, EOG included),

where C_j holds the next tokens of the labels that extend ``t_j`` (``fraud`` inside
``fraudulent``): an answer that goes on to a longer label is that label. Labels that are single
tokens, none a prefix of another, need only the row after the prompt (one forward pass); the
rows after label prefixes are decoded on top of the prompt's cells, shared between labels.
Temperature 0 puts all mass on the greedy path. An answer that spells a label with other
tokens than the tokenizer's own (a rare split) counts as "other". Read from a server, the labels'
probabilities must sum to at most 1 (``LABEL_MASS_TOLERANCE``): a larger sum is refused, never
renormalised into a plausible distribution.

Sampled answers. A backend without teacher forcing (a server whose completions carry no
log-probabilities) gives no distribution at all: each answer is then one completion it samples
(:class:`~ctxlite.runtime.backend.SampledCompletions`) at temperature T, of as many tokens as the
longest label, seeded from the caller's generator, and is read by the rule above on the tokens of its
text (the longest label they start with, else "other"). Those are i.i.d. answers of the model as served, so a release
(n answers) has the law it has on the exact path; what is lost is the distribution itself
(``label_distribution`` refuses: the pair's exact ε is not computed) and its reuse (every answer
is a request). The server returns text, not the tokens it sampled: the two rules differ only
where it sampled other tokens than the tokenization of their text (a rare split).

The distribution is cached by prompt tokens, so n queries on one prompt cost one pass plus one
multinomial draw, and a prompt seen in an earlier trial, ε or reference run costs nothing. The
prompt is decoded from an empty cache, and the label rows in a fixed order after it, so the
distribution depends on the prompt alone and a classification audit is reproducible whatever ran
before it (a resume included). ``tests/model/test_audit.py`` checks it against real token sampling
(``sampling.sample_continuations``) with a chi-square test, labels sharing a first token included.

Generation. ``sample_texts`` samples one continuation per prompt by a walk
down a ``continuations.ContinuationTree``: each distinct (prompt, path) node
is decoded once, and the walks are exact i.i.d. samples. A backend without
logit rows that samples itself (``SampledCompletions``: a server) is asked for
one completion per prompt instead, each with its own seed drawn from the same
generator, so the texts are i.i.d. samples of the model as the server samples it
(the local tree bans an end-of-generation token as the first token; a server
may end a text there, which is then empty).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxlite.audit.continuations import ContinuationTree
from ctxlite.errors import CtxliteError, InvalidParameter, ServerError
from ctxlite.runtime.backend import ConcurrentRequests, LogitRows, SampledCompletions, Streams, TeacherForcing

LABEL_MASS_TOLERANCE = 1e-3
"""How far above 1 the label probabilities read from a server may sum: each of a label's few
tokens may round up to ``openai_server.LOGPROB_TOLERANCE`` (1e-4 nats). A larger sum is an
impossible answer, refused (exit 9) rather than renormalised away."""


def served_texts(engine) -> bool:
    """Whether texts are sampled by the backend itself (a server: completions, no rows or streams),
    not by ctxlite's walks."""
    walks = isinstance(engine, LogitRows) and isinstance(engine, Streams)
    return not walks and isinstance(engine, SampledCompletions)


class ModelOracle:
    """The audited model (and optionally an embedding model) behind caches.

    ``labels`` are the answer texts as the model writes them (the format's answer prefix
    included); ``special``: prompts carry chat markers that tokenize as special tokens.
    """

    def __init__(
        self,
        engine,
        labels: Sequence[str] = (),
        temperature: float = 1.0,
        embedder=None,
        max_new_tokens: int = 24,
        *,
        special: bool = False,
    ):
        if not temperature >= 0:
            raise InvalidParameter(f"temperature must be >= 0, got {temperature}")
        self.engine = engine
        self.embedder = embedder
        self.labels = tuple(labels)
        self.temperature = float(temperature)
        self.max_new_tokens = int(max_new_tokens)
        self.special = bool(special)
        self.label_tokens = [tuple(self._label_tokens(l)) for l in self.labels]
        if len(set(self.label_tokens)) != len(self.label_tokens):
            raise InvalidParameter(f"labels {self.labels} must tokenize differently for the model to tell them apart")
        self._children = [
            sorted({t[len(s)] for t in self.label_tokens if len(t) > len(s) and t[: len(s)] == s})
            for s in self.label_tokens
        ]
        # the label prefixes after which a row is needed, in depth-first order (each reuses its parent's cells)
        paths = {s[:i] for s in self.label_tokens for i in range(1, len(s))}
        paths |= {s for s, c in zip(self.label_tokens, self._children) if c}
        self._paths = sorted(paths)
        self._dist_cache: dict[tuple[int, ...], np.ndarray] = {}
        self._ahead: dict[tuple[int, ...], list] = {}  # read ahead, not used yet: label log-probabilities
        self._ahead_tokens: dict[str, tuple[int, ...]] = {}
        self._next_cache: dict[tuple[int, ...], np.ndarray] = {}
        self._embed_cache: dict[str, np.ndarray] = {}
        self._trees: dict[str, ContinuationTree] = {}
        self._label_rows = 0
        self._served = 0  # completions sampled by the backend (:class:`~ctxlite.runtime.backend.SampledCompletions`)
        self._answers: dict[str, int] = {}
        self.sampled_answers = bool(self.labels) and not isinstance(engine, TeacherForcing)
        if self.sampled_answers and not isinstance(engine, SampledCompletions):
            raise InvalidParameter("a backend without teacher forcing must sample completions to give answers")

    def _label_tokens(self, label: str) -> list[int]:
        toks = self.engine.tokenize(label)
        if not toks:
            raise InvalidParameter(f"label {label!r} tokenizes to nothing")
        return toks

    @property
    def forward_passes(self) -> int:
        """Next-token rows decoded so far (label distributions, judge verdicts, continuation nodes)."""
        return self._label_rows + sum(t.rows_decoded for t in self._trees.values())

    @property
    def n_outcomes(self) -> int:
        """Number of answer classes: the labels plus "other"."""
        return len(self.labels) + 1

    def tokens(self, prompt: str) -> tuple[int, ...]:
        return tuple(self.engine.tokenize(prompt, add_bos=True, special=self.special))

    def _logprobs(self, row: np.ndarray, temperature: float) -> np.ndarray:
        """log softmax(row / T) over the vocabulary; T = 0: 0 at the argmax, -inf elsewhere."""
        if temperature == 0:
            out = np.full(row.shape, -np.inf)
            out[int(np.argmax(row))] = 0.0
            return out
        z = row.astype(np.float64) / temperature
        m = z.max()
        return z - (m + np.log(np.exp(z - m).sum()))

    def _row(self, toks: Sequence[int], exact: bool) -> np.ndarray:
        """The logits after ``toks`` (``exact``: from an empty cache, else on top of sequence 0's cells)."""
        self._label_rows += 1
        return self.engine.next_logits(list(toks), exact=exact)

    @property
    def reads_ahead(self) -> bool:
        """Whether :meth:`read_ahead` sends anything: label distributions read by teacher forcing (a
        backend without logit rows: a server), not sampled. The local engine reads one prompt at a
        time, from rows."""
        return bool(self.labels) and not self.sampled_answers and not isinstance(self.engine, LogitRows)

    @property
    def ahead_requests(self) -> int:
        """How many label requests one read-ahead should carry to keep the backend busy: four rounds
        of its concurrency (one where it serves one request at a time)."""
        return 4 * self.engine.concurrency if isinstance(self.engine, ConcurrentRequests) else 1

    def unread(self, prompts: Sequence[str]) -> list[str]:
        """The distinct ``prompts`` (in order) whose label distributions are neither known nor read ahead."""
        known = self._ahead_tokens

        def read(p: str) -> bool:
            return p in known and (known[p] in self._dist_cache or known[p] in self._ahead)

        return [p for p in dict.fromkeys(prompts) if not read(p)]

    def read_ahead(self, prompts: Sequence[str]) -> None:
        """Send the label requests of every prompt not read yet in one ``logprobs_many`` (a server:
        up to its concurrency in flight), for :meth:`label_distribution` to use when it is asked.
        Nothing is computed, checked or counted here: a distribution is formed from what was read
        when it is asked for, as it would be one prompt at a time, and a failure is left for that
        prompt's own read to raise where a one-by-one run would meet it (a dead server: at once).
        A no-op unless :attr:`reads_ahead`."""
        if not self.reads_ahead:
            return
        todo = []
        try:
            for prompt in self.unread(prompts):
                toks = self._ahead_tokens.get(prompt) or self.tokens(prompt)
                self._ahead_tokens[prompt] = toks
                if toks not in self._dist_cache and toks not in self._ahead and toks not in todo:
                    todo.append(toks)
            if not todo:
                return
            requests = [(toks + seq, len(toks)) for toks in todo for seq in self.label_tokens]
            values = self.engine.logprobs_many(requests, self.temperature)
        except CtxliteError:
            return
        n = len(self.label_tokens)
        for k, toks in enumerate(todo):
            self._ahead[toks] = values[k * n : (k + 1) * n]

    def label_distribution(self, prompt: str) -> np.ndarray:
        """Exact P(answer) over (labels..., other) for ``prompt`` (cached by its tokens)."""
        if self.sampled_answers:
            raise InvalidParameter(
                "the answer distribution is not known: the server returns no log-probabilities, so its "
                "answers are sampled completions"
            )
        toks = self._ahead_tokens.get(prompt) or self.tokens(prompt)
        hit = self._dist_cache.get(toks)
        if hit is not None:
            return hit
        rows = isinstance(self.engine, LogitRows)
        logp = self._rows_logp(toks) if rows else self._forced_logp(toks)
        p = np.empty(len(self.labels))
        for j, (seq, children) in enumerate(zip(self.label_tokens, self._children)):
            stay = 1.0 - float(np.exp([logp(seq, c) for c in children]).sum()) if children else 1.0
            if not rows and stay < -LABEL_MASS_TOLERANCE:
                raise ServerError(self._impossible(f"the labels extending {self.labels[j]!r}", 1 - stay, len(toks)))
            p[j] = np.exp(sum(logp(seq[:i], t) for i, t in enumerate(seq))) * max(stay, 0.0)
        if not rows and not p.sum() <= 1 + LABEL_MASS_TOLERANCE:
            raise ServerError(self._impossible("the labels", float(p.sum()), len(toks)))
        dist = np.append(p, max(0.0, 1.0 - p.sum()))
        dist /= dist.sum()
        dist.setflags(write=False)
        self._dist_cache[toks] = dist
        return dist

    def _impossible(self, which: str, mass: float, n_tokens: int) -> str:
        shown = ", ".join(f"{l.strip()!r}" for l in self.labels)
        return (
            f"the server's teacher-forced log-probabilities give {which} ({shown}) a total probability of "
            f"{mass:.6g} after a prompt of {n_tokens} tokens: more than 1 (beyond {LABEL_MASS_TOLERANCE:g} of "
            "rounding), an impossible answer; stopped (finished trials are in the --out log)"
        )

    def _rows_logp(self, toks: tuple[int, ...]):
        """log p_T(token | prompt + path) from full rows: the prompt's from an empty cache (a function of
        the prompt alone), then each label prefix's on top of its cells."""
        T = self.temperature
        rows = {(): self._logprobs(self._row(toks, exact=True), T)}
        for path in self._paths:
            rows[path] = self._logprobs(self._row(toks + path, exact=False), T)
        return lambda path, token: rows[path][token]

    def _forced_logp(self, toks: tuple[int, ...]):
        """log p_T(token | prompt + path) by teacher forcing each label's tokens after the prompt (one
        sequence per label, sent together: a backend without logit rows, e.g. a server). Every pair the
        formula needs is on some label's path: a child c of label j is the next token of a longer label
        that extends j, so its log-probability is read from that label's sequence."""
        n = len(toks)
        values = self._ahead.pop(toks, None)
        if values is None:
            values = self.engine.logprobs_many([(toks + seq, n) for seq in self.label_tokens], self.temperature)
        self._label_rows += sum(len(seq) for seq in self.label_tokens)
        table = {(seq[:i], t): float(v[i]) for seq, v in zip(self.label_tokens, values) for i, t in enumerate(seq)}
        return lambda path, token: table[(tuple(path), token)]

    def sample_answers(self, prompt: str, n: int, rng: np.random.Generator) -> np.ndarray:
        """Counts over (labels..., other) of ``n`` independent sampled answers."""
        if self.sampled_answers:
            return self._served_answers(prompt, n, rng)
        return rng.multinomial(n, self.label_distribution(prompt))

    def sample_answer(self, prompt: str, rng: np.random.Generator) -> int:
        """The index in (labels..., other) of one answer: drawn from the exact distribution with
        ``rng``, or (``sampled_answers``) one completion the backend samples, seeded from ``rng``."""
        if self.sampled_answers:
            return int(np.argmax(self._served_answers(prompt, 1, rng)))
        p = self.label_distribution(prompt)
        return int(rng.choice(len(p), p=p))

    def _served_answers(self, prompt: str, n: int, rng: np.random.Generator) -> np.ndarray:
        """Counts of ``n`` answers, each a completion sampled by the backend (seeded from ``rng``)."""
        seeds = np.random.default_rng(int(rng.integers(2**63))).integers(2**31, size=n)
        toks = self.tokens(prompt)
        budget = max(len(t) for t in self.label_tokens)
        texts = self.engine.sample_texts([(toks, int(s)) for s in seeds], self.temperature, budget)
        self._served += n
        counts = np.zeros(self.n_outcomes, dtype=np.int64)
        for text in texts:
            counts[self.answer_of(text)] += 1
        return counts

    def answer_of(self, text: str) -> int:
        """The index in (labels..., other) of a sampled completion's text: the label whose tokens its
        tokens start with, the longest if several (an answer that goes on to a longer label is that
        label), else other -- the rule of the exact distribution, on the text's own tokens (a server
        returns text, not the tokens it sampled). Cached by text."""
        hit = self._answers.get(text)
        if hit is None:
            toks = tuple(self.engine.tokenize(text)) if text else ()
            starts = [j for j, seq in enumerate(self.label_tokens) if toks[: len(seq)] == seq]
            hit = max(starts, key=lambda j: len(self.label_tokens[j])) if starts else len(self.labels)
            self._answers[text] = hit
        return hit

    @property
    def served_completions(self) -> int:
        """Completions the backend sampled for this oracle (answers and texts)."""
        return self._served

    def next_token_probs(self, prompt: str, words: Sequence[str], prefix: str = " ") -> np.ndarray:
        """P(first token of ``prefix + word``) at T = 1 for each word (cached), e.g. a judge's Yes/No."""
        ids = np.array([self._label_tokens(prefix + w)[0] for w in words], dtype=np.int64)
        toks = self.tokens(prompt)
        key = toks + (-1,) + tuple(ids.tolist())
        hit = self._next_cache.get(key)
        if hit is None:
            hit = np.exp(self._logprobs(self._row(toks, exact=True), 1.0)[ids])
            self._next_cache[key] = hit
        return hit

    # ----- generation --------------------------------------------------
    def sample_texts(self, prompts: Sequence[str], rng: np.random.Generator, stop: str = "\n") -> list[str]:
        """One sampled continuation per prompt, cut at ``stop`` (``continuations.ContinuationTree``).

        The walks are seeded by one integer taken from ``rng``, so a trial
        replayed at another ε (same seeds: common random numbers) draws the
        same texts, from memoised nodes, without decoding.
        """
        if served_texts(self.engine):  # a server
            return self._served_texts(prompts, rng, stop)
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

    def _served_texts(self, prompts: Sequence[str], rng: np.random.Generator, stop: str) -> list[str]:
        """``sample_texts`` on a backend that samples itself: one request per prompt, its seed from a
        generator seeded by one integer of ``rng`` (as the tree's walks are), so a trial replayed at
        another ε asks for the same seeds. The text is cut at ``stop`` here, after leading whitespace,
        as the tree's walks are (a server-side stop would end a text that starts with a newline)."""
        seeds = np.random.default_rng(int(rng.integers(2**63))).integers(2**31, size=len(prompts))
        tokens = {p: self.tokens(p) for p in dict.fromkeys(prompts)}  # a trial asks one prompt n times
        requests = [(tokens[p], int(seed)) for p, seed in zip(prompts, seeds)]
        raw = self.engine.sample_texts(requests, self.temperature, self.max_new_tokens)
        self._served += len(requests)
        texts = []
        for text in raw:
            text = text.lstrip()
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
