"""What defines a ContextLeak audit, in two parts: the game (:class:`AuditSettings`: the task, the
mechanism, the canary and query, the trial counts, the seed), which every trial depends on and a
trial log's identity holds, and the estimates (:class:`EstimateSettings`: the confidence, the
threshold selection, the FPR target, the accounting), which only change the numbers formed from
the trials, so a resumed log may be reported under others (and says so). The settings own every
default; :func:`audit_identity` is what a trial log must match to be resumed."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields

from ctxlite.audit.canaries import CanaryKind
from ctxlite.audit.formats import AuditFormat, Task
from ctxlite.audit.queries import QueryKind
from ctxlite.choices import Choice
from ctxlite.errors import InvalidParameter
from ctxlite.identity import bundled_data_hash, content_hash


class MechanismKind(Choice):
    """The private ICL method under audit (``--mechanism``): no defence, a prompt defence (level 1 or 2),
    an LLM judge, or a DP aggregation: report-noisy-max (``rnm``) or embedding-space aggregation (``esa``)."""

    NONE = "none"
    PROMPT_L1 = "prompt-l1"
    PROMPT_L2 = "prompt-l2"
    JUDGE = "judge"
    RNM = "rnm"
    ESA = "esa"

    @property
    def is_dp(self) -> bool:
        return self in (MechanismKind.RNM, MechanismKind.ESA)


class Attack(Choice):
    """What the auditor asks (``--attack``): the ContextLeak canary query, or the injection baseline."""

    CANARY = "canary"  # ContextLeak: canary + targeted query
    INJECTION = "injection"  # baseline: ask the model to print the examples


class DetectorKind(Choice):
    """How a release is scored for the canary (``--detector``): its projection onto the IN-minus-OUT
    direction of the reference runs, or the frequency of the canary's label (classify)."""

    DIRECTION = "direction"
    COUNT = "count"


class BoundKind(Choice):
    """How the epsilon lower bound chooses its threshold (:mod:`ctxlite.privacy.estimators`' selections).

    corner-grid (the default: the most certified epsilon per trial in
    bench/bench_power.py, valid by a Bonferroni argument over a fixed grid),
    split (ContextLeak's and earlier ctxlite's), multi-split (the median of
    many splits) and bonferroni (every observed score).
    """

    CORNER_GRID = "corner-grid"
    SPLIT = "split"
    MULTI_SPLIT = "multi-split"
    BONFERRONI = "bonferroni"


