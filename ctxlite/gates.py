"""Verdicts for pipelines: one case per scored example or per audited ε row, each **fail**, **pass**
or **inconclusive** with the basis it rests on, and the gate over them.

A compliance job asks one question of a finished run: is the leak within budget? A lower bound
can only ever prove a leak; its failure to exceed the budget proves nothing, so a case passes only
where the budget is *shown* to hold, and what cannot be shown either way is inconclusive (exit 10,
never 0). The README's verdict table is this module's.

* audit, ``--fail-above-epsilon X`` (:func:`epsilon_case`), ε in one stated unit (per trial of Q
  queries composed, the audited release; per query only where Q = 1, :func:`check_epsilon_unit`):

  - fail: the certified lower bound ε_lb exceeds X (Clopper–Pearson at the audit's confidence,
    Jagielski et al. 2020: evidence), or the audited pair's ε(δ), computed from the model's answer
    distributions, surely exceeds X (no statistics involved): its *exact* value (a closed form, or
    every outcome enumerated), or else the lower end of its grid bracket;
  - pass: the pair's exact ε, or a valid upper bound on it (the grid's rounded-up value, RNM's
    profile), is ≤ X; or a DP mechanism's theoretical ε at the audit's δ, composed over the
    trial's queries, is ≤ X and the audit does not contradict it (ε_lb ≤ that ε): a pass *by the
    mechanism's guarantee*;
  - inconclusive: anything else (a pair's bracket that straddles X among them), with what was
    certified and a power calculation
    (:mod:`ctxlite.privacy.power`): how many trials an audit would need for ε_lb to exceed X --
    for a Gaussian pair (the Gaussian mechanism, its μ known) the range its own shape needs for even
    odds; for another known ε at least the (ε, δ) corner's, beside a Gaussian pair's of that ε --
    or that no number of trials can prove a pass.

* score, ``--fail-above-influence Y`` (:func:`influence_case`), τ_i = Σ_t |log p(y_t | D) −
  log p(y_t | D ∖ n-gram)| (Context influence, Sec. 3) as this build computes it, with its
  uncertainty u_i (:func:`ngram_uncertainty`): the result's noise floor, *estimated* from probe
  pairs re-decoded in other batch tilings (:mod:`ctxlite.influence.noise`; an estimate of how far
  another build's rounding moves τ_i, checked against a second build in docs/noise-floor.md, not a
  bound). fail when some n-gram has τ_i − u_i > Y (τ_i > Y where no floor was measured: what
  this build computed); pass when every n-gram of every result was measured, every result's floor
  was measured, and every τ_i + u_i ≤ Y; inconclusive otherwise (an n-gram within its uncertainty
  of Y, a result without a measured floor, an adaptive search that did not measure every window,
  no n-gram measured).
  A unit run (``--unit``) reads each unit's τ_u the same way, and also each near-duplicate pair's
  τ_pair (the unit and its partner removed together, :mod:`ctxlite.influence.redundancy`) with the
  same floor: a fact two passages both hold moves the response by τ_pair, not by either τ_u; and
  each cluster of three or more near-duplicates' τ_cluster (all of them removed together): a fact
  stated three times survives every pair. Where a result's partners join three or more units that
  no recorded cluster removed together (a log written before clusters), the case is inconclusive.

Messages carry numbers and positions, never the private text: JUnit files end up in CI
dashboards that the data's owners do not control.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from ctxlite.audit.report import AuditReport, AuditRow
from ctxlite.audit.settings import AuditSettings, MechanismKind
from ctxlite.errors import InvalidParameter
from ctxlite.influence.noise import RETILED
from ctxlite.influence.results import ClusterInfluence, ExampleResult, LambdaResult, NgramInfluence, UnitInfluence
from ctxlite.privacy.calibration import analytic_gaussian_sigma
from ctxlite.privacy.estimators import point_epsilon
from ctxlite.privacy.power import MAX_TRIALS_PER_SIDE, dp_corner, gaussian_trials_to_certify, trials_to_certify
from ctxlite.visible import visible


class Outcome(str, enum.Enum):
    """A case's verdict (its value is how JSON, JUnit and the HTML report spell it)."""

    FAIL = "fail"
    PASS = "pass"
    INCONCLUSIVE = "inconclusive"


