"""An audit's result: one row of estimates per theoretical ε (:class:`AuditReport`), built from the
IN and OUT trial scores by :func:`report_row`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from types import UnionType
from typing import Literal, NamedTuple, Union, get_args, get_origin, get_type_hints

from ctxlite.audit.canaries import Canary
from ctxlite.audit.mechanisms import Mechanism
from ctxlite.audit.queries import AuditQuery
from ctxlite.audit.settings import AuditSettings, BoundKind, EstimateSettings
from ctxlite.errors import InvalidParameter
from ctxlite.logformat import ROW_FIELDS_ADDED, finite_or_inf, strict, upgrade_report
from ctxlite.privacy.calibration import subsampled_gaussian_epsilon
from ctxlite.privacy.estimators import (
    Bonferroni,
    CanaryScoreAuditor,
    CornerGrid,
    MultiSplit,
    Split,
    ThresholdSelection,
    describe_selection,
    gdp_epsilon,
)
from ctxlite.privacy.privacy_profile import PairProfile


@dataclass
class BoundCounts:
    """The counts the lower bound was formed from: true positives of ``n_in`` IN trials, false
    positives of ``n_out`` OUT trials, at the chosen ``threshold`` (None: +inf, no trial called present)."""

    tp: int
    n_in: int
    fp: int
    n_out: int
    threshold: float | None

    def to_dict(self) -> dict:
        return {"tp": self.tp, "n_in": self.n_in, "fp": self.fp, "n_out": self.n_out, "threshold": self.threshold}

    @classmethod
    def from_dict(cls, d: dict) -> BoundCounts:
        return cls(d["tp"], d["n_in"], d["fp"], d["n_out"], d["threshold"])


@dataclass
class Accounting:
    """The subsampled accounting of a row's σ: T ``queries`` at Poisson ``sampling_rate``, the add/remove
    sensitivity, the accountant."""

    queries: int
    sampling_rate: float
    sensitivity_add_remove: float
    accountant: str = "dp_accounting PLD"

    def to_dict(self) -> dict:
        return {
            "queries": self.queries,
            "sampling_rate": self.sampling_rate,
            "sensitivity_add_remove": self.sensitivity_add_remove,
            "accountant": self.accountant,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Accounting:
        return cls(d["queries"], d["sampling_rate"], d["sensitivity_add_remove"], d["accountant"])


GRID_WAS_EXACT = (
    "written before exact values were told from grid ones: the log's epsilon_exact was the grid's value, "
    "rounded up, read as an upper bound (re-run the audit for the exact value)"
)
"""The reason an older row's ``epsilon_exact`` is read as an upper bound only."""


