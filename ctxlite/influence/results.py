"""What a score run measures, as typed objects that round-trip their log form.

One example (:class:`ExampleResult`) holds one :class:`LambdaResult` per λ (and context size, and ε
of ε-bounded CID); each holds the response's per-token influence τ_t, the context's n-grams with
their influence τ_i (:class:`NgramInfluence`), the noise floor (:class:`~ctxlite.influence.noise.NoiseFloor`),
regurgitation, utility, how the response was generated and which n-grams were searched
(:class:`SearchRecord`). Every type has ``to_dict()`` (the JSON a result log holds; the log
format is ``ctxlite/data/log.schema.json``) and ``from_dict()`` (its inverse, for a log of this
format; :mod:`ctxlite.logformat` upgrades older ones first). Derived values (the largest τ_i,
the floor's maximum, the regurgitation flags) are written for readers of the JSON and computed
again, never read back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxlite.influence.noise import NoiseFloor
from ctxlite.influence.regurgitation import Regurgitation
from ctxlite.logformat import ADAPTIVE_SEARCH_FIELDS


@dataclass
class NgramInfluence:
    """τ_i for one removed n-gram: tokens [start, start+n) of D, chars [char_start, char_end).

    ``above_noise``: τ_i exceeds the result's noise floor (None: no floor measured);
    ``uncertainty``: this n-gram's own measured rounding, where it differs from the floor's."""

    start: int
    n: int
    char_start: int
    char_end: int
    text: str
    influence: float
    per_token: list[float]
    above_noise: bool | None = None
    uncertainty: float | None = None

    def to_dict(self) -> dict:
        out = {
            "start": self.start,
            "n": self.n,
            "char_start": self.char_start,
            "char_end": self.char_end,
            "text": self.text,
            "influence": self.influence,
            "per_token": list(self.per_token),
            "above_noise": self.above_noise,
        }
        if self.uncertainty is not None:
            out["uncertainty"] = self.uncertainty
        return out

    @classmethod
    def from_dict(cls, d: dict) -> NgramInfluence:
        return cls(
            d["start"],
            d["n"],
            d["char_start"],
            d["char_end"],
            d["text"],
            d["influence"],
            list(d["per_token"]),
            d["above_noise"],
            d.get("uncertainty"),
        )


@dataclass
class UnitInfluence:
    """τ_u for one removed unit (``ctxlite.influence.units``): its ``kind`` and ``label``, its text
    and characters [char_start, char_end) of D; the tokens [token_start, token_end) removed, which
    hold characters [removed_start, removed_end) (``snapped``: more than the unit's own);
    ``above_noise`` as for an n-gram. Where its most similar other unit is a near-duplicate
    (``ctxlite.influence.redundancy``): that unit's ``partner`` label, their ``similarity`` and
    ``pair_influence`` τ_pair = Σ_t |log p̄_λ(y_t | D) − log p̄_λ(y_t | D ∖ {u, v})|, the two removed
    together (a fact both hold, which removing either alone does not show), and ``pair_above_noise``:
    τ_pair exceeds the result's noise floor (None: no floor measured, or a log that did not say).
    ``parent``: the label of the unit it lies in, for a unit a hierarchical search measured inside
    another (:class:`Descent`; None for the units asked for)."""

    kind: str
    label: str
    char_start: int
    char_end: int
    text: str
    token_start: int
    token_end: int
    removed_start: int
    removed_end: int
    influence: float
    per_token: list[float]
    above_noise: bool | None = None
    partner: str | None = None
    similarity: float | None = None
    pair_influence: float | None = None
    pair_above_noise: bool | None = None
    parent: str | None = None

    @property
    def snapped(self) -> bool:
        return (self.removed_start, self.removed_end) != (self.char_start, self.char_end)

    def to_dict(self) -> dict:
        return (
            {
                "kind": self.kind,
                "label": self.label,
                "char_start": self.char_start,
                "char_end": self.char_end,
                "text": self.text,
                "token_start": self.token_start,
                "token_end": self.token_end,
                "removed_start": self.removed_start,
                "removed_end": self.removed_end,
                "snapped": self.snapped,
                "influence": self.influence,
                "per_token": list(self.per_token),
                "above_noise": self.above_noise,
            }
            | self._pair()
            | ({} if self.parent is None else {"parent": self.parent})
        )

    def _pair(self) -> dict:
        """The near-duplicate fields, only where the unit has a partner (older logs stay as they were)."""
        if self.partner is None:
            return {}
        return {
            "partner": self.partner,
            "similarity": self.similarity,
            "pair_influence": self.pair_influence,
            "pair_above_noise": self.pair_above_noise,
        }

    @classmethod
    def from_dict(cls, d: dict) -> UnitInfluence:
        keys = ("kind", "label", "char_start", "char_end", "text", "token_start", "token_end")
        rest = ("removed_start", "removed_end", "influence")
        pair = (d.get("partner"), d.get("similarity"), d.get("pair_influence"), d.get("pair_above_noise"))
        return cls(*(d[k] for k in keys + rest), list(d["per_token"]), d["above_noise"], *pair, d.get("parent"))


@dataclass
class ClusterInfluence:
    """Three or more near-duplicate units removed together (``redundancy.clusters``: a connected
    component of the units at least the duplicate threshold similar): their ``units`` (labels, in
    the order of the context), the smallest ``similarity`` of two of them, ``influence`` τ_cluster =
    Σ_t |log p̄_λ(y_t | D) − log p̄_λ(y_t | D ∖ cluster)| (a fact they all hold, which removing any
    one or two of them does not show) and ``above_noise``: τ_cluster exceeds the result's noise
    floor (None: no floor measured)."""

    units: list[str]
    similarity: float
    influence: float
    above_noise: bool | None = None

    def to_dict(self) -> dict:
        return {
            "units": list(self.units),
            "similarity": self.similarity,
            "influence": self.influence,
            "above_noise": self.above_noise,
        }

    @classmethod
    def from_dict(cls, d: dict) -> ClusterInfluence:
        return cls(list(d["units"]), d["similarity"], d["influence"], d["above_noise"])


DESCENT_RULE = "at each level, per λ, the unit of largest τ_u (the first in the context on a tie)"
"""Which units a hierarchical search descends into (``InfluenceSettings.descends``)."""

COPY_SOURCES_RULE = (
    "at the n-gram level also every window holding a copy source of the response (a context token after the same "
    "token as in the response)"
)
"""What a hierarchical search also measures with ``InfluenceSettings.copy_sources``."""


def descent_rule(copy_sources: bool) -> str:
    """The rule a hierarchical search records: ``DESCENT_RULE``, and ``COPY_SOURCES_RULE`` with copy sources."""
    return f"{DESCENT_RULE}; {COPY_SOURCES_RULE}" if copy_sources else DESCENT_RULE


@dataclass
class Descent:
    """What a hierarchical search (``--search adaptive`` with ``--unit passage`` or ``sentence``)
    measured below the units asked for, each removal exact leave-one-out: the units it descended
    into by ``rule`` (``into``, labels: the passages, then the sentences), the ``sentences`` of the
    passages descended into (τ_u each, ``parent`` their passage; empty for ``--unit sentence``),
    and of the n-gram level the context's ``windows`` (the result's ``ngrams`` hold the windows
    measured, those overlapping the last units descended into or holding a copy source of the
    response, ``regurgitation.copy_sources``, with their exact τ_i), the tokens exhaustive n-gram
    search would have decoded (``exhaustive_tokens``, None where not counted) and the starts of the
    windows measured for a copy source alone, outside the units descended into (``copy_windows``;
    empty without copy sources, and in a log written before them)."""

    rule: str
    into: list[str]
    sentences: list[UnitInfluence]
    windows: int
    exhaustive_tokens: int | None
    copy_windows: list[int] = field(default_factory=list)

    def ranked_sentences(self) -> list[UnitInfluence]:
        """The sentences measured, largest τ_u first."""
        return sorted(self.sentences, key=lambda u: -u.influence)

    def to_dict(self) -> dict:
        return {
            "rule": self.rule,
            "into": list(self.into),
            "sentences": [u.to_dict() for u in self.sentences],
            "windows": self.windows,
            "exhaustive_tokens": self.exhaustive_tokens,
            "copy_windows": list(self.copy_windows),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Descent:
        sentences = [UnitInfluence.from_dict(u) for u in d["sentences"]]
        copies = list(d.get("copy_windows", []))
        return cls(d["rule"], list(d["into"]), sentences, d["windows"], d["exhaustive_tokens"], copies)


@dataclass
class Block:
    """A run of windows adaptive search measured as one removal: tokens [start, end) of D, chars
    [char_start, char_end), its influence τ_B for this λ."""

    start: int
    end: int
    char_start: int
    char_end: int
    text: str
    influence: float

    def to_dict(self) -> dict:
        return {
            "start": self.start,
            "end": self.end,
            "char_start": self.char_start,
            "char_end": self.char_end,
            "text": self.text,
            "influence": self.influence,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Block:
        return cls(d["start"], d["end"], d["char_start"], d["char_end"], d["text"], d["influence"])


@dataclass
class SearchRecord:
    """Which n-grams were ablated and what that cost: ``method`` "exhaustive" or "adaptive", the
    n-gram ``windows`` of the context, the ``ablations`` run and their decoded tokens (None where
    the backend counts none), the noise floor's probes and their tokens; for adaptive search also
    its rule (``top``, ``refine_ratio``, ``branching``, ``top_blocks``), ``rounds``, whether it
    ``converged``, whether it ``measured_every_window`` (a short context), the tokens exhaustive
    search would have decoded and the measured ``blocks``."""

    method: str
    windows: int
    ablations: int
    tokens_decoded: int | None
    null_ablations: int
    null_tokens: int | None
    top: int | None = None
    refine_ratio: float | None = None
    branching: int | None = None
    top_blocks: int | None = None
    rounds: int | None = None
    converged: bool | None = None
    measured_every_window: bool | None = None
    exhaustive_tokens: int | None = None
    blocks: list[Block] | None = None

    ADAPTIVE = ADAPTIVE_SEARCH_FIELDS

    @property
    def adaptive(self) -> bool:
        return self.method == "adaptive"

    @property
    def every_window(self) -> bool:
        """Whether the τ_i of every n-gram window was measured (exhaustive search, or an adaptive
        search that ended up measuring them all)."""
        return not self.adaptive or bool(self.measured_every_window)

    def to_dict(self) -> dict:
        out = {
            "method": self.method,
            "windows": self.windows,
            "ablations": self.ablations,
            "tokens_decoded": self.tokens_decoded,
            "null_ablations": self.null_ablations,
            "null_tokens": self.null_tokens,
        }
        if self.adaptive:
            out.update({k: getattr(self, k) for k in self.ADAPTIVE})
            out["blocks"] = [b.to_dict() for b in self.blocks or ()]
        return out

    @classmethod
    def from_dict(cls, d: dict) -> SearchRecord:
        adaptive = d["method"] == "adaptive"
        extra = {k: d[k] for k in cls.ADAPTIVE} if adaptive else {}
        blocks = [Block.from_dict(b) for b in d["blocks"]] if adaptive else None
        return cls(
            d["method"],
            d["windows"],
            d["ablations"],
            d["tokens_decoded"],
            d["null_ablations"],
            d["null_tokens"],
            **extra,
            blocks=blocks,
        )


@dataclass
class Generation:
    """How a generated response was made: why it stopped, the ε of ε-bounded CID (None:
    unbounded), each step's λ_t and realised per-step bound 2·λ_t·max|pmi| (ε-bounded only), and
    the sampling seed."""

    stop_reason: str
    epsilon: float | None
    step_lambdas: list[float] | None
    realised_epsilon: list[float] | None
    seed: int

    def to_dict(self) -> dict:
        return {
            "stop_reason": self.stop_reason,
            "epsilon": self.epsilon,
            "step_lambdas": self.step_lambdas,
            "realised_epsilon": self.realised_epsilon,
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Generation:
        return cls(d["stop_reason"], d["epsilon"], d["step_lambdas"], d["realised_epsilon"], d["seed"])


@dataclass
class Utility:
    """ROUGE-L of the response against the example's reference answer (the ``metric``)."""

    precision: float
    recall: float
    f: float
    metric: str = "rouge_l"

    def to_dict(self) -> dict:
        return {"metric": self.metric, "precision": self.precision, "recall": self.recall, "f": self.f}

    @classmethod
    def from_dict(cls, d: dict) -> Utility:
        return cls(d["precision"], d["recall"], d["f"], d["metric"])


