"""ContextLeak: canary membership-inference audits of private in-context learning (SPEC §2).

The game (SPEC §2.1). A private set D is drawn from the data (``ensembles ×
shots`` records; the rest is held out for utility). Each trial draws
Z ~ Bernoulli(1/2); if Z = 1 one record of D (the *slot*, fixed per audit and
chosen among records whose label differs from y_c) is replaced by the canary.
The mechanism answers the fixed audit query ``queries_per_trial`` times; its
randomness -- the ensemble partition, the model's sampled answers and the
Gaussian noise -- is re-drawn every trial. ``resample_data=True`` also re-draws
D (and the slot) every trial; that is closer to an average-case audit and,
on a 270M base model, buries the canary's effect under the variation between
private sets.

The auditor sees the mechanism's signal (answer frequencies, the noisy
histogram, or the (noisy mean) embedding), turns it into a score with a
detector fitted on reference runs disjoint from the trials, and the scores of
the Z = 1 and Z = 0 trials go to :class:`ctxlite.estimators.CanaryScoreAuditor`.

Theoretical ε: for RNM / ESA the reported ``epsilon`` is **per query with the
canary always present** (the analytic Gaussian σ for the mechanism's
replacement sensitivity); ``epsilon_per_trial`` composes the
``queries_per_trial`` releases of one trial (Gaussian composition, exact:
μ_trial = √n · Δ/σ), which is what the per-trial score is bounded by. With
``accounting_queries`` T (and ``sampling_rate`` q) each row also gives
``epsilon_subsampled``, the ε *subsampled over T queries* of a deployment
that runs this σ (PLD accountant). The heuristic defenses have no
theoretical ε (``null``).

Randomness: every trial has its own seed (``seed``, trial index), independent
of ε, so the same trial at different ε sees the same Z, partitions and votes
and only the noise scale differs (common random numbers). Every trial and
reference run is appended to the :class:`ctxlite.records.RecordLog` as it
finishes under a key like ``eps=8/trial=17``; a re-run with the same
parameters skips finished keys.
"""
from __future__ import annotations

import enum
import math
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from ctxlite.calibration import subsampled_gaussian_epsilon
from ctxlite.canaries import Canary, CanaryKind, make_canary
from ctxlite.detectors import CountDetector, Detector, DirectionDetector, LeakDetector
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.estimators import CanaryScoreAuditor, Split, gdp_epsilon
from ctxlite.identity import bundled_data_hash, content_hash, differences
from ctxlite.mechanisms import (
    EmbeddingSpaceAggregation,
    Judge,
    Mechanism,
    NoDefense,
    PromptDefense,
    ReportNoisyMax,
    TaskFormat,
    leak_fraction,
)
from ctxlite.oracle import ModelOracle
from ctxlite.queries import AuditQuery, QueryKind, build_query, injection_query
from ctxlite.records import RecordLog, read_jsonl


class Task(enum.Enum):
    CLASSIFY = "classify"
    GENERATE = "generate"


class MechanismKind(enum.Enum):
    NONE = "none"
    PROMPT_L1 = "prompt-l1"
    PROMPT_L2 = "prompt-l2"
    JUDGE = "judge"
    RNM = "rnm"
    ESA = "esa"

    @property
    def is_dp(self) -> bool:
        return self in (MechanismKind.RNM, MechanismKind.ESA)


class Attack(enum.Enum):
    CANARY = "canary"          # ContextLeak: canary + targeted query
    INJECTION = "injection"    # baseline: ask the model to print the examples


class DetectorKind(enum.Enum):
    DIRECTION = "direction"
    COUNT = "count"


def _enum(cls, value, what: str):
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        raise InvalidParameter(f"unknown {what} {value!r}: use one of {', '.join(m.value for m in cls)}") from None