@dataclass
class AuditRow:
    """The estimates at one theoretical ε of an audit: ``epsilon`` (theoretical, per query, canary always present; null
    without a DP mechanism: plain ICL or a heuristic defense), ``epsilon_per_trial`` (composed over the trial's
    queries), ``sigma``, ``sensitivity``, ``n_in``/``n_out``,
    ``audit_accuracy`` (threshold optimised on the same trials:
    **optimistic**), ``threshold``/``tpr``/``fpr`` at the empirical FPR
    target, ``epsilon_point`` (plug-in at that FPR, an estimate),
    ``epsilon_lower_bound`` (Clopper--Pearson at ``confidence``, the
    threshold chosen by the ``bound`` setting, named in
    ``lower_bound_method``: the **guarantee**, Jagielski et al. 2020),
    ``mu_lower_bound`` (a lower bound on the GDP parameter mu at the same
    confidence, same selection) with ``epsilon_from_mu_lb``, its ε at δ, and
    ``epsilon_from_mu_lb_kind``: a lower bound only where the audited release
    is provably the Gaussian mechanism (``gaussian_mu``, its exact μ), and
    only then also ``epsilon_gdp_bound`` (null elsewhere, with the reason), ``auroc`` (threshold-free),
    ``tpr_interpolated`` (the ROC hull at the FPR target: the best randomised
    test), ``accuracy_upper_bound`` (a confidence limit on any threshold
    test's balanced accuracy), ``epsilon_upper_bound`` (classification: the
    audited pair's own ε at δ from the model's exact answer distributions,
    the most a valid ``epsilon_lower_bound`` can reach; with the
    ``privacy_profile`` [[δ, ε], ...], ``privacy_profile_method`` and
    ``privacy_profile_kind``: "exact", or "upper bound" for rnm, whose
    profile is that of its canary ensemble's noisy vote and caps the noisy
    histogram's from above), ``epsilon_exact`` (the same ε where the profile
    is exact *and* its value is: the Gaussian mechanism's closed form, or a
    discrete release enumerated; else null with a reason),
    ``epsilon_pair_at_least`` (where the profile is exact: a lower bound on its ε,
    so that [epsilon_pair_at_least, epsilon_upper_bound] brackets the pair's ε;
    equal to ``epsilon_exact`` where that is known), ``audit_tightness`` = ε_lb / ε_exact
    (how much of the exact ε the trials certified) or, where only the upper
    bound is known, ``audit_tightness_at_least`` = ε_lb / ε_upper_bound (the
    true tightness is at least this), ``epsilon_gdp``,
    a **GDP estimate (model-based, not a bound)**: it assumes a Gaussian
    trade-off curve (Dong, Roth & Su 2022) and overshoots the true ε of a
    pure-ε mechanism (``epsilon_gdp_kind`` says so), ``utility``
    (accuracy or ROUGE-1 on held-out queries), ``withheld_rate`` (prompt-l2 and judge:
    the fraction of outputs the defence withheld in IN and in OUT trials) and, when
    ``accounting_queries`` T is set, ``epsilon_subsampled``: the same σ
    accounted over T queries that each Poisson-subsample the records at
    ``sampling_rate`` q (dp_accounting PLD, add/remove sensitivity √2 for
    RNM, 2C for ESA), i.e. the deployment's ε after T answers rather than the
    audited single release, and ``contradictions`` (:func:`contradictions`:
    an estimate above the pair's ε, utility below chance; also in the notes).

    An estimate that cannot be formed (e.g. fewer than 1/FPR OUT trials, or
    perfect separation at the threshold) is null, and ``reasons`` maps its key
    to why; so is a +inf threshold. ``format`` and ``example_prompt`` show exactly which
    deployment was audited. Only theoretical ε of a σ = 0 setting
    are infinite; :meth:`to_dict` writes them as the string ``"inf"``.
    ``first_reported_with`` is the bound method and confidence of the trial
    log's first report (this one's, for a fresh run); ``rereport_warning`` says
    when this report differs from it (:func:`rereport_warning`).
    """

    epsilon: float | None
    epsilon_per_trial: float | None
    sigma: float | None
    sensitivity: float | None
    n_in: int
    n_out: int
    audit_accuracy: float
    threshold: float | None
    tpr: float
    fpr: float
    epsilon_point: float | None
    epsilon_lower_bound: float
    lower_bound_method: str
    lower_bound_counts: BoundCounts
    confidence: float
    mu_lower_bound: float
    epsilon_gdp_bound: float | None
    epsilon_from_mu_lb: float | None
    epsilon_from_mu_lb_kind: str
    gaussian_mu: float | None
    auroc: float
    tpr_interpolated: float
    accuracy_upper_bound: float
    epsilon_gdp: float | None
    epsilon_gdp_kind: str
    epsilon_upper_bound: float | None
    epsilon_exact: float | None
    privacy_profile_kind: str | None
    privacy_profile_method: str | None
    privacy_profile: list[list[float]] | None
    audit_tightness: float | None
    audit_tightness_at_least: float | None
    reasons: dict[str, str]
    epsilon_subsampled: float | None
    accounting: Accounting | None
    utility: float | None
    withheld_rate: dict[str, float | None] | None
    utility_chance: list | None
    contradictions: list[str] = field(default_factory=list)
    epsilon_pair_at_least: float | None = None

    def to_dict(self) -> dict:
        """The log form (strict JSON: ±inf as ``"inf"``/``"-inf"``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["lower_bound_counts"] = self.lower_bound_counts.to_dict()
        out["accounting"] = None if self.accounting is None else self.accounting.to_dict()
        for name in ROW_FIELDS_ADDED:  # absent where not computed, as in a row written before it
            if out[name] is None and not (name == "epsilon_pair_at_least" and self.privacy_profile_kind == "exact"):
                del out[name]  # (an exact profile's row always has it: its absence marks an older row)
        return strict(out)

    @classmethod
    def from_dict(cls, d: dict) -> AuditRow:
        """The inverse of :meth:`to_dict` (strict JSON's ``"inf"`` read back as a float, in the
        numeric fields only: a text field holding the word "inf" stays text)."""
        if "epsilon_pair_at_least" not in d and d.get("privacy_profile_kind") == "exact" and d.get("epsilon_exact"):
            # written before exact values were told from grid ones: its "exact" ε is the grid's, rounded
            # up (1.000184 for a Gaussian pair of ε 1): an upper bound, which no gate fails on
            reasons = {**(d.get("reasons") or {}), "epsilon_exact": GRID_WAS_EXACT}
            tight = {"audit_tightness": None, "audit_tightness_at_least": d.get("audit_tightness")}  # ε_lb / it
            d = {**d, "epsilon_exact": None, **tight, "reasons": reasons}
        d = {name: None for name in ROW_FIELDS_ADDED if name not in d} | d  # a row written before them
        values = {f.name: d[f.name] if f.name in _TEXT_FIELDS else _loose(d[f.name]) for f in fields(cls)}
        values["lower_bound_counts"] = BoundCounts.from_dict(values["lower_bound_counts"])
        values["accounting"] = None if values["accounting"] is None else Accounting.from_dict(values["accounting"])
        return cls(**values)


def _holds_text_only(annotation) -> bool:
    """Whether every value a field of this type holds is text or None (str, ``str | None``,
    ``dict[str, str]``, ``list[str]``, …): strict JSON's ``"inf"`` never stands for a number there.
    An unparameterised container or any other type may hold a number."""
    if annotation is str or annotation is type(None):
        return True
    args = get_args(annotation)
    if get_origin(annotation) is Literal:
        return all(isinstance(a, str) for a in args)
    return bool(args) and get_origin(annotation) in (Union, UnionType, list, dict) and all(map(_holds_text_only, args))


_TEXT_FIELDS = frozenset(name for name, tp in get_type_hints(AuditRow).items() if _holds_text_only(tp))
"""The fields of an audit row that hold only text, read back as written."""


def _loose(v):
    """A strict-JSON value with its ``"inf"``/``"-inf"`` read back as floats, recursively."""
    if isinstance(v, str):
        return finite_or_inf(v)
    if isinstance(v, dict):
        return {k: _loose(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_loose(x) for x in v]
    return v


@dataclass(frozen=True)
class BoundChoice:
    """The report-only choices that decide ``epsilon_lower_bound``: the threshold selection (as rows
    name it) and the confidence."""

    lower_bound_method: str
    confidence: float

    def to_dict(self) -> dict:
        return {"lower_bound_method": self.lower_bound_method, "confidence": self.confidence}

    @classmethod
    def from_dict(cls, d: dict) -> BoundChoice:
        return cls(d["lower_bound_method"], d["confidence"])


@dataclass
class AuditReport:
    """An audit's result: one :class:`AuditRow` per theoretical ε, plus what was audited: the
    ``settings``, the ``canary``, the ``query``, what the rows' theoretical ε is (``epsilon_kind``),
    the utility metric, the private set's size, the model rows decoded (``forward_passes``),
    ``notes`` a reader must know, the prompt ``format`` (its identity: name, text, hash, labels,
    chat), one Z = 1 prompt as the model reads it (``example_prompt``, the canary in
    ``[[CANARY]]`` marks), the bound choice the log was first reported with, and a warning when
    this report uses another (:func:`rereport_warning`)."""

    settings: AuditSettings
    canary: Canary
    query: AuditQuery
    rows: list[AuditRow]
    epsilon_kind: str
    utility_metric: str
    private_size: int
    forward_passes: int = 0
    notes: list[str] = field(default_factory=list)
    format: dict | None = None
    example_prompt: str | None = None
    first_reported_with: BoundChoice | None = None
    rereport_warning: str | None = None

    def to_dict(self) -> dict:
        """The log form: strict JSON (``json.dumps(..., allow_nan=False)`` works; ±inf as ``"inf"``/``"-inf"``)."""
        return strict(
            {
                "settings": self.settings.params(),
                "canary": self.canary.to_dict(),
                "query": self.query.to_dict(),
                "rows": [r.to_dict() for r in self.rows],
                "epsilon_kind": self.epsilon_kind,
                "utility_metric": self.utility_metric,
                "private_size": self.private_size,
                "forward_passes": self.forward_passes,
                "notes": list(self.notes),
                "format": self.format,
                "example_prompt": self.example_prompt,
                "first_reported_with": None if self.first_reported_with is None else self.first_reported_with.to_dict(),
                "rereport_warning": self.rereport_warning,
            }
        )

    @classmethod
    def from_dict(cls, data: dict) -> AuditReport:
        """The inverse of :meth:`to_dict`."""
        first = data["first_reported_with"]
        return cls(
            settings=AuditSettings.from_params(data["settings"]),
            canary=Canary.from_dict(data["canary"]),
            query=AuditQuery.from_dict(data["query"]),
            rows=[AuditRow.from_dict(r) for r in data["rows"]],
            epsilon_kind=data["epsilon_kind"],
            utility_metric=data["utility_metric"],
            private_size=data["private_size"],
            forward_passes=data["forward_passes"],
            notes=list(data["notes"]),
            format=data["format"],
            example_prompt=data["example_prompt"],
            first_reported_with=None if first is None else BoundChoice.from_dict(first),
            rereport_warning=data["rereport_warning"],
        )


class PairReference(NamedTuple):
    """The audited pair's privacy profile from its known output distributions (None: not computable),
    how it was computed (or why not), and whether it is the release's exact profile or an upper bound."""

    profile: PairProfile | None
    how: str
    exact: bool = False