@dataclass
class LambdaResult:
    """Everything measured for one λ (and, for ε-bounded CID, one ε) on one example.

    Per response token t: ``token_logprob`` log p̄_λ(y_t | D), ``token_logprob_without`` log
    p_T(y_t | ∅), ``token_pmi`` their difference at λ = 1, ``token_influence`` the document-level
    τ_t and ``response_token_chars`` the token's characters in ``response``;
    ``document_influence`` = Σ_t τ_t. ``top`` lists the n-grams of largest τ_i the run was asked
    for (``InfluenceSettings.top_spans``; with adaptive search, the K it found), largest first;
    ``units`` holds τ_u of each unit of the kind asked for (``InfluenceSettings.unit``; None for
    n-grams), largest τ_u first; ``context_tokens`` of D were used (``context_size``:
    the requested truncation, None for the whole context); ``epsilon``: the ε of the ε-bounded
    CID that generated the response (None: unbounded, or a given response); ``descent``: what a
    hierarchical search measured below the units (:class:`Descent`; its n-grams are in ``ngrams``);
    ``clusters``: the clusters of three or more near-duplicate units, each removed whole
    (:class:`ClusterInfluence`; empty where there are none, and in a log written before them)."""

    lam: float
    response: str
    response_ids: list[int]
    generated: bool
    token_logprob: list[float]
    token_logprob_without: list[float]
    token_pmi: list[float]
    token_influence: list[float]
    response_token_chars: list[tuple[int, int]]
    document_influence: float
    ngrams: list[NgramInfluence]
    noise_floor: NoiseFloor | None
    regurgitation: Regurgitation | None = None
    generation: Generation | None = None
    utility: Utility | None = None
    context_tokens: int = 0
    context_size: int | None = None
    search: SearchRecord | None = None
    epsilon: float | None = None
    top: list[NgramInfluence] = field(default_factory=list)
    units: list[UnitInfluence] | None = None
    descent: Descent | None = None
    clusters: list[ClusterInfluence] = field(default_factory=list)

    @property
    def max_unit_influence(self) -> float:
        return max((u.influence for u in self.units or ()), default=0.0)

    def ranked_units(self) -> list[UnitInfluence]:
        """The units, largest τ_u first (ties in the order of the context)."""
        return sorted(self.units or (), key=lambda u: -u.influence)

    @property
    def max_ngram_influence(self) -> float:
        return max((g.influence for g in self.ngrams), default=0.0)

    def top_spans(self, k: int = 5) -> list[NgramInfluence]:
        """The ``k`` n-grams of largest τ_i, largest first."""
        return sorted(self.ngrams, key=lambda g: -g.influence)[:k]

    @property
    def every_window(self) -> bool:
        """Whether every n-gram window's τ_i was measured (see :attr:`SearchRecord.every_window`)."""
        return self.search is None or self.search.every_window

    @property
    def label(self) -> str:
        """``1.5``, or ``1.5@32`` for a result scored on the first 32 context tokens."""
        return f"{self.lam:g}" + ("" if self.context_size is None else f"@{self.context_size}")

    @property
    def epsilon_label(self) -> str:
        """``2`` for a result generated under ε = 2; ``""`` without an ε."""
        return "" if self.epsilon is None else f"{self.epsilon:g}"

    @property
    def name(self) -> str:
        """``λ=1.5``, ``λ=1.5@32``, ``λ=1.5 ε=2``: the result's name in one line of text."""
        return f"λ={self.label}" + (f" ε={self.epsilon_label}" if self.epsilon is not None else "")

    def to_dict(self) -> dict:
        return (
            {
                "lam": self.lam,
                "response": self.response,
                "response_ids": list(self.response_ids),
                "generated": self.generated,
                "token_logprob": list(self.token_logprob),
                "token_logprob_without": list(self.token_logprob_without),
                "token_pmi": list(self.token_pmi),
                "token_influence": list(self.token_influence),
                "response_token_chars": [list(span) for span in self.response_token_chars],
                "document_influence": self.document_influence,
                "ngrams": [g.to_dict() for g in self.ngrams],
                "noise_floor": None if self.noise_floor is None else self.noise_floor.to_dict(),
                "regurgitation": None if self.regurgitation is None else self.regurgitation.to_dict(),
                "generation": None if self.generation is None else self.generation.to_dict(),
                "utility": None if self.utility is None else self.utility.to_dict(),
                "context_tokens": self.context_tokens,
                "context_size": self.context_size,
                "search": None if self.search is None else self.search.to_dict(),
                "epsilon": self.epsilon,
                "top_spans": [g.to_dict() for g in self.top],
                "max_ngram_influence": self.max_ngram_influence,
            }
            | ({} if self.units is None else {"units": [u.to_dict() for u in self.units]})
            | ({} if self.descent is None else {"descent": self.descent.to_dict()})
            | ({"clusters": [c.to_dict() for c in self.clusters]} if self.clusters else {})
        )

    @classmethod
    def from_dict(cls, d: dict) -> LambdaResult:
        def opt(key, parse):
            return None if d[key] is None else parse(d[key])

        return cls(
            lam=d["lam"],
            response=d["response"],
            response_ids=list(d["response_ids"]),
            generated=d["generated"],
            token_logprob=list(d["token_logprob"]),
            token_logprob_without=list(d["token_logprob_without"]),
            token_pmi=list(d["token_pmi"]),
            token_influence=list(d["token_influence"]),
            response_token_chars=[(a, b) for a, b in d["response_token_chars"]],
            document_influence=d["document_influence"],
            ngrams=[NgramInfluence.from_dict(g) for g in d["ngrams"]],
            noise_floor=opt("noise_floor", NoiseFloor.from_dict),
            regurgitation=opt("regurgitation", Regurgitation.from_dict),
            generation=opt("generation", Generation.from_dict),
            utility=opt("utility", Utility.from_dict),
            context_tokens=d["context_tokens"],
            context_size=d["context_size"],
            search=opt("search", SearchRecord.from_dict),
            epsilon=d["epsilon"],
            top=[NgramInfluence.from_dict(g) for g in d["top_spans"]],
            units=None if "units" not in d else [UnitInfluence.from_dict(u) for u in d["units"]],
            descent=None if "descent" not in d else Descent.from_dict(d["descent"]),
            clusters=[ClusterInfluence.from_dict(c) for c in d.get("clusters", ())],
        )


@dataclass
class ExampleResult:
    """One example's results: its ``id``, the tokens of its whole context, its query, and one
    :class:`LambdaResult` per λ, context size and ε."""

    id: str
    context_tokens: int
    query: str
    results: list[LambdaResult]

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "context_tokens": self.context_tokens,
            "query": self.query,
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, d: dict) -> ExampleResult:
        return cls(d["id"], d["context_tokens"], d["query"], [LambdaResult.from_dict(r) for r in d["results"]])


__all__ = [
    "COPY_SOURCES_RULE",
    "DESCENT_RULE",
    "descent_rule",
    "Block",
    "ClusterInfluence",
    "Descent",
    "ExampleResult",
    "Generation",
    "LambdaResult",
    "NgramInfluence",
    "SearchRecord",
    "UnitInfluence",
    "Utility",
]