@dataclass(frozen=True)
class AuditSettings:
    """Everything that defines an audit (validated on construction).

    ``shots`` is records per prompt (per ensemble for rnm/esa); ``ensembles``
    is m for rnm/esa and must be 1 otherwise. The settings own every default,
    and the command line passes ``None`` for what the user left out, so the
    Python API and ``ctxlite audit`` run the same audit: ``None`` picks, for
    rnm/esa, ``epsilons`` (1, 2, 4, 8, inf), 2 shots per ensemble and 10
    ensembles, else the single setting inf, 20 shots and 1 ensemble;
    ``queries_per_trial=None`` picks 1 for rnm/esa (so the per-trial ε is the
    per-query ε), 64 for classification and 4 for generation.
    ``temperature=0`` is greedy.
    """

    DP_DEFAULTS = {"epsilons": (1.0, 2.0, 4.0, 8.0, math.inf), "shots": 2, "ensembles": 10}
    PLAIN_DEFAULTS = {"epsilons": (math.inf,), "shots": 20, "ensembles": 1}

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
    confidence: float = 0.95
    fpr: float = 0.1
    split_fraction: float = 0.5
    utility_queries: int = 20
    resample_data: bool = False
    accounting_queries: int | None = None
    sampling_rate: float = 1.0
    seed: int = 0

    def __post_init__(self):
        s = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        s("task", _enum(Task, self.task, "task"))
        s("mechanism", _enum(MechanismKind, self.mechanism, "mechanism"))
        s("canary", CanaryKind.parse(self.canary))
        s("query", QueryKind.parse(self.query))
        s("attack", _enum(Attack, self.attack, "attack"))
        s("detector", _enum(DetectorKind, self.detector, "detector"))
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
        if not 0 < self.confidence < 1:
            raise InvalidParameter(f"confidence must be in (0, 1), got {self.confidence}")
        if not 0 < self.fpr < 1:
            raise InvalidParameter(f"fpr must be in (0, 1), got {self.fpr}")
        if not 0 < self.split_fraction < 1:
            raise InvalidParameter(f"split_fraction must be in (0, 1), got {self.split_fraction}")
        if self.trials < 4:
            raise InvalidParameter(f"trials must be >= 4 (two per side at least), got {self.trials}")
        if self.shots < 1:
            raise InvalidParameter(f"shots must be >= 1, got {self.shots}")
        if self.ensembles < 1 or (self.ensembles > 1 and not self.mechanism.is_dp):
            raise InvalidParameter(f"ensembles must be 1 for {self.mechanism.value} (>= 1 for rnm/esa), got {self.ensembles}")
        if self.queries_per_trial is None:
            n = 1 if self.mechanism.is_dp else (64 if self.task is Task.CLASSIFY else 4)
            s("queries_per_trial", n)
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
        if self.accounting_queries is not None:
            if not self.mechanism.is_dp:
                raise InvalidParameter("accounting_queries needs a DP mechanism (rnm or esa)")
            if self.accounting_queries < 1:
                raise InvalidParameter(f"accounting_queries must be >= 1, got {self.accounting_queries}")
        if not 0 < self.sampling_rate <= 1:
            raise InvalidParameter(f"sampling_rate must be in (0, 1], got {self.sampling_rate}")
        if self.sampling_rate < 1 and self.accounting_queries is None:
            raise InvalidParameter("sampling_rate only enters the subsampled accounting: set accounting_queries too")
        if self.template_index < 0 or self.seed < 0:
            raise InvalidParameter("template_index and seed must be >= 0")

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    @property
    def private_size(self) -> int:
        return self.ensembles * self.shots

    REPORT_ONLY = ("confidence", "fpr", "split_fraction", "accounting_queries", "sampling_rate")
    """Settings that change the estimates but no trial: a resume may change them."""

    def params(self) -> dict:
        """JSON-ready parameters (all of them: the report's ``settings``)."""
        out = {}
        for k, v in asdict(self).items():
            if isinstance(v, enum.Enum):
                v = v.value
            elif k == "epsilons":
                v = [("inf" if math.isinf(e) else e) for e in v]
            out[k] = v
        return out

    def log_params(self) -> dict:
        """The settings part of a trial log's identity (``params`` less ``REPORT_ONLY``)."""
        return {k: v for k, v in self.params().items() if k not in self.REPORT_ONLY}


BUNDLED_AUDIT_DATA = ("semantic_canaries.txt", "templates/audit_templates.json", "templates/injection_templates.json")
"""Package data that shapes an audit: the canary pool, the query, defence and judge templates."""