@dataclass(frozen=True)
class EstimateSettings:
    """How the estimates are formed from an audit's trials (validated on construction); no trial
    depends on them. ``confidence`` 1 − α of the lower bounds, the threshold selection ``bound``
    (with ``split_fraction`` for the splits), the FPR target ``fpr`` of the point and GDP
    estimates, and ``accounting_queries`` T with its Poisson ``sampling_rate`` q for the
    subsampled accounting of a DP mechanism's σ (None: none)."""

    confidence: float = 0.95
    fpr: float = 0.1
    split_fraction: float = 0.5
    bound: BoundKind = BoundKind.CORNER_GRID
    accounting_queries: int | None = None
    sampling_rate: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "bound", BoundKind.parse(self.bound))
        if not 0 < self.confidence < 1:
            raise InvalidParameter(f"confidence must be in (0, 1), got {self.confidence}")
        if not 0 < self.fpr < 1:
            raise InvalidParameter(f"fpr must be in (0, 1), got {self.fpr}")
        if not 0 < self.split_fraction < 1:
            raise InvalidParameter(f"split_fraction must be in (0, 1), got {self.split_fraction}")
        if self.accounting_queries is not None and self.accounting_queries < 1:
            raise InvalidParameter(f"accounting_queries must be >= 1, got {self.accounting_queries}")
        if not 0 < self.sampling_rate <= 1:
            raise InvalidParameter(f"sampling_rate must be in (0, 1], got {self.sampling_rate}")
        if self.sampling_rate < 1 and self.accounting_queries is None:
            raise InvalidParameter("sampling_rate only enters the subsampled accounting: set accounting_queries too")

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    def params(self) -> dict:
        """JSON-ready parameters."""
        return {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class AuditSettings:
    """The game an audit plays (validated on construction), and its ``estimates``.

    ``shots`` is records per prompt (per ensemble for rnm/esa); ``ensembles``
    is m for rnm/esa and must be 1 otherwise. The settings own every default,
    and the command line passes ``None`` for what the user left out, so the
    Python API and ``ctxlite audit`` run the same audit: ``None`` picks, for
    rnm/esa, ``epsilons`` (1, 2, 4, 8, inf), 2 shots per ensemble and 10
    ensembles, else the single setting inf, 20 shots and 1 ensemble;
    ``queries_per_trial=None`` picks 1 for rnm/esa (so the per-trial ε is the
    per-query ε), 64 for classification and 4 for generation.
    ``temperature=0`` is greedy. ``judge_model`` (judge mechanism only, else None) is the model
    that judges outputs: a registry name or GGUF path whose engine ``run_audit`` takes as
    ``judge=``, or None for the audited model judging itself.

    Every field but ``estimates`` shapes the trials and is part of a trial log's identity
    (:meth:`game_params`); the log form of the whole (:meth:`params`) is one flat object.
    """

    DP_DEFAULTS = {"epsilons": (1.0, 2.0, 4.0, 8.0, math.inf), "shots": 2, "ensembles": 10}
    PLAIN_DEFAULTS = {"epsilons": (math.inf,), "shots": 20, "ensembles": 1}
    QUERIES_PER_TRIAL = {"dp": 1, "classify": 64, "generate": 4}

    task: Task = Task.CLASSIFY
    mechanism: MechanismKind = MechanismKind.NONE
    epsilons: tuple[float, ...] | None = None
    delta: float = 1e-5
    canary: CanaryKind = CanaryKind.HEX
    query: QueryKind = QueryKind.INPUT_OUTPUT
    template_index: int = 0
    attack: Attack = Attack.CANARY
    detector: DetectorKind = DetectorKind.DIRECTION
    trials: int = 200
    queries_per_trial: int | None = None
    shots: int | None = None
    ensembles: int | None = None
    reference_runs: int = 16
    temperature: float = 1.0
    max_new_tokens: int = 24
    clip_norm: float = 1.0
    zero_shot_candidates: int = 8
    utility_queries: int = 20
    resample_data: bool = False
    judge_model: str | None = "smollm2-135m-instruct"
    seed: int = 0
    estimates: EstimateSettings = field(default_factory=EstimateSettings)

    def __post_init__(self):
        s = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        for f in fields(self):
            if isinstance(f.default, Choice):  # the kinds: parse their CLI spelling
                s(f.name, type(f.default).parse(getattr(self, f.name)))
        defaults = self.DP_DEFAULTS if self.mechanism.is_dp else self.PLAIN_DEFAULTS
        for name, value in defaults.items():
            if getattr(self, name) is None:
                s(name, value)
        eps = tuple(float(e) for e in self.epsilons)
        if not eps or any(not (e > 0) for e in eps):
            raise InvalidParameter(f"epsilons must be > 0 (inf allowed), got {self.epsilons}")
        if not self.mechanism.is_dp and eps != (math.inf,):
            raise InvalidParameter(f"mechanism {self.mechanism.value} has no privacy parameter: leave epsilon unset")
        s("epsilons", tuple(sorted(set(eps))))
        if self.mechanism is MechanismKind.RNM and self.task is not Task.CLASSIFY:
            raise InvalidParameter("rnm is a classification mechanism: use esa for --task generate")
        if self.mechanism is MechanismKind.ESA and self.task is not Task.GENERATE:
            raise InvalidParameter("esa is a generation mechanism: use rnm for --task classify")
        if self.attack is Attack.INJECTION and self.mechanism.is_dp:
            raise InvalidParameter("the injection baseline needs a text-output mechanism (none, prompt-l1/l2, judge)")
        if not 0 < self.delta < 1:
            raise InvalidParameter(f"delta must be in (0, 1), got {self.delta}")
        if not isinstance(self.estimates, EstimateSettings):
            raise InvalidParameter(f"estimates must be EstimateSettings, got {type(self.estimates).__name__}")
        if self.trials < 4:
            raise InvalidParameter(f"trials must be >= 4 (two per side at least), got {self.trials}")
        if self.shots < 1:
            raise InvalidParameter(f"shots must be >= 1, got {self.shots}")
        if self.ensembles < 1 or (self.ensembles > 1 and not self.mechanism.is_dp):
            raise InvalidParameter(
                f"ensembles must be 1 for {self.mechanism.value} (>= 1 for rnm/esa), got {self.ensembles}"
            )
        if self.queries_per_trial is None:
            s("queries_per_trial", self.QUERIES_PER_TRIAL["dp" if self.mechanism.is_dp else self.task.value])
        if self.queries_per_trial < 1:
            raise InvalidParameter(f"queries_per_trial must be >= 1, got {self.queries_per_trial}")
        if self.reference_runs < 1:
            raise InvalidParameter(f"reference_runs must be >= 1, got {self.reference_runs}")
        if not self.temperature >= 0:
            raise InvalidParameter(f"temperature must be >= 0, got {self.temperature}")
        if self.max_new_tokens < 1 or self.zero_shot_candidates < 1 or self.utility_queries < 0:
            raise InvalidParameter("max_new_tokens and zero_shot_candidates must be >= 1, utility_queries >= 0")
        if not (self.clip_norm > 0 and math.isfinite(self.clip_norm)):
            raise InvalidParameter(f"clip_norm must be finite and > 0, got {self.clip_norm}")
        if self.estimates.accounting_queries is not None and not self.mechanism.is_dp:
            raise InvalidParameter("accounting_queries needs a DP mechanism (rnm or esa)")
        if self.mechanism is not MechanismKind.JUDGE:
            s("judge_model", None)
        elif self.judge_model is not None and not (isinstance(self.judge_model, str) and self.judge_model.strip()):
            raise InvalidParameter(f"judge_model must be a model name or path (or None), got {self.judge_model!r}")
        if self.template_index < 0 or self.seed < 0:
            raise InvalidParameter("template_index and seed must be >= 0")

    @property
    def private_size(self) -> int:
        return self.ensembles * self.shots

    def game_params(self) -> dict:
        """The game's JSON-ready parameters: the settings part of a trial log's identity."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "estimates":
                continue
            if isinstance(v, enum.Enum):
                v = v.value
            elif f.name == "epsilons":
                v = [("inf" if math.isinf(e) else e) for e in v]
            out[f.name] = v
        return out

    def params(self) -> dict:
        """The log form of every parameter (the report's ``settings``): the game's and the estimates', flat."""
        return {**self.game_params(), **self.estimates.params()}

    @classmethod
    def from_params(cls, params: dict) -> AuditSettings:
        """The inverse of :meth:`params` (a report's ``settings``; strict-JSON ``"inf"`` epsilons read back)."""
        estimate_keys = {f.name for f in fields(EstimateSettings)}
        estimates = EstimateSettings(**{k: v for k, v in params.items() if k in estimate_keys})
        return cls(**{k: v for k, v in params.items() if k not in estimate_keys}, estimates=estimates)


BUNDLED_AUDIT_DATA = ("semantic_canaries.txt", "templates/audit_templates.json")
"""Package data that shapes an audit: the canary pool, the built-in formats, the query, defence and judge templates."""


def audit_identity(
    engine_identity: dict,
    settings: AuditSettings,
    records: Sequence[dict],
    embedder_identity: dict | None = None,
    fmt: AuditFormat | None = None,
    judge_identity: dict | None = None,
) -> dict:
    """What a trial log must match to be resumed: the model runtime (``Engine.identity()``), the
    settings that change trials, the prompt format (its text; default the task's built-in), the
    private pool's content, the bundled canaries and templates, the embedding model (generation
    audits) and the judge model (judge defence)."""
    fmt = fmt or AuditFormat.builtin(settings.task.value)
    return {
        **engine_identity,
        "settings": settings.game_params(),
        "format": fmt.identity(),
        "judge_model": judge_identity,
        "data": content_hash(list(records)),
        "bundled_data": bundled_data_hash(*BUNDLED_AUDIT_DATA),
        "embed_model": embedder_identity,
    }
