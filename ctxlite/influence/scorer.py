"""Context influence: how much each n-gram of a private context moves the response
(Flemings et al., ACL 2025, Definition 3.1).

For response tokens y_t and mixing λ (CID, see ``ctxlite.influence.cid``):

    τ_{t,i} = | log p̄_λ(y_t | D, x, y<t) − log p̄_λ(y_t | D ∖ D_{i,n}, x, y<t) |
    τ_t     = | log p̄_λ(y_t | D, x, y<t) − log p_T(y_t | ∅, x, y<t) |      (document level)
    τ_i     = Σ_t τ_{t,i}                                                 (like DP composition)

n-grams are runs of the model's own tokens of D, removed directly from the
token sequence (never decoded and re-tokenized). The ablated prompts share the
prefix before the n-gram with the full prompt, so the engine decodes the full
prompt once and each ablation only from the n-gram on (KV-cache reuse, in
decreasing split order so every shared prefix stays cached).

The reuse path equals a from-scratch decode bit for bit, but another build of llama.cpp or
another batch size rounds differently and moves τ_i by up to ~2 nats: every result carries a
*noise floor* measured by re-decoding a few of its own decodes in another batch tiling
(``ctxlite.influence.noise``), and flags the n-grams whose τ_i it does not exceed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ctxlite.errors import DataError, InvalidParameter
from ctxlite.identity import content_hash
from ctxlite.influence.cid import check_epsilon, check_lambda, generate
from ctxlite.influence.noise import floor_from_probes, probe_spans, tilings_for
from ctxlite.influence.redundancy import DUPLICATE_THRESHOLD, check_threshold, clusters, partners
from ctxlite.influence.regurgitation import copy_sources, regurgitation, rouge_l
from ctxlite.influence.results import (
    Block,
    ClusterInfluence,
    Descent,
    ExampleResult,
    Generation,
    LambdaResult,
    NgramInfluence,
    SearchRecord,
    UnitInfluence,
    Utility,
    descent_rule,
)
from ctxlite.influence.search import AdaptiveRule, adaptive_search, choose_search
from ctxlite.influence.units import (
    TokenUnit,
    Unit,
    check_kind,
    check_sentence_language,
    check_spans,
    join_passages,
    split_units,
    to_tokens,
)
from ctxlite.runtime import kernels
from ctxlite.runtime.backend import CountsDecodes, LogitRows, PrefixReuse, Streams, TeacherForcing, require
from ctxlite.runtime.chat import render_chat
from ctxlite.runtime.planning import dry_count
from ctxlite.runtime.sampling import SamplingSettings
from ctxlite.runtime.templates import PromptTemplate, get_template


@dataclass(frozen=True)
class InfluenceSettings:
    """What to measure. ``ngram=None`` scores the document level only.

    ``stride`` defaults to ``ngram`` (disjoint windows, the cheap default);
    ``stride=1`` gives the reference's overlapping windows. ``context_sizes``
    (the paper's context-size analysis) scores the first k tokens of D for each
    k given, instead of the whole context.

    ``search``: ``"exhaustive"`` ablates every window; ``"adaptive"`` searches coarse to fine for
    the ``top_spans`` most influential ones (``ctxlite.influence.search``: ``refine_ratio`` ρ,
    ``branching``, ``top_blocks``); ``"auto"`` is adaptive from
    ``search.ADAPTIVE_FROM_TOKENS`` context tokens on (and exhaustive when ``top_spans`` is 0).
    ``null_ablations`` is the most noise-floor probe pairs a response gets (``influence.noise``:
    as many as fit in a tenth of the run's decoded tokens, at least two; 0: no floor).

    ``epsilons``: ε-bounded CID (``ctxlite.influence.cid``). A generated response is made for
    every pair of a λ of ``lambdas`` and an ε of ``epsilons`` (each step's λ_t* = min(λ, ε /
    (2·max_v |pmi_D(v)|))), and each ``LambdaResult`` records its ``epsilon``; empty (the default)
    is unbounded CID. Its τ (n-grams and units) mixes the rows after D and after each D ∖ u with
    the generation's λ_t* on D, not the λ_t* the mechanism would compute on D ∖ u: not the
    mechanism's own leave-one-out (docs/scoring.md, "Influence under ε"). ``unit``: what is
    removed, n-gram windows (``"ngram"``) or the units of one kind (``ctxlite.influence.units``:
    ``"passage"``, ``"sentence"`` in ``sentence_language``, one of ``units.SENTENCE_LANGUAGES``,
    ``"field"``, ``"span"``), each once, exhaustively (``ngram``, ``stride`` and the search then
    do not apply; except that ``search="adaptive"`` with passages or sentences descends the
    hierarchy passages → sentences → n-grams of ``ngram`` tokens, :attr:`descends`); with units,
    ``duplicate_threshold`` (``ctxlite.influence.redundancy``: Jaccard similarity of word 3-gram
    shingles, in (0, 1]; None: off) also removes each unit together with its most similar other
    unit where they are at least that similar (τ_pair), and each cluster of three or more
    near-duplicates whole (τ_cluster; the units asked for only, not the levels below them).
    ``copy_sources``: a hierarchical search also measures the n-gram windows holding a
    copy source of the response (``regurgitation.copy_sources``; no effect without a descent).
    Each ε must be finite and > 0; the sweep is kept sorted, without repeats
    (a single number is taken as a sweep of one). A given response is scored once per λ, with
    no ε: it was not generated under one.
    """

    lambdas: tuple[float, ...] = (1.0,)
    ngram: int | None = 8
    stride: int | None = None
    null_ablations: int = 4
    exact: bool = False
    unit: str = "ngram"
    sentence_language: str = "en"
    duplicate_threshold: float | None = DUPLICATE_THRESHOLD
    epsilons: tuple[float, ...] = ()
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    top_spans: int = 5
    context_sizes: tuple[int, ...] = ()
    search: str = "auto"
    refine_ratio: float = 1.0
    branching: int = 4
    top_blocks: int = 16
    copy_sources: bool = True

    def __post_init__(self):
        if not self.lambdas:
            raise InvalidParameter("give at least one lambda")
        object.__setattr__(self, "lambdas", tuple(check_lambda(l) for l in self.lambdas))
        eps = (self.epsilons,) if isinstance(self.epsilons, (int, float)) else tuple(self.epsilons)
        if None in eps:
            raise InvalidParameter("epsilons holds numbers > 0; leave it empty for unbounded CID")
        object.__setattr__(self, "epsilons", tuple(sorted({check_epsilon(e) for e in eps})))
        if self.ngram is not None and self.ngram < 1:
            raise InvalidParameter(f"ngram must be >= 1, got {self.ngram}")
        if self.stride is not None and (self.ngram is None or not 1 <= self.stride <= self.ngram):
            raise InvalidParameter(
                "stride must be in [1, n] with an n-gram size (a larger stride would leave tokens unscored), "
                f"got {self.stride}"
            )
        object.__setattr__(self, "context_sizes", tuple(int(c) for c in self.context_sizes))
        if any(c < 1 for c in self.context_sizes):
            raise InvalidParameter(f"context sizes must be >= 1 token, got {self.context_sizes}")
        if self.null_ablations < 0:
            raise InvalidParameter(f"null_ablations must be >= 0, got {self.null_ablations}")
        choose_search(self.search, 0)
        check_kind(self.unit)
        check_sentence_language(self.sentence_language)
        check_threshold(self.duplicate_threshold)
        if self.unit in ("field", "span") and self.search == "adaptive":
            raise InvalidParameter(
                f"unit {self.unit} has no finer units to descend into: no adaptive search (it descends from "
                "passages or sentences)"
            )
        if self.unit != "ngram" and self.context_sizes:
            raise InvalidParameter(f"unit {self.unit} needs the whole context: no context sizes")
        if self.search == "adaptive" and self.ngram is None:
            raise InvalidParameter("adaptive search needs n-grams to search (an n-gram size, not the document level)")
        if self.search == "adaptive" and self.top_spans < 1:
            raise InvalidParameter("adaptive search needs top_spans >= 1: the number of n-grams to find")
        self.adaptive_rule  # validates ρ, branching and top_blocks

    @property
    def descends(self) -> bool:
        """Whether a unit run is a hierarchical search: ``search="adaptive"`` with passages (→ sentences
        → n-grams) or sentences (→ n-grams), descending by ``results.descent_rule``."""
        return self.unit in ("passage", "sentence") and self.search == "adaptive"

    @property
    def adaptive_rule(self) -> AdaptiveRule:
        return AdaptiveRule(max(self.top_spans, 1), self.refine_ratio, self.branching, self.top_blocks)

    def search_for(self, context_tokens: int) -> str:
        """``"exhaustive"`` or ``"adaptive"``: what ``search`` means for a context of this length
        (units: one ablation each, exhaustive)."""
        if self.unit != "ngram" or (self.search == "auto" and self.top_spans == 0):
            return "exhaustive"
        return choose_search(self.search, context_tokens)

    @property
    def window_stride(self) -> int | None:
        return self.stride or self.ngram


@dataclass(frozen=True)
class Example:
    """One private context D, a query x, optionally a response y, the untruncated source and a
    reference ``answer`` (the response's utility is its ROUGE-L against it); for units
    (``ctxlite.influence.units``) the ``passages`` D joins with ``separator``, or character
    ``spans`` of D as ``(start, end, label)``."""

    context: str
    query: str = ""
    response: str | None = None
    source: str | None = None
    id: str = ""
    answer: str | None = None
    passages: tuple[str, ...] | None = None
    separator: str | None = None
    spans: tuple[tuple[int, int, str], ...] | None = None

    def __post_init__(self):
        if self.passages is not None:
            object.__setattr__(self, "passages", tuple(self.passages))
            if join_passages(self.passages, self.separator) != self.context:
                raise DataError(f'example {self.id or "?"}: the context is not the join of its "passages"')
        if self.spans is not None:
            try:
                spans = check_spans(self.spans, self.context)
            except DataError as exc:
                raise DataError(f"example {self.id or '?'}: {exc}") from None
            object.__setattr__(self, "spans", tuple(spans))
        if not self.context.strip():
            raise DataError(f"example {self.id or '?'}: the context is empty")
        if self.response is not None and not self.response.strip():
            raise DataError(f"example {self.id or '?'}: the response is empty (omit it to generate one)")
        if self.answer is not None and not self.answer.strip():
            raise DataError(f"example {self.id or '?'}: the reference answer is empty (omit it for no utility)")

    def input_hash(self) -> str:
        """Content hash of everything of the example a result depends on (context, query, response,
        source and, when given, the reference answer: older results without one keep their hash)."""
        fields = {"context": self.context, "query": self.query, "response": self.response, "source": self.source}
        if self.answer is not None:
            fields["answer"] = self.answer
        for key in ("passages", "separator", "spans"):  # units: only where given (older hashes stay)
            if getattr(self, key) is not None:
                fields[key] = getattr(self, key)
        return content_hash(fields)


def ngram_starts(n_tokens: int, n: int, stride: int) -> list[int]:
    """Start offsets of the n-gram windows; the tail is covered by a last window [L−n, L)."""
    if n > n_tokens:
        raise InvalidParameter(f"n-gram size {n} is larger than the context ({n_tokens} tokens)")
    starts = list(range(0, n_tokens - n + 1, stride))
    if starts[-1] + n < n_tokens:
        starts.append(n_tokens - n)
    return starts


@dataclass(frozen=True)
class EncodedPrompt:
    """Token ids of template prefix, context D and suffix (query filled); no BOS inside D."""

    prefix: list[int]
    context: list[int]
    suffix: list[int]

    @property
    def with_context(self) -> list[int]:
        return self.prefix + self.context + self.suffix

    @property
    def without_context(self) -> list[int]:
        return self.prefix + self.suffix


class _Collector:
    """Per-λ log p̄_λ(y_t | ·) gathered chunk by chunk from in-place logits views."""

    def __init__(
        self, targets: np.ndarray, lambdas: Sequence[float], without: np.ndarray, temperature: float, banned, ban_rows
    ):
        self.targets, self.lambdas, self.without = targets, lambdas, without
        self.T, self.banned, self.ban_rows = temperature, banned, ban_rows
        self.out = {lam: np.empty(len(targets)) for lam in lambdas}

    def __call__(self, view: np.ndarray, first: int) -> None:
        sl = slice(first, first + len(view))
        ban = None if self.ban_rows is None else self.ban_rows[sl]
        for lam in self.lambdas:
            if lam == 1.0:  # ordinary decoding: no need to read the without-context rows
                self.out[lam][sl] = kernels.logprob_gather(
                    view, self.targets[sl], self.T, banned_ids=self.banned, ban_rows=ban
                )
                continue
            self.out[lam][sl] = kernels.mixed_logprob(
                view, self.without[sl], self.targets[sl], lam, self.T, banned_ids=self.banned, ban_rows=ban
            ).logprob


class _ResponsePasses:
    """The forward passes behind one response: log p̄ of its tokens, for each key (a λ, or "steps"
    for ε-bounded CID's per-token λ_t), after the full prompt or after an ablated one.

    What runs depends on the backend: with full logit rows the λ-mixture is computed from them
    (``_Collector``); without, only λ = 1 is possible and the backend's teacher-forced
    log-probabilities are used. With prefix reuse the full prompt is the base and ablations
    decode from their split point; without, every sequence is decoded whole.
    """

    def __init__(
        self, engine, empty: list[int], y: list[int], keys, T: float, ban_rows, step_lambdas, without_rows=None
    ):
        self.engine, self.keys, self.T, self.ban_rows, self.step_lambdas = engine, keys, T, ban_rows, step_lambdas
        self.rows, self.reuse = isinstance(engine, LogitRows), isinstance(engine, PrefixReuse)
        self.targets = np.asarray(y, dtype=np.int32)
        self.banned = engine.eog_ids if ban_rows is not None else None
        self.without_request = (empty + y, len(empty))
        if self.rows:  # l_∅ rows: needed for every λ ≠ 1 and the document level; keep one copy
            self.without = engine.logits_rows(empty + y, len(empty)) if without_rows is None else without_rows
            self.logp_without = kernels.logprob_gather(
                self.without, self.targets, T, banned_ids=self.banned, ban_rows=ban_rows
            )
        else:  # read together with the base (``base``)
            self.without, self.logp_without = None, None

    @property
    def batched(self) -> bool:
        """Teacher forcing only: every sequence is one independent request, so many go at once
        (``backend.logprobs_many``: concurrently on a server)."""
        return not self.rows

    def base(self, tokens: list[int], targets_from: int) -> dict:
        """``run`` of the full prompt + response as the base; without logit rows the without-context
        pass is sent with it (its request first, as when they were sent one by one)."""
        if not self.batched:
            return self.run(tokens, targets_from)
        without, base = self.engine.logprobs_many([self.without_request, (tokens, targets_from)], self.T)
        self.logp_without = without
        return {1.0: base}

    def run_many(self, requests: Sequence[tuple[list[int], int]], on_done=None) -> list[dict]:
        """``run`` of each (tokens, targets_from), all at once (``batched`` only), in the order given."""
        return [{1.0: out} for out in self.engine.logprobs_many(requests, self.T, on_done)]

    def run(
        self, tokens: list[int], targets_from: int, shared: int | None = None, exact: bool = False, tiling=None
    ) -> dict:
        """log p̄ per key of ``tokens[targets_from:]``; ``shared=None`` decodes ``tokens`` as the base;
        ``tiling``: in another batch tiling (a noise-floor probe)."""
        eng = self.engine
        if not self.rows:
            return {1.0: eng.logprobs(tokens, targets_from, self.T)}
        if self.step_lambdas is None:
            col = _Collector(self.targets, self.keys, self.without, self.T, self.banned, self.ban_rows)
        else:
            col = _StepCollector(self.targets, self.step_lambdas, self.without, self.T, self.banned, self.ban_rows)
        if not self.reuse:
            col(eng.logits_rows(tokens, targets_from), 0)
        elif shared is None:
            eng.load_base(tokens, targets_from, col)
        else:
            eng.score_variant(tokens, shared, targets_from, col, exact=exact, tiling=tiling)
        return col.out


class InfluenceScorer:
    """Scores examples on one engine with one template and one set of settings.

    >>> from ctxlite import Engine, InfluenceScorer, Example   # doctest: +SKIP
    >>> scorer = InfluenceScorer(Engine(), "qa", InfluenceSettings(lambdas=(1.0,), ngram=8))
    >>> scorer.score(Example(context="Alice Smith, DOB 1970-01-02 ...", query="Who is it?"))
    """

    def __init__(
        self,
        engine,
        template: str | PromptTemplate = "qa",
        settings: InfluenceSettings | None = None,
        progress: Callable[[str, int, int], None] | None = None,
    ):
        self.engine = engine
        self.progress = progress  # progress(label, done, total) after each ablation
        self.template = template if isinstance(template, PromptTemplate) else get_template(template)
        self.settings = settings or InfluenceSettings()
        self._without_rows: dict = {}
        """While an example is scored at several context sizes, its response's l_∅ rows, keyed by the
        tokens of the prompt without the context and the response: every size reads the same ones (a
        decode from scratch gives the same rows every time), decoded once."""
        require(engine, [TeacherForcing], "scoring")
        if any(lam != 1.0 for lam in self.settings.lambdas) or self.settings.epsilons:
            require(engine, [LogitRows], "mixing with lambda != 1 (or an epsilon bound)")
        self._render = None
        if self.template.chat:  # the model's own chat template; refused now when it has none
            self._render = lambda messages: render_chat(engine, messages)
            self.template.parts("", self._render)

    # ----- encoding --------------------------------------------------------
    def encode(self, example: Example) -> EncodedPrompt:
        prefix_text, suffix_text = self.template.parts(example.query, self._render)
        eng, chat = self.engine, self.template.chat  # chat markers are special tokens; the context never is
        prefix = ([eng.bos_id] if eng.bos_id is not None else []) + eng.tokenize(prefix_text, special=chat)
        return EncodedPrompt(prefix, eng.tokenize(example.context), eng.tokenize(suffix_text, special=chat))

    def encode_response(self, enc: EncodedPrompt, response: str) -> list[int]:
        """Tokens of a user-supplied response, with the space a continuation after
        ``Answer:`` naturally starts with."""
        if response and not response[0].isspace() and not self.engine.detokenize(enc.suffix[-1:]).endswith((" ", "\n")):
            response = " " + response
        ids = self.engine.tokenize(response)
        if not ids:
            raise DataError("the response is empty")
        return ids

    # ----- scoring ---------------------------------------------------------
    def score(self, example: Example) -> ExampleResult:
        """Influence of the context (and each n-gram) for every λ (and context size) in the settings."""
        full = self.encode(example)
        too_long = [k for k in self.settings.context_sizes if k > len(full.context)]
        if too_long:
            raise DataError(
                f"example {example.id or '?'}: its context has {len(full.context)} tokens, fewer than the "
                f"context size(s) {', '.join(map(str, too_long))} asked for (a result is never labelled "
                "with a size it did not use)"
            )
        results = []
        try:
            for size in self.settings.context_sizes or (None,):
                enc = full if size is None else EncodedPrompt(full.prefix, full.context[:size], full.suffix)
                for r in self._score_encoded(example, enc):
                    r.context_tokens, r.context_size = len(enc.context), size
                    results.append(r)
        finally:
            self._without_rows = {}  # kept for one example's sizes only
        return ExampleResult(example.id, len(full.context), example.query, results)

    def _score_encoded(self, example: Example, enc: EncodedPrompt) -> list[LambdaResult]:
        st = self.settings
        self.engine.check_fits(len(enc.with_context) + (st.sampling.max_new_tokens if example.response is None else 0))
        units = None if st.unit == "ngram" else self.units(example, enc)
        windows = st.ngram is not None and (units is None or st.descends)  # checked before any ablation
        if windows and st.ngram > len(enc.context):
            raise InvalidParameter(f"n-gram size {st.ngram} is larger than the context ({len(enc.context)} tokens)")
        results = []
        if example.response is not None:
            y = self.encode_response(enc, example.response)
            self.engine.check_fits(len(enc.with_context) + len(y))
            results = self._score_response(enc, y, st.lambdas, ban_rows=None, generation=None, units=units)
        else:
            require(self.engine, [LogitRows, Streams], "generating a response")
            for lam in st.lambdas:
                for eps in st.epsilons or (None,):
                    gen = generate(self.engine, enc.with_context, enc.without_context, lam, st.sampling, eps)
                    if not gen.token_ids:
                        at = f"lambda={lam}" + ("" if eps is None else f", epsilon={eps}")
                        raise DataError(f"example {example.id}: the model produced an empty response at {at}")
                    ban = np.arange(len(gen.token_ids)) < st.sampling.min_new_tokens
                    lams = gen.step_lambdas if eps is not None else None
                    scored = self._score_response(
                        enc, gen.token_ids, (lam,), ban_rows=ban, generation=gen, step_lambdas=lams, units=units
                    )
                    for r in scored:
                        r.epsilon = eps
                    results += scored
        source = example.source or example.context
        for r in results:
            r.regurgitation = regurgitation(r.response, source)
            if example.answer is not None:
                r.utility = Utility(**rouge_l(example.answer, r.response))
        return results

    def units(self, example: Example, enc: EncodedPrompt) -> list[TokenUnit]:
        """The example's units of the kind the settings ask for, on the tokens of its context
        (``ctxlite.influence.units``); ``DataError`` where the context's tokens do not spell it."""
        st = self.settings
        if self.engine.detokenize(enc.context) != example.context:
            raise DataError(
                f"example {example.id or '?'}: the model's tokens of the context do not spell it back, so its "
                f"characters cannot be mapped onto them (unit {st.unit})"
            )
        try:
            found = split_units(
                st.unit, example.context, example.passages, example.separator, example.spans, st.sentence_language
            )
        except DataError as exc:
            raise DataError(f"example {example.id or '?'}: {exc}") from None
        return to_tokens(found, self.engine.char_cover(enc.context))

    def _score_response(
        self, enc: EncodedPrompt, y: list[int], lambdas, ban_rows, generation, step_lambdas=None, units=None
    ) -> list[LambdaResult]:
        st = self.settings
        keys = [1.0] + [l for l in lambdas if l != 1.0] if step_lambdas is None else [1.0, "steps"]
        shared = tuple(enc.without_context + y) if len(st.context_sizes) > 1 else None
        passes = _ResponsePasses(
            self.engine,
            enc.without_context,
            y,
            keys,
            st.sampling.temperature,
            ban_rows,
            step_lambdas,
            without_rows=self._without_rows.get(shared),
        )
        if shared is not None and passes.without is not None:  # the example's next size reads the same rows
            self._without_rows = {shared: passes.without}
        full = enc.with_context
        base = passes.base(full + y, len(full))
        drive = ["steps"] if step_lambdas is not None else list(lambdas)
        cluster_outs = []
        if units is None:
            windows = [] if st.ngram is None else ngram_starts(len(enc.context), st.ngram, st.window_stride)
            ablated, nulls, search = self._ablate(enc, y, windows, passes, base, drive)
        else:  # units instead of n-gram windows
            ablated, descent = {}, None
            unit_outs, pair_outs, cluster_outs, nulls, runner = self._ablate_units(enc, y, units, passes, base)
            if st.descends:
                descent = self._descend(enc, y, units, unit_outs, runner, base, drive)
                ablated = descent["ablated"]
            search = runner.record("exhaustive", len(units))  # the ablations and tokens of every level
        spans = self.engine.char_spans(enc.context)
        ctx_text = self.engine.detokenize(enc.context)
        results = []
        for lam in lambdas:
            key = "steps" if step_lambdas is not None else lam
            lp = base[key]
            doc_tau = np.abs(lp - passes.logp_without)
            floor = floor_from_probes(nulls["points"], nulls["kinds"], nulls[key]) if nulls else None
            grams = []
            for c in sorted(ablated.get(key, {})):
                per_tok = np.abs(lp - ablated[key][c])
                cs, ce = spans[c][0], spans[c + st.ngram - 1][1]
                infl = float(per_tok.sum())
                grams.append(
                    NgramInfluence(
                        c,
                        st.ngram,
                        cs,
                        ce,
                        ctx_text[cs:ce],
                        infl,
                        per_tok.tolist(),
                        None if floor is None else infl > floor.max,
                    )
                )
            unit_results, descended = None, None
            if units is not None and descent is not None:
                sentences = []
                for tu, parent, out in descent["sentences"]:
                    per_tok = np.abs(lp - out[key])
                    infl = float(per_tok.sum())
                    above = None if floor is None else infl > floor.max
                    sentences.append(_unit_influence(tu, infl, per_tok, above, parent=parent))
                sentences.sort(key=lambda u: -u.influence)
                rule = descent_rule(self.settings.copy_sources)
                descended = Descent(
                    rule, descent["into"], sentences, descent["windows"], descent["exhaustive"], descent["copied"]
                )
            if units is not None:
                unit_results = []
                for i, (tu, out) in enumerate(zip(units, unit_outs)):
                    per_tok = np.abs(lp - out[key])
                    infl = float(per_tok.sum())
                    pair = pair_outs[i]
                    if pair is not None:
                        j, sim, pair_out = pair
                        tau_pair = float(np.abs(lp - pair_out[key]).sum())
                        pair = (units[j].unit.label, sim, tau_pair, None if floor is None else tau_pair > floor.max)
                    above = None if floor is None else infl > floor.max
                    unit_results.append(_unit_influence(tu, infl, per_tok, above, pair))
                unit_results.sort(key=lambda u: -u.influence)  # ranked; ties in the order of the context
            cluster_results = []
            for members, sim, out in cluster_outs:
                tau = float(np.abs(lp - out[key]).sum())
                labels = [units[i].unit.label for i in members]
                cluster_results.append(ClusterInfluence(labels, sim, tau, None if floor is None else tau > floor.max))
            results.append(
                LambdaResult(
                    lam=lam,
                    response=self.engine.detokenize(y),
                    response_ids=list(y),
                    generated=generation is not None,
                    token_logprob=lp.tolist(),
                    token_logprob_without=passes.logp_without.tolist(),
                    token_pmi=(base[1.0] - passes.logp_without).tolist(),
                    token_influence=doc_tau.tolist(),
                    response_token_chars=[tuple(span) for span in self.engine.char_spans(y)],
                    document_influence=float(doc_tau.sum()),
                    ngrams=grams,
                    noise_floor=floor,
                    search=_search_record(search, key, spans, ctx_text),
                    units=unit_results,
                    descent=descended,
                    clusters=cluster_results,
                    generation=None
                    if generation is None
                    else Generation(
                        generation.stop_reason,
                        generation.epsilon,
                        generation.step_lambdas,
                        generation.realised_epsilon,
                        st.sampling.seed,
                    ),
                )
            )
            results[-1].top = results[-1].top_spans(st.top_spans)
        return results

    def _ablate(self, enc: EncodedPrompt, y: list[int], windows: list[int], passes, base: dict, drive: list):
        """log p̄ per key with n-grams removed (key -> {window start: array}) for the windows the
        search measured, the noise floor's probes (empty when there are none) and the search's
        record (None without n-grams)."""
        if not windows:
            return {}, {}, None
        st, n = self.settings, self.settings.ngram
        probes = self.settings.null_ablations if passes.reuse else 0  # without reuse no tiling to choose
        runner = _Ablations(self.engine, enc, y, passes, base, st.exact, self.progress)
        method = st.search_for(len(enc.context))
        if method == "exhaustive":
            outs = runner.run([(c, c + n) for c in windows], probes)
            ablated = {k: {c: out[k] for c, out in zip(windows, outs)} for k in base}
            return ablated, runner.nulls, runner.record("exhaustive", len(windows))
        rule, kept = st.adaptive_rule, {}

        def measure(nodes):  # the probes go with the first pass
            outs = runner.run([(windows[i], windows[j - 1] + n) for i, j in nodes], 0 if runner.done else probes)
            taus = []
            for (i, j), out in zip(nodes, outs):
                if j == i + 1:
                    kept[windows[i]] = out
                taus.append({k: float(np.abs(base[k] - out[k]).sum()) for k in drive})
            return taus

        found = adaptive_search(len(windows), drive, measure, rule)
        ablated = {k: {c: out[k] for c, out in kept.items()} for k in base}
        record = runner.record("adaptive", len(windows))
        record.update(
            **asdict(rule),
            rounds=found.rounds,
            converged=found.converged,
            measured_every_window=len(kept) == len(windows),  # a short context: the search was exhaustive
            exhaustive_tokens=self._exhaustive_tokens(enc, y, windows),
            blocks=[(windows[i], windows[j - 1] + n, found.tau[(i, j)]) for i, j in found.blocks],
        )
        return ablated, runner.nulls, record

    def _ablate_units(self, enc: EncodedPrompt, y: list[int], units: list[TokenUnit], passes, base: dict):
        """log p̄ per key with each unit's tokens removed (one dict per unit, in the order of
        ``units``); per unit, None or its near-duplicate partner's index, their similarity and log p̄
        with both removed (``redundancy.partners``; a mutual pair is one ablation); per cluster of
        three or more near-duplicates (``redundancy.clusters``), its members' indices, their smallest
        similarity and log p̄ with all of them removed (one ablation each); the noise floor's probes
        and the runner, whose record (``windows``: the units) counts the pairs' and clusters'
        ablations too."""
        st = self.settings
        probes = st.null_ablations if passes.reuse else 0
        runner = _Ablations(self.engine, enc, y, passes, base, st.exact, self.progress)
        texts = [u.unit.text for u in units]
        found = partners(texts, st.duplicate_threshold)
        pairs = sorted({tuple(sorted((i, p[0]))) for i, p in enumerate(found) if p is not None})
        groups = clusters(texts, st.duplicate_threshold)
        ranges = [tuple((units[i].token_start, units[i].token_end) for i in members) for members in pairs]
        ranges += [tuple((units[i].token_start, units[i].token_end) for i in members) for members, _ in groups]
        outs = runner.run([(u.token_start, u.token_end) for u in units] + ranges, probes)
        by_pair = dict(zip(pairs, outs[len(units) :]))
        pair_outs = [
            None if p is None else (p[0], p[1], by_pair[tuple(sorted((i, p[0])))]) for i, p in enumerate(found)
        ]
        cluster_outs = [(members, sim, out) for (members, sim), out in zip(groups, outs[len(units) + len(pairs) :])]
        return outs[: len(units)], pair_outs, cluster_outs, runner.nulls, runner

    def _descend(self, enc: EncodedPrompt, y, units: list[TokenUnit], unit_outs: list, runner, base: dict, drive):
        """The hierarchy below the units (``results.Descent``): by ``DESCENT_RULE``, the passage(s)
        to descend into, their sentences (each removed exactly), the sentence(s) to descend into (for
        ``--unit sentence``: the units themselves), then every n-gram window of the context's grid
        (the exhaustive search's windows) that overlaps them or holds a copy source of the response
        (``regurgitation.copy_sources`` with ``copy_sources``: a token the response repeats after
        the same token, which a search by τ misses outside the unit it chose), each removed
        exactly. Returns the descended labels, (sentence, its passage's label, log p̄) per sentence
        measured, the n-grams' log p̄ per key and start, the context's window count and exhaustive
        search's token cost."""
        st, chars = self.settings, self.engine.char_cover(enc.context)
        into = [units[i] for i in _largest(unit_outs, base, drive)]
        sentences: list[tuple[TokenUnit, str, dict]] = []
        if st.unit == "passage":
            inner, parents = [], []
            for p in into:
                for s in split_units("sentence", p.unit.text, language=st.sentence_language):
                    a, b = p.unit.char_start + s.char_start, p.unit.char_start + s.char_end
                    inner.append(Unit("sentence", f"{p.unit.label} › {s.label}", a, b, s.text))
                    parents.append(p)
            inner = to_tokens(inner, chars)
            # a sentence on exactly its passage's tokens (a passage of one sentence) is the same removal:
            # its log p̄ is the passage's, not decoded twice
            same = {id(p): unit_outs[units.index(p)] for p in into}
            fresh = [u for u, p in zip(inner, parents) if (u.token_start, u.token_end) != (p.token_start, p.token_end)]
            measured = dict(zip(map(id, fresh), runner.run([(u.token_start, u.token_end) for u in fresh])))
            outs = [measured.get(id(u), same[id(p)]) for u, p in zip(inner, parents)]
            parents = [p.unit.label for p in parents]
            sentences = list(zip(inner, parents, outs))
            picked = [inner[i] for i in _largest(outs, base, drive)]
            labels = [u.unit.label for u in into + picked]
            into = picked
        else:
            labels = [u.unit.label for u in into]
        n, p = st.ngram, len(enc.prefix)
        windows = ngram_starts(len(enc.context), n, st.window_stride)
        full = enc.with_context
        copies = [i - p for i in copy_sources(full, p, p + len(enc.context), full[-1], y)] if st.copy_sources else []
        chosen = {c for c in windows if any(c < u.token_end and c + n > u.token_start for u in into)}
        copied = [c for c in windows if c not in chosen and any(c <= i < c + n for i in copies)]
        inside = sorted(chosen.union(copied))
        outs = runner.run([(c, c + n) for c in inside])
        ablated = {k: {c: out[k] for c, out in zip(inside, outs)} for k in base}
        exhaustive = self._exhaustive_tokens(enc, y, windows)
        return {
            "into": labels,
            "sentences": sentences,
            "ablated": ablated,
            "windows": len(windows),
            "exhaustive": exhaustive,
            "copied": copied,
        }

    def _exhaustive_tokens(self, enc: EncodedPrompt, y: list[int], windows: list[int]) -> int | None:
        """Tokens exhaustive search's ablations would decode here, counted by running them on the
        engine in dry-run mode (nothing decoded; the cache is cleared after); None where the
        backend has no prefix reuse or cannot run dry."""
        eng, n, p, full = self.engine, self.settings.ngram, len(enc.prefix), enc.with_context
        if not isinstance(eng, PrefixReuse):
            return None

        def job():
            eng.load_base(full + y, len(full))
            start = eng.tokens_decoded
            for c in sorted(windows, reverse=True):
                variant = full[: p + c] + full[p + c + n :] + y
                eng.score_variant(variant, p + c, len(full) - n, None, exact=self.settings.exact or p + c < 1)
            return eng.tokens_decoded - start

        return dry_count(eng, job)


def _largest(outs: list[dict], base: dict, drive) -> list[int]:
    """Indices of the removals of largest τ (Σ_t |log p̄ − log p̄ without|) for each key of ``drive``,
    the first on a tie, in increasing order (``results.DESCENT_RULE``)."""
    picked = set()
    for k in drive:
        taus = [float(np.abs(base[k] - out[k]).sum()) for out in outs]
        picked.add(max(range(len(taus)), key=lambda i: (taus[i], -i)))
    return sorted(picked)


def _unit_influence(tu: TokenUnit, infl: float, per_tok, above, pair=None, parent=None) -> UnitInfluence:
    """τ_u of a unit on the tokens of D, with its near-duplicate ``pair`` fields and ``parent``."""
    u = tu.unit
    return UnitInfluence(
        u.kind,
        u.label,
        u.char_start,
        u.char_end,
        u.text,
        tu.token_start,
        tu.token_end,
        tu.removed_start,
        tu.removed_end,
        infl,
        per_tok.tolist(),
        above,
        *(pair or (None, None, None, None)),
        parent=parent,
    )


def _search_record(search: dict | None, key, spans, ctx_text: str) -> SearchRecord | None:
    """One λ's copy of a response's search record: each measured block as a span of D with its
    τ_B for this λ (``key``)."""
    if search is None:
        return None
    if "blocks" not in search:
        return SearchRecord(**search)
    blocks = []
    for a, b, tau in search["blocks"]:
        cs, ce = spans[a][0], spans[b - 1][1]
        blocks.append(Block(a, b, cs, ce, ctx_text[cs:ce], tau[key]))
    return SearchRecord(**{**search, "blocks": blocks})


class _Ablations:
    """Removals of token spans [a, b) of D, run through the response passes in decreasing split
    order so every shared prefix stays cached, with the noise floor's probes (``influence.noise``)
    and the ablations and decoded tokens they cost (where the backend counts them). On a backend of
    teacher forcing only (a server) the sequences of one ``run`` are independent requests: they are
    sent together (up to the server's ``--concurrency`` in flight) and their results taken in the
    same order as one by one."""

    ABLATION, ABLATION_PROBE, NULL_PROBE = 0, 1, 2  # the order of a span's jobs

    def __init__(self, engine, enc: EncodedPrompt, y: list[int], passes, base: dict, exact: bool, progress):
        self.engine, self.enc, self.y, self.passes, self.base = engine, enc, y, passes, base
        self.exact, self.progress = exact, progress
        self.count, self.done, self.tokens, self.null_tokens = 0, 0, 0, 0
        self.nulls: dict = {}

    def _probed(self, removals: list[tuple[tuple[int, int], ...]], pairs: int) -> list[int]:
        """Indices of the removals that get a probe pair (``noise.probe_spans``), by what each
        ablation decodes: from its split point on (from position 0 in exact mode), the response
        included."""
        p, tf, ny = len(self.enc.prefix), len(self.enc.with_context), len(self.y)
        costs = [tf - _removed(r) + ny - (0 if self.exact else p + r[0][0]) for r in removals]
        return probe_spans(costs, [r[0][0] for r in removals], pairs, extra=tf + ny)

    def run(self, spans: list, pairs: int = 0) -> list[dict]:
        """log p̄ per key with each span removed, in the order of ``spans``; with ``pairs``, the
        noise floor's probes of up to that many of them are added to ``self.nulls``. A span is
        ``(a, b)`` or a tuple of such ranges removed together (near-duplicate units): it shares
        the base's prefix up to its first range, which orders it among the others."""
        p, full, y = len(self.enc.prefix), self.enc.with_context, self.y
        removals = [_ranges(s) for s in spans]
        jobs = [(r[0][0], self.ABLATION, i, None) for i, r in enumerate(removals)]
        for pair, i in enumerate(self._probed(removals, pairs) if pairs else ()):
            null_tiling, ablation_tiling = tilings_for(pair)
            a = removals[i][0][0]
            jobs += [(a, self.ABLATION_PROBE, i, ablation_tiling), (a, self.NULL_PROBE, i, null_tiling)]
        jobs.sort(key=lambda job: (-job[0], job[1], job[2]))
        outs: list = [None] * len(spans)
        total = self.done + len(jobs)

        def sequence(a: int, kind: int, i: int) -> tuple[list[int], int]:
            if kind == self.NULL_PROBE:
                return full + y, len(full)
            kept, at = full[: p + a], p + a
            for ra, rb in removals[i]:
                kept += full[at : p + ra]
                at = p + rb
            return kept + full[at:] + y, len(full) - _removed(removals[i])

        sent = None
        if self.passes.batched and jobs:  # no probes here: a server has no tiling to choose
            first, tick = self.done, self.progress
            on_done = None if tick is None else lambda k: tick("ablations", first + k, total)
            if tick is not None:
                tick("ablations", first, total)
            before = self._decoded()
            sent = self.passes.run_many([sequence(*job[:3]) for job in jobs], on_done)
            self.tokens += self._decoded() - before
        for j, (a, kind, i, tiling) in enumerate(jobs):
            shared = p + a
            before = self._decoded()
            if sent is not None:
                out = sent[j]
            else:
                if self.progress is not None:
                    self.progress("ablations", self.done, total)
                exact = self.exact or shared < 1
                out = self.passes.run(*sequence(a, kind, i), shared, exact=exact, tiling=tiling)
            if kind == self.ABLATION:
                outs[i] = out
                self.count += 1
                self.tokens += self._decoded() - before
            else:
                canonical = self.base if kind == self.NULL_PROBE else outs[i]
                self.nulls.setdefault("points", []).append(a)
                self.nulls.setdefault("kinds", []).append("null" if kind == self.NULL_PROBE else "ablation")
                for k in self.base:
                    self.nulls.setdefault(k, []).append(out[k] - canonical[k])
                self.null_tokens += self._decoded() - before
            self.done += 1
        if self.progress is not None and sent is None:  # a batch ticked as its requests ended
            self.progress("ablations", self.done, self.done)
        return outs

    def _decoded(self) -> int:
        """The tokens the backend decoded so far (0 where it counts none: a server)."""
        return self.engine.tokens_decoded if isinstance(self.engine, CountsDecodes) else 0

    def record(self, method: str, n_windows: int) -> dict:
        counted = isinstance(self.engine, CountsDecodes)
        return {
            "method": method,
            "windows": n_windows,
            "ablations": self.count,
            "tokens_decoded": self.tokens if counted else None,
            "null_ablations": len(self.nulls.get("points", [])),
            "null_tokens": self.null_tokens if counted else None,
        }


def _ranges(span) -> tuple[tuple[int, int], ...]:
    """A removal as sorted, disjoint token ranges of D: ``(a, b)`` or several ranges, where ranges
    that overlap or touch are merged (two units snapped onto one shared token)."""
    ranges = [tuple(span)] if isinstance(span[0], int) else sorted(tuple(r) for r in span)
    merged: list[tuple[int, int]] = []
    for a, b in ranges:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return tuple(merged)


def _removed(ranges: tuple[tuple[int, int], ...]) -> int:
    """Tokens a removal takes out of D."""
    return sum(b - a for a, b in ranges)


class _StepCollector(_Collector):
    """Like ``_Collector`` but with one λ_t per response token (ε-bounded CID): the generation's λ_t*
    on D, for the full prompt and every ablated one alike."""

    def __init__(self, targets, step_lambdas, without, T, banned, ban_rows):
        super().__init__(targets, ["steps", 1.0], without, T, banned, ban_rows)
        self.step_lambdas = np.asarray(step_lambdas, dtype=np.float64)

    def __call__(self, view, first):
        for j in range(len(view)):
            t = first + j
            ban = None if self.ban_rows is None else self.ban_rows[t : t + 1]
            for key, lam in (("steps", self.step_lambdas[t]), (1.0, 1.0)):
                self.out[key][t] = kernels.mixed_logprob(
                    view[j : j + 1],
                    self.without[t : t + 1],
                    self.targets[t : t + 1],
                    lam,
                    self.T,
                    banned_ids=self.banned,
                    ban_rows=ban,
                ).logprob[0]