class Basis(str, enum.Enum):
    """What a verdict rests on."""

    LOWER_BOUND = "certified lower bound"
    EXACT = "exact epsilon of the audited pair"
    PAIR_AT_LEAST = "lower end of the audited pair's epsilon, computed on a grid"
    UPPER_BOUND = "upper bound on the audited pair's epsilon"
    GUARANTEE = "the mechanism's DP guarantee"
    NO_PROOF = "no proof either way"
    MEASURED = "τ computed on this build, plus a noise floor estimated by probes (an estimate, not a bound)"
    THIS_BUILD = "τ computed on this build; its rounding between builds not measured"
    NO_GATE = "no gate set"


class EpsilonUnit(str, enum.Enum):
    """The unit of an ε budget: one trial's release (its Q queries composed), or one query."""

    TRIAL = "trial"
    QUERY = "query"


@dataclass(frozen=True)
class InfluenceGate:
    """A score run's gate (``--fail-above-influence``): no n-gram may move the response by more than
    ``nats`` (τ_i with its estimated noise floor, :func:`influence_case`)."""

    nats: float

    def __post_init__(self):
        if not self.nats >= 0:
            raise InvalidParameter(f"an influence budget is >= 0 nats, got {self.nats}")


@dataclass(frozen=True)
class EpsilonGate:
    """An audit's gate (``--fail-above-epsilon``): the budget ``epsilon`` in ``unit`` (per trial, its
    queries composed; or per query, only where a trial is one query: :func:`check_epsilon_unit`)."""

    epsilon: float
    unit: EpsilonUnit = EpsilonUnit.TRIAL

    def __post_init__(self):
        if not self.epsilon >= 0:
            raise InvalidParameter(f"an epsilon budget is >= 0, got {self.epsilon}")
        object.__setattr__(self, "unit", EpsilonUnit(self.unit))


@dataclass(frozen=True)
class Case:
    """One verdict: an example (score) or an ε row (audit); ``message`` states its basis and numbers."""

    name: str
    outcome: Outcome
    message: str
    basis: Basis = Basis.NO_GATE

    @property
    def failed(self) -> bool:
        return self.outcome is Outcome.FAIL

    @property
    def inconclusive(self) -> bool:
        return self.outcome is Outcome.INCONCLUSIVE

    def to_dict(self) -> dict:
        return {"name": self.name, "verdict": self.outcome.value, "basis": self.basis.value, "message": self.message}

    @classmethod
    def from_dict(cls, d: dict) -> Case:
        return cls(d["name"], Outcome(d["verdict"]), d["message"], Basis(d["basis"]))