def audit_identity(engine_identity: dict, settings: AuditSettings, records: Sequence[dict],
                   embedder_identity: dict | None = None) -> dict:
    """What a trial log must match to be resumed: the model runtime (``Engine.identity()``), the
    settings that change trials, the private pool's content, the bundled canaries and templates,
    and the embedding model (generation audits)."""
    return {**engine_identity, "settings": settings.log_params(), "data": content_hash(list(records)),
            "bundled_data": bundled_data_hash(*BUNDLED_AUDIT_DATA), "embed_model": embedder_identity}


# --------------------------------------------------------------------------
# data


def check_records(records: Sequence[dict], task: Task, where: Sequence[str] | None = None) -> list[dict]:
    """Validate records for ``task`` (fields present and non-empty strings, known labels)."""
    task = _enum(Task, task, "task")
    fmt = TaskFormat.for_task(task.value)
    if not records:
        raise DataError("the private set is empty")
    need = (fmt.input_field, fmt.output_field)
    out = []
    for i, r in enumerate(records):
        at = where[i] if where else f"record {i + 1}"
        for k in need:
            v = r.get(k) if isinstance(r, dict) else None
            if not isinstance(v, str) or not v.strip():
                raise DataError(f"{at}: field {k!r} is missing, empty or not a string ({task.value} needs {need})")
        if task is Task.CLASSIFY and r["label"] not in fmt.labels:
            raise DataError(f"{at}: unknown label {r['label']!r}: the classification template knows {list(fmt.labels)}")
        out.append({k: r[k] for k in need})
    return out


def load_records(path: str | os.PathLike, task) -> list[dict]:
    """Read and validate a private set (JSONL) for ``task``; errors name file and line."""
    task = _enum(Task, task, "task")
    fmt = TaskFormat.for_task(task.value)
    lines = read_jsonl(path, required=(fmt.input_field, fmt.output_field),
                       strings=(fmt.input_field, fmt.output_field))
    return check_records([l.data for l in lines], task, [f"{path}:{l.number}" for l in lines])


# --------------------------------------------------------------------------
# report