def _finite(x: float | None) -> float | None:
    """``x`` as a float if it is finite, else None (JSON null)."""
    return float(x) if x is not None and math.isfinite(x) else None


def _unbounded_reason(e: EstimateSettings, n_out: int, tpr: float, fpr: float) -> str:
    """Why the plug-in / GDP estimate at the FPR target cannot be formed."""
    if n_out * e.fpr < 1:
        return (
            f"fewer than 1/FPR = {1 / e.fpr:g} OUT trials (n_out = {n_out}): no threshold can have an "
            f"empirical FPR in (0, {e.fpr:g}], so the estimate at that FPR is undefined; raise --trials"
        )
    if fpr == 0:
        return "no OUT trial scored at or above the threshold (empirical FPR 0): log(TPR/FPR) is unbounded"
    if tpr == 1:
        return "every IN trial scored at or above the threshold (empirical TPR 1): log(TNR/FNR) is unbounded"
    return "the estimate is not finite on these trials"  # pragma: no cover - the cases above are exhaustive


def selection(s: AuditSettings) -> ThresholdSelection:
    """The threshold selection the ``bound`` estimate setting names, seeded by the audit's seed."""
    e = s.estimates
    return {
        BoundKind.CORNER_GRID: CornerGrid(seed=s.seed),
        BoundKind.SPLIT: Split(e.split_fraction, s.seed),
        BoundKind.MULTI_SPLIT: MultiSplit(fraction=e.split_fraction, seed=s.seed),
        BoundKind.BONFERRONI: Bonferroni(),
    }[e.bound]