@dataclass
class Verdict:
    """The cases of one run under one gate (``gate`` None: reported, nothing can fail)."""

    suite: str
    gate: str | None
    cases: list[Case]
    complete: bool = True
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def failures(self) -> list[Case]:
        return [c for c in self.cases if c.failed]

    @property
    def inconclusive(self) -> list[Case]:
        return [c for c in self.cases if c.inconclusive]

    @property
    def outcome(self) -> Outcome | None:
        """fail if any case failed, else inconclusive if any case is, else pass (None: no gate)."""
        if self.gate is None:
            return None
        if self.failures:
            return Outcome.FAIL
        return Outcome.INCONCLUSIVE if self.inconclusive else Outcome.PASS

    def to_dict(self) -> dict:
        return {
            "verdict": None if self.outcome is None else self.outcome.value,
            "suite": self.suite,
            "gate": self.gate,
            "complete": self.complete,
            "failed": [{"name": c.name, "message": c.message} for c in self.failures],
            "inconclusive": [{"name": c.name, "message": c.message} for c in self.inconclusive],
            "cases": len(self.cases),
            "results": [c.to_dict() for c in self.cases],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Verdict:
        """The verdict :meth:`to_dict` wrote (its outcome follows from the cases; ``properties``, the
        JUnit report's run properties, are not part of the dict form)."""
        return cls(d["suite"], d["gate"], [Case.from_dict(c) for c in d["results"]], d["complete"])

    def summary(self) -> str:
        """One line, the verdict first: what failed (or could not be shown), on how many cases."""
        if self.gate is None:
            return f"{self.suite}: {len(self.cases)} case(s), no gate set"
        n = len(self.cases)
        outcome = self.outcome
        if outcome is Outcome.PASS:
            bases = sorted({c.basis.value for c in self.cases})
            return f"{self.suite}: pass: all {n} case(s) within the budget ({self.gate}); basis: {'; '.join(bases)}"
        bad = self.failures if outcome is Outcome.FAIL else self.inconclusive
        what = "exceed the budget" if outcome is Outcome.FAIL else "could not be shown within the budget"
        shown = "; ".join(f"{c.name}: {c.message}" for c in bad[:3])
        shown += f"; {len(bad) - 3} more" if len(bad) > 3 else ""
        return f"{self.suite}: {outcome.value}: {len(bad)} of {n} case(s) {what} ({self.gate}) ({shown})"

    def lines(self) -> list[str]:
        """The verdict and each case's verdict and basis, for the top of a table (empty: no gate), with
        control and bidi characters of a case's name (an example id) shown as visible escapes."""
        if self.gate is None:
            return []
        return [visible(f"verdict: {self.summary()}")] + [visible(f"  {c.name}: {c.message}") for c in self.cases]


def _num(x: float | None) -> str:
    return "n/a" if x is None else ("inf" if math.isinf(x) else f"{x:.3f}")


# --------------------------------------------------------------------------
# score: the influence gate


CONCLUSIVE = (
    "re-score on the local engine with --null-ablations 1 or more: probes re-decoded in other batch tilings "
    "measure it (a server backend has no tiling to choose)"
)
"""What makes an influence case without a measured floor conclusive."""


def floor_measured(result: LambdaResult) -> str | None:
    """Why a λ result's noise floor measured no rounding (None: it did, by probes in other batch tilings).

    Three cases read as unmeasured: no floor (a server backend, ``--null-ablations 0``); an older
    floor (null ablations re-decoded in the canonical tiling: they read 0 by construction, issue
    24 §2); and probes that each reproduced the canonical decode bit for bit (they saw no rounding
    to scale)."""
    floor = result.noise_floor
    if floor is None:
        return "no noise floor was measured (a server backend, or --null-ablations 0)"
    if floor.method != RETILED or not floor.per_token:
        return (
            "its noise floor is an older one (null ablations re-decoded in the canonical tiling, which "
            "read 0 by construction)"
        )
    if not any(floor.per_token):
        return "its probes each reproduced the canonical decode bit for bit, so they measured no rounding"
    return None


def probe_pairs(result: LambdaResult) -> int:
    """How many probe pairs (a null probe and an ablation probe) a result's floor was estimated from."""
    return 0 if result.noise_floor is None else result.noise_floor.kinds.count("null")


def ngram_uncertainty(result: LambdaResult, ngram: NgramInfluence | UnitInfluence) -> float | None:
    """How far an n-gram's τ_i may be from its value on another build or batch tiling, as its
    result's probes estimate it: the n-gram's own ``uncertainty`` where it carries one (a floor that
    differs per n-gram), else its result's noise floor (its ``max``); None where the result
    measured no rounding (:func:`floor_measured`). Never 0 for want of a measurement: ``--exact``
    is exact on this build only, and another build rounds it differently."""
    if floor_measured(result) is not None:
        return None
    own = ngram.uncertainty if isinstance(ngram, NgramInfluence) else None  # a unit carries none of its own
    return float(result.noise_floor.max if own is None else own)


def worst_ngram(result: LambdaResult) -> NgramInfluence | None:
    """The n-gram of largest τ_i among those not below the noise floor, in one λ result (or None)."""
    grams = [g for g in result.ngrams if g.above_noise is not False]
    return max(grams, key=lambda g: g.influence, default=None)


@dataclass(frozen=True)
class PairRemoval:
    """A unit removed together with its near-duplicate ``partner``, as the gate reads it: its
    ``influence`` is τ_pair, ``above_noise`` whether τ_pair exceeds the noise floor."""

    unit: UnitInfluence
    partner: UnitInfluence | None  # None: a partner label the result does not hold (never in a log it wrote)

    @property
    def influence(self) -> float:
        return self.unit.pair_influence

    @property
    def above_noise(self) -> bool | None:
        return self.unit.pair_above_noise


def pair_removals(result: LambdaResult) -> list[PairRemoval]:
    """The result's near-duplicate pairs, one per pair (a mutual pair is one removal), in rank order."""
    out, seen = [], set()
    for u in result.units or ():
        if u.partner is None or u.pair_influence is None:
            continue
        partner = next((v for v in result.units if v.label == u.partner and v is not u), None)
        key = frozenset((id(u), id(partner)))
        if key not in seen:
            seen.add(key)
            out.append(PairRemoval(u, partner))
    return out


def unjoined_duplicates(result: LambdaResult) -> list[list[str]]:
    """Groups of three or more units that the result's near-duplicate partners join (connected
    components of the unit–partner links) and that no recorded cluster holds: a log written before
    clusters were measured, whose pairs each leave a copy of what all of them hold."""
    units = result.units or ()
    labels = [u.label for u in units]
    parent = {label: label for label in labels}

    def root(label: str) -> str:
        while parent[label] != label:
            label = parent[label]
        return label

    for u in units:
        if u.partner is not None and u.partner in parent and root(u.partner) != root(u.label):
            parent[root(u.partner)] = root(u.label)
    groups: dict[str, list[str]] = {}
    for label in labels:
        groups.setdefault(root(label), []).append(label)
    covered = [set(c.units) for c in result.clusters]
    return [g for g in groups.values() if len(g) >= 3 and not any(set(g) <= c for c in covered)]


def tau_name(item, tau: str) -> str:
    """How a gated item's influence is written: τ_pair for a pair, τ_cluster for a cluster, else
    ``tau`` (τ_i or τ_u)."""
    if isinstance(item, ClusterInfluence):
        return "τ_cluster"
    return "τ_pair" if isinstance(item, PairRemoval) else tau


def _where(result: LambdaResult, gram: NgramInfluence | UnitInfluence | PairRemoval | ClusterInfluence) -> str:
    """Which result and which n-gram, unit, pair or cluster, by position (and a unit's label; never
    the text)."""
    eps = result.epsilon_label
    size = "" if result.context_size is None else f", first {result.context_size} context tokens"
    at = f"λ={result.lam:g}" + (f", ε={eps}" if eps else "") + size
    if isinstance(gram, ClusterInfluence):
        by = {u.label: u for u in result.units or ()}
        members = [by.get(label) for label in gram.units]
        where = ", ".join(
            repr(label) if u is None else f"{label!r} (tokens {u.token_start}–{u.token_end})"
            for label, u in zip(gram.units, members)
        )
        kind = next((u.kind for u in members if u is not None), "unit")
        return f"at {at}: {len(gram.units)} near-duplicate {kind}s {where} removed together"
    if isinstance(gram, PairRemoval):
        u, v = gram.unit, gram.partner
        other = "" if v is None else f" (tokens {v.token_start}–{v.token_end}, characters {v.char_start}–{v.char_end})"
        return (
            f"at {at}: {u.kind} {u.label!r} (tokens {u.token_start}–{u.token_end}, characters "
            f"{u.char_start}–{u.char_end}) removed with its near-duplicate {u.partner!r}{other}"
        )
    if isinstance(gram, UnitInfluence):
        return (
            f"at {at}: {gram.kind} {gram.label!r}, context tokens {gram.token_start}–{gram.token_end}, "
            f"characters {gram.char_start}–{gram.char_end}"
        )
    return f"at {at}: context tokens {gram.start}–{gram.start + gram.n}, characters {gram.char_start}–{gram.char_end}"


def measured_items(result: LambdaResult) -> list:
    """What a result's gate reads: its units, near-duplicate pairs and clusters where it scored
    units (``InfluenceSettings.unit``, :func:`pair_removals`), else its n-grams."""
    return result.ngrams if result.units is None else [*result.units, *pair_removals(result), *result.clusters]


def influence_case(key: str, rec: ExampleResult, threshold: float | None) -> Case:
    """One example's case: fail / pass / inconclusive as the module says; without a gate, its
    largest τ_i above the noise floor, reported."""
    grams = [(res, g) for res in rec.results for g in measured_items(res)]
    units = any(res.units is not None for res in rec.results)
    paired = any(pair_removals(res) for res in rec.results)
    clustered = any(res.clusters for res in rec.results)
    what, tau = ("unit", "τ_u") if units else ("n-gram", "τ_i")
    every = f"every {what}'s {tau}" + (" and every near-duplicate pair's τ_pair" if paired else "")
    every += " and every near-duplicate cluster's τ_cluster" if clustered else ""
    if threshold is None:
        shown = [(r, g) for r, g in grams if g.above_noise is not False]
        if not shown:
            return Case(key, Outcome.PASS, f"no {what} above the noise floor")
        res, g = max(shown, key=lambda rg: rg[1].influence)
        floor = None if res.noise_floor is None else res.noise_floor.max
        says = f"max {tau_name(g, tau)} {_num(g.influence)} nats (noise floor {_num(floor)}) {_where(res, g)}"
        return Case(key, Outcome.PASS, says)
    unit = f"budget {threshold:g} nats"
    if not grams:
        says = f"no {what} measured (document level only), {unit}"
        return Case(key, Outcome.INCONCLUSIVE, f"inconclusive ({Basis.NO_PROOF.value}): {says}", Basis.NO_PROOF)

    def u(rg) -> float | None:
        return ngram_uncertainty(*rg)

    def low(rg) -> float:  # what the n-gram's τ_i is at least, on a build whose rounding the floor covers
        return rg[1].influence - (u(rg) or 0.0)  # unmeasured: what this build computed

    res, g = worst = max(grams, key=low)
    if low(worst) > threshold:
        if u(worst) is None:
            basis = Basis.THIS_BUILD
            says = f"{tau_name(g, tau)} {_num(g.influence)} > {unit} {_where(res, g)}; {floor_measured(res)}"
        else:
            basis = Basis.MEASURED
            says = f"{tau_name(g, tau)} {_num(g.influence)} − floor {_num(u(worst))} nats > {unit} {_where(res, g)}"
        return Case(key, Outcome.FAIL, f"fail ({basis.value}): {says}", basis)
    unmeasured = [r for r in rec.results if not r.every_window]
    if unmeasured:
        r = unmeasured[0]
        return Case(
            key,
            Outcome.INCONCLUSIVE,
            f"inconclusive ({Basis.NO_PROOF.value}): adaptive search measured {len(r.ngrams)} of "
            f"{r.search.windows} n-gram windows at λ={r.lam:g}, so an unmeasured n-gram may exceed "
            f"the {unit} (score with --search exhaustive to decide)",
            Basis.NO_PROOF,
        )
    unjoined = [(r, g) for r in rec.results for g in unjoined_duplicates(r)]
    if unjoined:
        r, group = unjoined[0]
        return Case(
            key,
            Outcome.INCONCLUSIVE,
            f"inconclusive ({Basis.NO_PROOF.value}): at λ={r.lam:g} the near-duplicate units "
            f"{', '.join(map(repr, group))} were never removed together (a log written before clusters were "
            f"measured), so what all of them hold may move the response by more than the {unit} while each "
            "pair leaves a copy of it; re-score to decide",
            Basis.NO_PROOF,
        )
    blind = [(r, gr) for r, gr in grams if u((r, gr)) is None]
    if blind:
        res, g = max(blind, key=lambda rg: rg[1].influence)
        name = tau_name(g, tau)
        return Case(
            key,
            Outcome.INCONCLUSIVE,
            f"inconclusive ({Basis.NO_PROOF.value}): {name} {_num(g.influence)} ≤ {unit} {_where(res, g)}, but "
            f"how far rounding on another build moves {name} was not measured: {floor_measured(res)}; to decide, "
            f"{CONCLUSIVE}",
            Basis.NO_PROOF,
        )
    res, g = high = max(grams, key=lambda rg: rg[1].influence + u(rg))
    if g.influence + u(high) > threshold:
        return Case(
            key,
            Outcome.INCONCLUSIVE,
            f"inconclusive ({Basis.NO_PROOF.value}): {tau_name(g, tau)} {_num(g.influence)} is within its "
            f"estimated noise floor {_num(u(high))} nats of the {unit} {_where(res, g)}",
            Basis.NO_PROOF,
        )
    pairs = sorted({probe_pairs(r) for r in rec.results if measured_items(r)})
    counted = (
        f"{pairs[0]}–{pairs[-1]} probe pairs" if len(pairs) > 1 else f"{pairs[0]} probe pair" + "s" * (pairs[0] != 1)
    )
    return Case(
        key,
        Outcome.PASS,
        f"pass ({Basis.MEASURED.value}): {every} + floor ≤ {unit}; largest {tau_name(g, tau)} + floor "
        f"{_num(g.influence + u(high))} nats {_where(res, g)}; each floor estimated from {counted} "
        "re-decoded in other batch tilings, an estimate of the rounding between builds, not a bound on "
        "another build's rounding",
        Basis.MEASURED,
    )


def influence_cases(records: Iterable[tuple[str, ExampleResult]], threshold: float | None) -> list[Case]:
    """One case per example (``(key, ExampleResult)`` pairs), :func:`influence_case`."""
    return [influence_case(key, rec, threshold) for key, rec in records]


# --------------------------------------------------------------------------
# audit: the ε gate


def _eps_name(eps, mechanism: MechanismKind | str) -> str:
    """A row's case name (JUnit's testcase, a verdict's line) that a person reading CI understands:
    the theoretical ε of a DP mechanism's row (``epsilon=inf (no noise)`` at ∞), or, for a row that
    has none, the mechanism and why (no defence, or a heuristic one)."""
    if eps is None:  # no defense, or a heuristic one: no theoretical ε to name the row by
        kind = MechanismKind(getattr(mechanism, "value", mechanism))
        why = "undefended" if kind is MechanismKind.NONE else "heuristic"
        return f"mechanism={kind.value} ({why}, no epsilon)"
    return "epsilon=inf (no noise)" if math.isinf(eps) else f"epsilon={eps:g}"


def epsilon_unit_text(queries: int | None) -> str:
    """The unit every ε of an audit's verdict is in: one trial's release, its queries composed."""
    if queries is None or queries == 1:
        return "ε per trial (1 query, so per query too)"
    return f"ε per trial of {queries} queries composed"


def check_epsilon_unit(unit: EpsilonUnit | str, queries: int | None) -> None:
    """Refuse a per-query budget where a trial composes several queries: every ε the audit measures
    (ε_lb, the pair's ε) is per trial, and it is never compared with a per-query budget."""
    if EpsilonUnit(unit) is EpsilonUnit.QUERY and queries is not None and queries > 1:
        raise InvalidParameter(
            f"--epsilon-unit query: this audit's trials compose {queries} queries, and its lower bound and the "
            "pair's epsilon are per trial; a per-query budget cannot be compared with them (give the budget per "
            "trial, or audit with --queries-per-trial 1)"
        )


def _gaussian_need(budget: float, mu: float, alpha: float, delta: float) -> str:
    """The trials a Gaussian pair of ``mu`` needs for even odds of a lower bound above ``budget``:
    "A–B trials" (:func:`~ctxlite.privacy.power.gaussian_trials_to_certify`), or "more than …"."""
    least, enough = gaussian_trials_to_certify(budget, mu, alpha=alpha, delta=delta)
    if least is None:
        return f"more than {2 * MAX_TRIALS_PER_SIDE:,} trials"
    return (
        f"{least:,}–{enough:,} trials"
        if enough is not None
        else f"{least:,} to more than {2 * MAX_TRIALS_PER_SIDE:,} trials"
    )


SOLVE_PRECISION = 1e-12
"""The relative precision of a computed ε that the gate compares with a budget (:func:`_above`)."""


def _above(epsilon: float, budget: float) -> bool:
    """Whether a computed ε (the pair's, or the mechanism's guarantee) exceeds ``budget`` beyond the
    precision it is computed to: ε(δ) of the Gaussian mechanism is solved by Brent's method to
    ~1e-14 from a σ that is itself a rounded float, so RNM calibrated to ε = 3 has its ε computed as
    3.0000000000000133; a value within :data:`SOLVE_PRECISION` (relative) of the budget meets it."""
    return epsilon > budget + SOLVE_PRECISION * max(1.0, abs(budget))


def _power(
    budget: float,
    row: AuditRow,
    settings: AuditSettings,
    reference: tuple[str, float] | None,
    mu: float | None = None,
) -> str:
    """What more trials could show: for a Gaussian pair (``mu``: its exact trade-off curve G_μ), the
    trials its own shape needs; at a known ε otherwise (``reference``: its name, value), at least
    the (ε, δ) corner's, with what a Gaussian pair of that ε would need beside it; else at the
    audit's observed rates at its bound's threshold."""
    alpha, delta = settings.estimates.alpha, settings.delta
    cap = f"more than {2 * MAX_TRIALS_PER_SIDE:,} trials"
    if reference is not None and math.isfinite(reference[1]) and reference[1] > budget:
        name, eps = reference
        if mu is not None:
            need = _gaussian_need(budget, mu, alpha, delta)
            ends = (
                "" if need.startswith("more than") else " (fewer than the first number fall short, the second suffice)"
            )
            return (
                f"the pair being the Gaussian mechanism (mu = {mu:.4g}), audits with its optimal test "
                f"(corner-grid bound) need {need} for even odds of a lower bound above {budget:g}{ends}"
            )
        n = trials_to_certify(budget, *dp_corner(eps, delta), alpha=alpha, delta=delta)
        like = _gaussian_need(budget, 1.0 / analytic_gaussian_sigma(eps, delta), alpha, delta)
        return (
            f"if the pair's ε were {name} {_num(eps)}, an audit would need at least about "
            f"{cap if n is None else f'{n:,} trials'} (the most distinguishable pair of that ε, an optimal "
            f"test, corner-grid bound) for its lower bound to exceed {budget:g}; a Gaussian pair of that ε "
            f"needs {like} for even odds"
        )
    counts = row.lower_bound_counts
    if not counts.n_in or not counts.n_out:
        return "no observed rates to project"
    tpr, fpr = counts.tp / counts.n_in, counts.fp / counts.n_out
    n = trials_to_certify(budget, tpr, fpr, alpha=alpha, delta=delta)
    rates = f"at this audit's observed rates (TPR {tpr:.3f}, FPR {fpr:.3f} at the bound's threshold)"
    if n is None:
        if point_epsilon(tpr, fpr, delta) <= budget:
            return f"{rates} no number of trials certifies more than {budget:g}"
        return f"{rates} {cap} would be needed to certify more than {budget:g}"
    return f"{rates} about {n:,} trials would certify more than {budget:g}"


def epsilon_case(row: AuditRow, settings: AuditSettings, threshold: float | None) -> Case:
    """One ε row's case (its report's ``settings``), as the module says."""
    name = _eps_name(row.epsilon, settings.mechanism)
    confidence = settings.estimates.confidence
    lb = row.epsilon_lower_bound
    certified = (
        f"certified ε ≥ {_num(lb)} at confidence {confidence:g} ({row.lower_bound_method}; "
        f"point {_num(row.epsilon_point)}, TPR {_num(row.tpr)}, FPR {_num(row.fpr)}, "
        f"{row.n_in} IN / {row.n_out} OUT trials)"
    )
    if threshold is None:
        return Case(name, Outcome.PASS, certified.replace("certified ε ≥", "epsilon lower bound", 1))
    unit = epsilon_unit_text(settings.queries_per_trial)
    budget = f"budget {threshold:g}"
    kind = row.privacy_profile_kind
    exact = row.epsilon_exact if kind == "exact" else None  # the value itself (a closed form, enumerated)
    at_least = row.epsilon_pair_at_least if kind == "exact" else None  # the grid bracket's lower end
    upper = row.epsilon_upper_bound if kind is not None and exact is None else None
    guarantee = row.epsilon_per_trial  # null for the heuristic defences
    delta = settings.delta

    def case(outcome: Outcome, basis: Basis, says: str) -> Case:
        return Case(name, outcome, f"{outcome.value} ({basis.value}): {unit}: {says}", basis)

    if lb is not None and lb > threshold:
        note = f"; it contradicts the pair's exact ε {_num(exact)}" if exact is not None and lb > exact else ""
        return case(Outcome.FAIL, Basis.LOWER_BOUND, f"{certified} > {budget}{note}")
    if exact is not None and _above(exact, threshold):
        more = _power(threshold, row, settings, ("its exact value", exact), row.gaussian_mu)
        return case(
            Outcome.FAIL,
            Basis.EXACT,
            f"the audited pair's exact ε(δ={delta:g}) {_num(exact)} > {budget} "
            f"(no statistics involved); the trials {certified}; {more}",
        )
    bracket = f"[{_num(at_least)}, {_num(upper)}]" if at_least is not None else None
    if exact is None and at_least is not None and _above(at_least, threshold):
        more = _power(threshold, row, settings, ("at least", at_least))
        return case(
            Outcome.FAIL,
            Basis.PAIR_AT_LEAST,
            f"the audited pair's ε(δ={delta:g}) is at least {_num(at_least)} > {budget} (its exact profile, "
            f"computed on a grid: ε in {bracket}; no statistics involved); the trials {certified}; {more}",
        )
    if exact is not None:
        return case(
            Outcome.PASS, Basis.EXACT, f"the audited pair's exact ε(δ={delta:g}) {_num(exact)} ≤ {budget}; {certified}"
        )
    if upper is not None and not _above(upper, threshold):
        return case(
            Outcome.PASS,
            Basis.UPPER_BOUND,
            f"the audited pair's ε(δ={delta:g}) is at most {_num(upper)} "
            f"≤ {budget} ({row.privacy_profile_method}); {certified}",
        )
    contradicted = guarantee is not None and lb is not None and lb > guarantee
    if guarantee is not None and not _above(guarantee, threshold) and not contradicted:
        return case(
            Outcome.PASS,
            Basis.GUARANTEE,
            f"by the mechanism's guarantee: its theoretical ε(δ={delta:g}) "
            f"{_num(guarantee)}, composed over the trial's queries, ≤ {budget}, and the audit does not "
            f"contradict it ({certified})",
        )
    why = []
    if bracket is not None:
        why.append(f"the pair's ε lies in {bracket} (its exact profile, computed on a grid), which straddles {budget}")
    elif upper is not None:
        why.append(f"the pair's ε is only known to be at most {_num(upper)} > {budget}")
    elif kind is None:
        why.append("the pair's ε is not known (" + row.reasons.get("epsilon_upper_bound", "no profile") + ")")
    if contradicted:
        why.append(
            f"the audit contradicts the mechanism's guarantee ε {_num(guarantee)} (ε_lb is larger): it "
            "cannot be relied on"
        )
    elif guarantee is not None:
        why.append(f"the mechanism's guarantee ε {_num(guarantee)} > {budget}")
    else:
        why.append("the mechanism has no DP guarantee")
    proof = "no number of trials can prove a pass for this mechanism (a lower bound only ever proves a leak)"
    reference = ("its upper bound", upper) if upper is not None else ("the guarantee", guarantee) if guarantee else None
    more = _power(threshold, row, settings, reference)
    return case(
        Outcome.INCONCLUSIVE,
        Basis.NO_PROOF,
        f"{certified} ≤ {budget}, which proves nothing; {'; '.join(why)}; {proof}; {more}",
    )


def epsilon_cases(report: AuditReport, threshold: float | None) -> list[Case]:
    """One case per row of an audit report, :func:`epsilon_case`."""
    return [epsilon_case(row, report.settings, threshold) for row in report.rows]


def run_properties(identity: dict) -> dict[str, str]:
    """What produced the numbers, for the JUnit file: model hash and software versions (no paths, no text)."""
    model = identity.get("model") or {}
    software = identity.get("software") or {}
    props = {"model.sha256": model.get("sha256"), **{f"software.{k}": v for k, v in software.items()}}
    return {k: str(v) for k, v in props.items() if v is not None}


def score_verdict(
    keys, records: Iterable[ExampleResult], threshold: float | None, identity: dict, complete: bool = True
) -> Verdict:
    """The influence gate over a score run's example results (in ``keys`` order)."""
    units = identity.get("settings", {}).get("unit", "ngram") != "ngram"
    what = "unit's τ_u (and near-duplicate pair's τ_pair and cluster's τ_cluster)" if units else "n-gram's τ_i"
    gate = None if threshold is None else f"every {what} + its noise floor ≤ {threshold:g} nats"
    cases = influence_cases(zip(keys, records), threshold)
    return Verdict("ctxlite score", gate, cases, complete, run_properties(identity))


def audit_verdict(
    report: AuditReport, threshold: float | None, identity: dict, unit: EpsilonUnit | str = EpsilonUnit.TRIAL
) -> Verdict:
    """The ε gate over an audit report: a budget of ``threshold`` in ``unit`` (refused where it is per
    query and a trial composes several, :func:`check_epsilon_unit`)."""
    settings = report.settings
    gate = None
    if threshold is not None:
        check_epsilon_unit(unit, settings.queries_per_trial)
        gate = f"{epsilon_unit_text(settings.queries_per_trial)} at δ = {settings.delta:g} ≤ {threshold:g}"
    return Verdict("ctxlite audit", gate, epsilon_cases(report, threshold), True, run_properties(identity))