@dataclass
class AuditReport:
    """One row per theoretical ε plus what was audited.

    Row keys: ``epsilon`` (theoretical, per query, canary always present; null
    for heuristic defenses), ``epsilon_per_trial`` (composed over the trial's
    queries), ``sigma``, ``sensitivity``, ``n_in``/``n_out``,
    ``audit_accuracy`` (threshold optimised on the same trials:
    **optimistic**), ``threshold``/``tpr``/``fpr`` at the empirical FPR
    target, ``epsilon_point`` (plug-in at that FPR, an estimate),
    ``epsilon_lower_bound`` (Clopper--Pearson at ``confidence``, threshold
    chosen on a split: the only **guarantee**, Jagielski et al. 2020),
    ``epsilon_gdp``, a **GDP estimate (model-based, not a bound)**: it assumes
    a Gaussian trade-off curve (Dong, Roth & Su 2022) and overshoots the true
    ε of a pure-ε mechanism (``epsilon_gdp_kind`` says so), ``utility``
    (accuracy or ROUGE-1 on held-out queries) and, when
    ``accounting_queries`` T is set, ``epsilon_subsampled``: the same σ
    accounted over T queries that each Poisson-subsample the records at
    ``sampling_rate`` q (dp_accounting PLD, add/remove sensitivity √2 for
    RNM, 2C for ESA), i.e. the deployment's ε after T answers rather than the
    audited single release.

    An estimate that cannot be formed (e.g. fewer than 1/FPR OUT trials, or
    perfect separation at the threshold) is null, and ``reasons`` maps its key
    to why; so is a +inf threshold. Only theoretical ε of a σ = 0 setting
    are infinite; :meth:`to_dict` writes them as the string ``"inf"``.
    """

    settings: dict
    canary: dict
    query: dict
    rows: list[dict]
    epsilon_kind: str
    utility_metric: str
    private_size: int
    forward_passes: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """Strict-JSON-ready dict (``json.dumps(..., allow_nan=False)`` works): ±inf -> "inf"/"-inf"."""

        def strict(v):
            if isinstance(v, float) and not math.isfinite(v):
                return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
            if isinstance(v, dict):
                return {k: strict(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [strict(x) for x in v]
            return v

        return strict(asdict(self))

    def table(self) -> str:
        """A readable table of the rows; an estimate that could not be formed prints n/a, with its reason below."""
        sub = self.settings.get("accounting_queries") is not None
        head = f"{'eps':>6} {'eps/trial':>9} {'sigma':>7} {'acc*':>6} {'TPR':>6} {'FPR':>6} {'eps_pt':>7} {'eps_lb':>7} {'gdp_est':>8} {'utility':>8}"
        head += f" {'eps_T':>7}" if sub else ""
        lines = [head]
        missing = []

        def f(v, w, p=3):
            if v is None:
                return f"{'-':>{w}}"
            return f"{v:>{w}.{p}f}" if math.isfinite(v) else f"{'inf':>{w}}"

        def est(r, key, w):
            if r.get(key) is None and key in r.get("reasons", {}):
                missing.append((r["epsilon"], key, r["reasons"][key]))
                return f"{'n/a':>{w}}"
            return f(r[key], w)

        for r in self.rows:
            lines.append(" ".join([f(r["epsilon"], 6, 2), f(r["epsilon_per_trial"], 9, 2), f(r["sigma"], 7),
                                   f(r["audit_accuracy"], 6), f(r["tpr"], 6), f(r["fpr"], 6),
                                   est(r, "epsilon_point", 7), f(r["epsilon_lower_bound"], 7),
                                   est(r, "epsilon_gdp", 8), f(r["utility"], 8)]
                                  + ([f(r["epsilon_subsampled"], 7)] if sub else [])))
        lines.append(f"acc* = audit accuracy with the threshold optimised on the same trials (optimistic); "
                     f"eps_lb = Clopper-Pearson lower bound at {self.settings['confidence']:.2f} (split threshold; "
                     f"the guarantee); gdp_est = GDP estimate (model-based, not a bound); "
                     f"theoretical eps: {self.epsilon_kind}"
                     + (f"; eps_T = the same sigma subsampled over T = {self.settings['accounting_queries']} queries "
                        f"at q = {self.settings['sampling_rate']:g}" if sub else ""))
        names = {"epsilon_point": "eps_pt", "epsilon_gdp": "gdp_est"}
        for eps, key, why in missing:
            at = "-" if eps is None else ("inf" if math.isinf(eps) else f"{eps:g}")
            lines.append(f"n/a: {names[key]} at eps = {at}: {why}")
        return "\n".join(lines)


# --------------------------------------------------------------------------
# the game


def _rng(*words: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(w) for w in words]))


def _eps_key(eps: float) -> str:
    return "inf" if math.isinf(eps) else f"{eps:g}"


def make_mechanism(settings: AuditSettings, epsilon: float) -> Mechanism:
    kind = settings.mechanism
    if kind is MechanismKind.NONE:
        return NoDefense()
    if kind is MechanismKind.PROMPT_L1:
        return PromptDefense(1)
    if kind is MechanismKind.PROMPT_L2:
        return PromptDefense(2)
    if kind is MechanismKind.JUDGE:
        return Judge()
    if kind is MechanismKind.RNM:
        return ReportNoisyMax(settings.ensembles, settings.shots, epsilon, settings.delta)
    return EmbeddingSpaceAggregation(settings.ensembles, settings.shots, epsilon, settings.delta,
                                     settings.clip_norm, settings.zero_shot_candidates)