def bound_choice(s: AuditSettings) -> BoundChoice:
    """The report-only choices that decide ``epsilon_lower_bound``: the method (as rows name it) and the confidence."""
    return BoundChoice(describe_selection(selection(s)), s.estimates.confidence)


def first_bound_choice(first_end: dict | None) -> BoundChoice | None:
    """:func:`bound_choice` of a log's first report (its first end line), None if it was never reported."""
    report = first_end.get("report") if isinstance(first_end, dict) else None
    if not isinstance(report, dict):
        return None
    row = AuditRow.from_dict(upgrade_report(report)["rows"][0])  # an older log's row read by its own rules
    return BoundChoice(row.lower_bound_method, row.confidence)


def rereport_warning(first: BoundChoice | None, now: BoundChoice) -> str | None:
    """One line when a log first reported with one bound method or confidence is re-reported with another.

    Each method is a valid (1 - alpha) lower bound on its own, but the trials are the same: reporting
    whichever of several methods (or confidences) certifies most is a choice made after seeing them, and
    the maximum of K valid bounds holds only at 1 - K alpha. The first report's choice is the valid one."""
    if first is None:
        return None
    changed = [
        f"{what} {getattr(first, key)!r} -> {getattr(now, key)!r}"
        for key, what in (("lower_bound_method", "bound"), ("confidence", "confidence"))
        if getattr(first, key) != getattr(now, key)
    ]
    if not changed:
        return None
    return (
        f"this log was first reported with another bound choice ({'; '.join(changed)}): each is valid alone, "
        "but the best of K reports of the same trials is guaranteed only at confidence 1 - K alpha, not "
        "the stated one; quote the first report's eps_lb"
    )


PROFILE_DELTAS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
"""Where the report gives the pair's privacy profile ε(δ) (beside the audit's own δ)."""


def report_row(
    s: AuditSettings,
    mech: Mechanism,
    eps: float,
    ins,
    outs,
    utility,
    withheld=None,
    known: PairReference | None = None,
    utility_chance: tuple[float, int] | None = None,
    gaussian_mu: float | None = None,
) -> AuditRow:
    """The estimates at one ε from the IN and OUT scores; ``withheld``: outputs the defence withheld per
    IN / OUT trial (reported as a rate per query for the filtering defences, prompt-l2 and judge);
    ``known``: the audited pair's privacy profile, exact or an upper bound (or None and why not);
    ``utility_chance``: (a uniform guess's accuracy, queries) for classification utility;
    ``gaussian_mu``: the pair's exact Gaussian μ as a log recorded it, where ``known`` is not at hand
    (a report recomputed without the model)."""
    n_in, n_out = len(ins), len(outs)
    if n_in < 2 or n_out < 2:
        raise InvalidParameter(f"too few trials per side to estimate anything (in={n_in}, out={n_out}): raise --trials")
    auditor = CanaryScoreAuditor(ins, outs)
    e = s.estimates
    t = auditor.threshold_at_fpr(e.fpr)
    tpr, fpr = auditor.tpr_fpr(t)
    chosen = selection(s)
    cp = auditor.epsilon_clopper_pearson(alpha=e.alpha, delta=s.delta, selection=chosen)
    gdp = auditor.mu_lower_bound(alpha=e.alpha, delta=s.delta, selection=chosen)
    dp = s.mechanism.is_dp
    if dp and mech.sigma > 0:
        per_trial = gdp_epsilon(math.sqrt(s.queries_per_trial) * mech.sensitivity / mech.sigma, s.delta)
    else:
        per_trial = math.inf if dp else None
    subsampled = None
    if e.accounting_queries is not None:
        subsampled = subsampled_gaussian_epsilon(
            mech.sigma, mech.add_remove_sensitivity, e.sampling_rate, e.accounting_queries, s.delta
        )
    # estimates that cannot be formed are null with a reason (never inf/NaN in the JSON)
    reasons = {}
    estimates = {
        "epsilon_point": auditor.epsilon_point(e.fpr, s.delta),
        "epsilon_gdp": auditor.epsilon_gdp(s.delta, e.fpr),
    }
    for key, value in estimates.items():
        if n_out * e.fpr < 1 or not math.isfinite(value):
            estimates[key] = None
            reasons[key] = _unbounded_reason(e, n_out, tpr, fpr)
    no_call = "no observed score has empirical FPR <= {:g}: the threshold is +inf (no trial called present)"
    if not math.isfinite(t):
        reasons["threshold"] = no_call.format(e.fpr)
    if not math.isfinite(cp.threshold):
        reasons["lower_bound_threshold"] = "the best threshold was +inf (no trial called present); the bound at it is 0"
    pair = _pair_fields(s.delta, cp.epsilon, known, reasons)
    profile = known.profile if known is not None else None
    mu = (profile.gaussian_mu if profile is not None and known.exact else None) if known is not None else gaussian_mu
    gdp_fields = _gdp_fields(gdp.epsilon, mu, reasons)
    row = AuditRow(
        epsilon=eps if dp else None,
        epsilon_per_trial=per_trial,
        sigma=mech.sigma if dp else None,
        sensitivity=mech.sensitivity,
        n_in=n_in,
        n_out=n_out,
        audit_accuracy=auditor.audit_accuracy(),
        threshold=_finite(t),
        tpr=tpr,
        fpr=fpr,
        epsilon_point=estimates["epsilon_point"],
        epsilon_lower_bound=cp.epsilon,
        lower_bound_method=describe_selection(chosen),
        lower_bound_counts=BoundCounts(cp.true_positives, cp.n_in, cp.false_positives, cp.n_out, _finite(cp.threshold)),
        confidence=e.confidence,
        mu_lower_bound=gdp.mu,
        **gdp_fields,
        auroc=auditor.auroc(),
        tpr_interpolated=auditor.tpr_at_fpr_interpolated(e.fpr),
        accuracy_upper_bound=auditor.accuracy_upper_bound(e.alpha),
        epsilon_gdp=estimates["epsilon_gdp"],
        epsilon_gdp_kind="model-based estimate, not a bound",
        **pair,
        reasons=reasons,
        epsilon_subsampled=subsampled,
        accounting=None
        if subsampled is None
        else Accounting(e.accounting_queries, e.sampling_rate, mech.add_remove_sensitivity),
        utility=utility,
        withheld_rate=_withheld_rate(s, withheld),
        utility_chance=list(utility_chance) if utility_chance is not None else None,
    )
    row.contradictions = contradictions(row, utility_chance)
    return row