def _draw_private(pool_size: int, settings: AuditSettings, rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(pool_size)


def _slot(records: Sequence[dict], canary: Canary, task: Task, rng: np.random.Generator) -> int:
    """Which record the canary replaces: one whose output differs from y_c."""
    out = "label" if task is Task.CLASSIFY else "summary"
    cands = [i for i, r in enumerate(records) if r[out] != canary.label] or list(range(len(records)))
    return int(cands[int(rng.integers(len(cands)))])


class _Game:
    def __init__(self, oracle: ModelOracle, records, settings: AuditSettings, canary: Canary, query: AuditQuery):
        self.oracle, self.pool, self.s, self.canary, self.query = oracle, records, settings, canary, query
        self.fmt = TaskFormat.for_task(settings.task.value)
        order = _draw_private(len(records), settings, _rng(settings.seed, 1))
        n = settings.private_size
        self.private = [records[i] for i in order[:n]]
        self.held_out = [records[i] for i in order[n:]]
        self.slot = _slot(self.private, canary, settings.task, _rng(settings.seed, 1, 1))
        self.text_outputs = settings.attack is Attack.INJECTION

    def dataset(self, z: bool, data_rng: np.random.Generator | None) -> list[dict]:
        private, slot = self.private, self.slot
        if data_rng is not None:  # resample_data: a fresh D and slot for this trial
            idx = data_rng.choice(len(self.pool), self.s.private_size, replace=False)
            private = [self.pool[i] for i in idx]
            slot = _slot(private, self.canary, self.s.task, data_rng)
        recs = list(private)
        if z:
            recs[slot] = self.canary.record(self.s.task.value)
        return recs

    def run(self, mech: Mechanism, z: bool, rng: np.random.Generator, data_rng) -> np.ndarray:
        recs = self.dataset(z, data_rng)
        rel = mech.release(self.oracle, self.fmt, recs, self.query.text, self.s.queries_per_trial, rng,
                           text_outputs=self.text_outputs)
        if self.text_outputs:
            return np.array([float(np.mean([leak_fraction(o, self.canary.text) for o in rel.outputs]))])
        return np.asarray(rel.signal, dtype=np.float64)

    def utility(self, mech: Mechanism) -> float | None:
        """Accuracy (classification) or ROUGE-1 F1 (generation) of the released outputs on held-out records."""
        if self.s.utility_queries == 0 or not self.held_out:
            return None
        items = self.held_out[: self.s.utility_queries]
        scores = []
        scorer = None
        if self.s.task is Task.GENERATE:
            from rouge_score import rouge_scorer

            scorer = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)
        for q, item in enumerate(items):
            rng = _rng(self.s.seed, 4, q)
            rel = mech.release(self.oracle, self.fmt, self.private, self.fmt.query_for(item), 1, rng)
            out = rel.outputs[0]
            if scorer is None:
                scores.append(float(out == item["label"]))
            else:
                scores.append(scorer.score(item["summary"], out)["rouge1"].fmeasure)
        return float(np.mean(scores))