def ceiling_kind(row: AuditRow) -> str | None:
    """What a row's ``epsilon_upper_bound`` is: "exact" where it is the pair's exact ε, "upper bound"
    where it bounds it (a profile that is an upper bound, or an exact profile whose ε is computed on
    a grid: the rounded-up end of its bracket), None where no profile is known."""
    kind = row.privacy_profile_kind
    if kind == "exact" and row.epsilon_exact is None and row.epsilon_upper_bound is not None:
        return "upper bound"
    return kind


ESTIMATES = ("epsilon_point", "epsilon_gdp", "epsilon_from_mu_lb")
"""The row's ε estimates (no bound among them) that :func:`contradictions` holds against the pair's ε."""


def contradictions(row: AuditRow, utility_chance: tuple[float, int] | None = None) -> list[str]:
    """One line for each number in ``row`` that contradicts another, so none is quoted unread:

    * an ε estimate (point, GDP, the GDP conversion of mu_lower_bound) above the audited pair's
      ε (exact, or an upper bound): no test can exceed the pair's ε, so the estimate is noise
      (few trials at the FPR target) or a wrong model (the GDP curve is not the pair's);
    * classification utility below a uniform guess (1/labels) by more than chance explains
      (binomial lower tail < 1 %): the answers are worse than guessing, e.g. labels misread.
    """
    out = []
    at = "" if row.epsilon is None else f" at theoretical eps = {row.epsilon:g}"
    ceiling = row.epsilon_upper_bound
    if ceiling is not None and math.isfinite(ceiling):
        kind = ceiling_kind(row) or "exact"
        for key in ESTIMATES:
            value = getattr(row, key)
            if value is not None and value > ceiling + 1e-9:
                out.append(
                    f"{key} = {value:.4g}{at} exceeds the audited pair's {kind} eps = {ceiling:.4g}: no test can "
                    "do that, so this estimate is noise or assumes the wrong trade-off curve; do not quote it"
                )
    utility = row.utility
    if utility_chance is not None and utility is not None:
        chance, n = utility_chance
        if utility < chance and _binom_cdf(round(utility * n), n, chance) < 0.01:
            out.append(
                f"utility {utility:.3g}{at} is below a uniform guess over the labels ({chance:.3g}) on {n} queries, "
                "beyond chance (p < 0.01): the answers are worse than guessing; check the format's labels"
            )
    return out


GDP_ESTIMATE_KIND = "estimate, not a bound: the release's trade-off curve is not provably Gaussian"


def _gdp_fields(eps_at_mu_lb: float, mu: float | None, reasons: dict) -> dict:
    """The ε of the Gaussian curve at ``mu_lower_bound``, and whether it bounds the release's ε.

    mu_lower_bound is a lower bound on the smallest μ for which the release is μ-GDP, for any
    mechanism. Its ε(δ) bounds the release's ε(δ) only if the release's trade-off curve *is* G_μ:
    a curve that is not Gaussian and sits below G_μ has a smaller ε(δ) (an RNM pair whose votes
    are not certain, p = [.9, .1] against q = [.2, .8] under N(0, I): exact ε(1e-5) 2.04, its
    tightest μ 0.963 converts to 4.19). So ``epsilon_gdp_bound`` is set only where the audited
    pair's exact profile is the Gaussian mechanism's (``gaussian_mu``); elsewhere the same number
    is ``epsilon_from_mu_lb``, kind "estimate, not a bound", and no gate reads it. ``mu``: the exact
    pair's Gaussian μ, or None where the release is not provably Gaussian."""
    value = _finite(eps_at_mu_lb)
    if mu is not None:
        kind = f"lower bound: the audited release is the Gaussian mechanism (trade-off curve G_mu, mu = {mu:.6g})"
        return {
            "epsilon_gdp_bound": value,
            "epsilon_from_mu_lb": value,
            "epsilon_from_mu_lb_kind": kind,
            "gaussian_mu": mu,
        }
    reasons["epsilon_gdp_bound"] = (
        "not a bound here: the audited release's trade-off curve is not provably Gaussian (only the "
        "Gaussian mechanism on a fixed pair is), and the GDP conversion over-states a non-Gaussian "
        "release's epsilon; the number is epsilon_from_mu_lb, an estimate"
    )
    return {
        "epsilon_gdp_bound": None,
        "epsilon_from_mu_lb": value,
        "epsilon_from_mu_lb_kind": GDP_ESTIMATE_KIND,
        "gaussian_mu": None,
    }