def run_audit(
    engine,
    records: Sequence[dict],
    settings: AuditSettings,
    log: RecordLog | None = None,
    embedder=None,
    progress: Callable[[str], None] | None = None,
) -> AuditReport:
    """Run the ContextLeak game for every ε in ``settings`` and estimate the leakage.

    ``records``: the private pool (validated here); ``log``: an open
    :class:`RecordLog` whose finished keys are reused (resume);
    ``embedder``: an ``Engine(..., embeddings=True)`` for generation audits.
    """
    s = settings
    records = check_records(records, s.task)
    if len(records) < s.private_size:
        raise DataError(f"the private set has {len(records)} records but {s.ensembles} ensemble(s) x {s.shots} "
                        f"shot(s) need {s.private_size}")
    if s.task is Task.GENERATE and s.attack is Attack.CANARY and embedder is None:
        raise InvalidParameter("generation audits need an embedding engine (embedder=Engine(..., embeddings=True))")
    if log is not None:
        expected = audit_identity(engine.identity(), s, records, embedder.identity()["model"] if embedder else None)
        diff = differences(log.identity, expected)
        if diff:
            raise DataError(f"{log.path} is the log of another audit ({', '.join(diff[:6])} differ): open it with "
                            "this audit's identity (audit_identity) or choose another log")
    fmt = TaskFormat.for_task(s.task.value)
    oracle = ModelOracle(engine, fmt.labels, s.temperature, embedder, s.max_new_tokens)
    canary = make_canary(s.canary, s.task.value, records, s.seed, engine=engine, labels=fmt.labels)
    query = injection_query(s.task.value) if s.attack is Attack.INJECTION else \
        build_query(s.task.value, s.query, canary, fmt.labels, s.template_index)
    game = _Game(oracle, records, s, canary, query)
    say = progress or (lambda m: None)
    rows = []
    for eps in s.epsilons:
        mech = make_mechanism(s, eps)
        ek = _eps_key(eps)
        detector = _detector(s, fmt, canary)
        if detector.needs_reference:
            refs = {True: [], False: []}
            for j in range(s.reference_runs):
                for z in (True, False):
                    key = f"eps={ek}/ref={'in' if z else 'out'}/{j}"
                    rec = log.records.get(key) if log is not None else None
                    if rec is None:
                        sig = game.run(mech, z, _rng(s.seed, 3, j), _rng(s.seed, 5, j) if s.resample_data else None)
                        rec = {"type": "reference", "epsilon": ek, "z": int(z), "signal": sig.tolist()}
                        if log is not None:
                            log.append(key, rec)
                    refs[z].append(np.asarray(rec["signal"]))
            detector.fit(refs[True], refs[False])
        in_scores, out_scores = [], []
        for i in range(s.trials):
            key = f"eps={ek}/trial={i}"
            rec = log.records.get(key) if log is not None else None
            if rec is not None and rec.get("canary") != canary.id:
                raise DataError(f"{log.path}: trial {i} was played with canary {rec.get('canary')!r}, this audit's "
                                f"canary is {canary.id!r}: choose another --out")
            if rec is None:
                rng = _rng(s.seed, 2, i)
                z = bool(rng.random() < 0.5)
                sig = game.run(mech, z, rng, _rng(s.seed, 6, i) if s.resample_data else None)
                rec = {"type": "trial", "epsilon": ek, "trial": i, "z": int(z), "canary": canary.id,
                       "mechanism": mech.name, "seed": s.seed, "sigma": mech.sigma, "signal": sig.tolist(),
                       "score": detector.score(sig)}
                if log is not None:
                    log.append(key, rec)
            (in_scores if rec["z"] else out_scores).append(detector.score(np.asarray(rec["signal"])))
            if (i + 1) % max(1, s.trials // 10) == 0:
                say(f"eps={ek}: {i + 1}/{s.trials} trials ({oracle.forward_passes} forward passes so far)")
        rows.append(_row(s, mech, eps, in_scores, out_scores, game.utility(mech)))
    notes = []
    if s.mechanism.is_dp:
        notes.append("epsilon is per query with the canary always present (analytic Gaussian, replacement "
                     "sensitivity); epsilon_per_trial composes the trial's queries exactly (Gaussian composition)")
    if s.accounting_queries is not None:
        notes.append(f"epsilon_subsampled: the same sigma over T = {s.accounting_queries} queries, each "
                     f"Poisson-subsampling records at q = {s.sampling_rate:g} (dp_accounting PLD, add/remove "
                     "sensitivity sqrt(2) for rnm, 2C for esa: one record changes one ensemble's output); it is "
                     "not what the audit measures, which is one release per query")
    if s.utility_queries == 0:
        notes.append("utility: not measured (utility_queries = 0)")
    elif not game.held_out:
        notes.append(f"utility: not measured, no held-out records (the private set uses all {len(records)} records "
                     "of the data: add records to measure it)")
    if s.detector is DetectorKind.DIRECTION and s.attack is Attack.CANARY:
        notes.append(f"detector direction fitted on {s.reference_runs} paired reference runs per epsilon, "
                     "disjoint from the evaluated trials")
    return AuditReport(
        settings=s.params(),
        canary={"id": canary.id, "kind": canary.kind.value, "text": canary.text, "label": canary.label},
        query=asdict(query),
        rows=rows,
        epsilon_kind="per-query, canary always present" if s.mechanism.is_dp else "none (heuristic defense)",
        utility_metric="accuracy" if s.task is Task.CLASSIFY else "rouge1_f",
        private_size=s.private_size,
        forward_passes=oracle.forward_passes,
        notes=notes,
    )


def _detector(s: AuditSettings, fmt: TaskFormat, canary: Canary) -> Detector:
    if s.attack is Attack.INJECTION:
        return LeakDetector()
    if s.detector is DetectorKind.COUNT:
        if s.task is not Task.CLASSIFY:
            raise InvalidParameter("the count detector is for classification; generation uses the direction detector")
        return CountDetector(fmt.labels.index(canary.label))
    return DirectionDetector()


def _finite(x: float | None) -> float | None:
    """``x`` as a float if it is finite, else None (JSON null)."""
    return float(x) if x is not None and math.isfinite(x) else None


def _unbounded_reason(s: AuditSettings, n_out: int, tpr: float, fpr: float) -> str:
    """Why the plug-in / GDP estimate at the FPR target cannot be formed."""
    if n_out * s.fpr < 1:
        return (f"fewer than 1/FPR = {1 / s.fpr:g} OUT trials (n_out = {n_out}): no threshold can have an "
                f"empirical FPR in (0, {s.fpr:g}], so the estimate at that FPR is undefined; raise --trials")
    if fpr == 0:
        return "no OUT trial scored at or above the threshold (empirical FPR 0): log(TPR/FPR) is unbounded"
    if tpr == 1:
        return "every IN trial scored at or above the threshold (empirical TPR 1): log(TNR/FNR) is unbounded"
    return "the estimate is not finite on these trials"  # pragma: no cover - the cases above are exhaustive


def _row(s: AuditSettings, mech: Mechanism, eps: float, ins, outs, utility) -> dict:
    n_in, n_out = len(ins), len(outs)
    if n_in < 2 or n_out < 2:
        raise InvalidParameter(f"too few trials per side to estimate anything (in={n_in}, out={n_out}): raise --trials")
    auditor = CanaryScoreAuditor(ins, outs)
    t = auditor.threshold_at_fpr(s.fpr)
    tpr, fpr = auditor.tpr_fpr(t)
    cp = auditor.epsilon_clopper_pearson(alpha=s.alpha, delta=s.delta, selection=Split(s.split_fraction, s.seed))
    dp = s.mechanism.is_dp
    if dp and mech.sigma > 0:
        per_trial = gdp_epsilon(math.sqrt(s.queries_per_trial) * mech.sensitivity / mech.sigma, s.delta)
    else:
        per_trial = math.inf if dp else None
    subsampled = None
    if s.accounting_queries is not None:
        subsampled = subsampled_gaussian_epsilon(mech.sigma, mech.add_remove_sensitivity, s.sampling_rate,
                                                 s.accounting_queries, s.delta)
    # estimates that cannot be formed are null with a reason (never inf/NaN in the JSON)
    reasons = {}
    estimates = {"epsilon_point": auditor.epsilon_point(s.fpr, s.delta),
                 "epsilon_gdp": auditor.epsilon_gdp(s.delta, s.fpr)}
    for key, value in estimates.items():
        if n_out * s.fpr < 1 or not math.isfinite(value):
            estimates[key] = None
            reasons[key] = _unbounded_reason(s, n_out, tpr, fpr)
    no_call = "no observed score has empirical FPR <= {:g}: the threshold is +inf (no trial called present)"
    if not math.isfinite(t):
        reasons["threshold"] = no_call.format(s.fpr)
    if not math.isfinite(cp.threshold):
        reasons["lower_bound_threshold"] = ("the selection half preferred +inf (no trial called present); "
                                            "the bound at it is 0")
    return {
        "epsilon": eps if dp else None,
        "epsilon_per_trial": per_trial,
        "sigma": mech.sigma if dp else None,
        "sensitivity": mech.sensitivity,
        "n_in": n_in,
        "n_out": n_out,
        "audit_accuracy": auditor.audit_accuracy(),
        "threshold": _finite(t),
        "tpr": tpr,
        "fpr": fpr,
        "epsilon_point": estimates["epsilon_point"],
        "epsilon_lower_bound": cp.epsilon,
        "lower_bound_counts": {"tp": cp.true_positives, "n_in": cp.n_in, "fp": cp.false_positives,
                               "n_out": cp.n_out, "threshold": _finite(cp.threshold)},
        "confidence": s.confidence,
        "epsilon_gdp": estimates["epsilon_gdp"],
        "epsilon_gdp_kind": "model-based estimate, not a bound",
        "reasons": reasons,
        "epsilon_subsampled": subsampled,
        "accounting": None if subsampled is None else {"queries": s.accounting_queries,
                                                       "sampling_rate": s.sampling_rate,
                                                       "sensitivity_add_remove": mech.add_remove_sensitivity,
                                                       "accountant": "dp_accounting PLD"},
        "utility": utility,
    }