def _pair_fields(delta: float, eps_lb: float, known: PairReference | None, reasons: dict) -> dict:
    """The row's privacy-profile fields; a value that cannot be formed is null with its reason in ``reasons``.

    ``epsilon_upper_bound`` is the upper end of the pair's ε(δ) whenever a profile is known. Where
    that profile is the release's exact one, ``epsilon_pair_at_least`` is the lower end, and
    ``epsilon_exact`` the value where both ends are one (a closed form or an enumeration; a grid's
    rounded-up value is an upper bound, never called exact); ``audit_tightness`` where it is
    exact, ``audit_tightness_at_least`` (a lower bound on the true ratio) elsewhere."""
    profile = known.profile if known is not None else None
    lower, upper = profile.bracket(delta) if profile is not None else (None, None)
    exact_profile = profile is not None and known.exact
    exact = exact_profile and profile.is_exact
    out = {
        "epsilon_upper_bound": upper,
        "epsilon_pair_at_least": lower if exact_profile else None,
        "epsilon_exact": upper if exact else None,
        "privacy_profile_kind": None if profile is None else ("exact" if exact_profile else "upper bound"),
        "privacy_profile_method": known.how if profile is not None else None,
        "privacy_profile": None
        if profile is None
        else [list(x) for x in profile.curve(sorted({*PROFILE_DELTAS, delta}))],
        "audit_tightness": None,
        "audit_tightness_at_least": None,
    }
    if known is None:  # the caller did not ask for it: nothing is missing
        return out
    if profile is None:
        reasons["epsilon_upper_bound"] = reasons["epsilon_exact"] = known.how
        return out
    if not exact_profile:
        reasons["epsilon_exact"] = f"only an upper bound on the pair's epsilon is known: {known.how}"
        reasons["epsilon_pair_at_least"] = "the profile is an upper bound on the release's: no lower end"
    elif not exact:
        reasons["epsilon_exact"] = (
            f"the pair's epsilon is {profile.method}: it lies in [{lower:.6g}, {upper:.6g}] "
            "(epsilon_pair_at_least, epsilon_upper_bound), the upper end an upper bound, not the exact value"
        )
    if not exact:
        reasons["audit_tightness"] = "the pair's exact epsilon is not known: see audit_tightness_at_least"
    return {**out, **tightness_fields(eps_lb, out, reasons)}


def tightness_fields(eps_lb: float, pair: dict, reasons: dict) -> dict:
    """``audit_tightness`` = ε_lb / ε_exact where the row's profile (``pair``: its profile fields) is
    exact, else ``audit_tightness_at_least`` = ε_lb / ε_upper_bound (the true tightness is at least
    this); a ratio that cannot be formed is None, its reason added to ``reasons``."""
    out = {"audit_tightness": None, "audit_tightness_at_least": None}
    if pair.get("epsilon_upper_bound") is None:
        return out
    eps = float(pair["epsilon_upper_bound"])  # "inf" in a report read back
    exact = pair.get("privacy_profile_kind") == "exact" and pair.get("epsilon_exact") is not None
    key = "audit_tightness" if exact else "audit_tightness_at_least"
    if 0 < eps < math.inf:
        out[key] = eps_lb / eps
    else:
        reasons[key] = f"the pair's epsilon is {eps:g}: no ratio"
    return out


def _withheld_rate(s: AuditSettings, withheld) -> dict | None:
    """Fraction of released outputs the filtering defence withheld, over IN and over OUT trials."""
    if withheld is None or s.mechanism.value not in ("prompt-l2", "judge"):
        return None
    return {
        side: (sum(counts) / (len(counts) * s.queries_per_trial) if counts else None)
        for side, counts in withheld.items()
    }


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P[Bin(n, p) <= k]; scipy.stats imported on first use (~0.5 s of every command's start)."""
    from scipy import stats

    return float(stats.binom.cdf(k, n, p))
