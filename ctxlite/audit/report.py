"""An audit's result: one row of estimates per theoretical ε (:class:`AuditReport`), built from the
IN and OUT trial scores by :func:`report_row`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from ctxlite.audit.mechanisms import Mechanism
from ctxlite.audit.settings import AuditSettings, BoundKind
from ctxlite.errors import InvalidParameter
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
class AuditReport:
    """One row per theoretical ε plus what was audited.

    Row keys: ``epsilon`` (theoretical, per query, canary always present; null
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
    only then also ``epsilon_gdp_bound`` (null elsewhere, with the reason; logs
    before this change wrote it for every row), ``auroc`` (threshold-free),
    ``tpr_interpolated`` (the ROC hull at the FPR target: the best randomised
    test), ``accuracy_upper_bound`` (a confidence limit on any threshold
    test's balanced accuracy), ``epsilon_upper_bound`` (classification: the
    audited pair's own ε at δ from the model's exact answer distributions,
    the most a valid ``epsilon_lower_bound`` can reach; with the
    ``privacy_profile`` [[δ, ε], ...], ``privacy_profile_method`` and
    ``privacy_profile_kind``: "exact", or "upper bound" for rnm, whose
    profile is that of its canary ensemble's noisy vote and caps the noisy
    histogram's from above), ``epsilon_exact`` (the same ε where the profile
    is exact, else null with a reason), ``audit_tightness`` = ε_lb / ε_exact
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

    settings: dict
    canary: dict
    query: dict
    rows: list[dict]
    epsilon_kind: str
    utility_metric: str
    private_size: int
    forward_passes: int = 0
    notes: list[str] = field(default_factory=list)
    format: dict | None = None  # the prompt format audited: name, text, hash, labels, chat
    example_prompt: str | None = None  # one Z = 1 prompt as the model reads it, the canary in [[CANARY]] marks
    first_reported_with: dict | None = None  # the bound method and confidence of the log's first report
    rereport_warning: str | None = None  # set when this report uses another method or confidence than that

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

    @classmethod
    def from_dict(cls, data: dict) -> AuditReport:
        """The inverse of :meth:`to_dict`: the rows' strict-JSON ``"inf"``/``"-inf"`` back to floats."""

        def loose(v):
            if v in ("inf", "-inf"):
                return float(v)
            if isinstance(v, dict):
                return {k: loose(x) for k, x in v.items()}
            return v

        return cls(**{**data, "rows": [loose(r) for r in data["rows"]]})

    def table(self) -> str:
        """A readable table of the rows; an estimate that could not be formed prints n/a, with its reason below."""
        sub = self.settings.get("accounting_queries") is not None
        head = (
            f"{'eps':>6} {'eps/trial':>9} {'sigma':>7} {'acc*':>6} {'TPR':>6} {'FPR':>6} {'eps_pt':>7} "
            f"{'eps_lb':>7} {'eps_max':>7} {'mu_lb':>6} {'AUROC':>6} {'gdp_est':>8} {'utility':>8}"
        )
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
            lines.append(
                " ".join(
                    [
                        f(r["epsilon"], 6, 2),
                        f(r["epsilon_per_trial"], 9, 2),
                        f(r["sigma"], 7),
                        f(r["audit_accuracy"], 6),
                        f(r["tpr"], 6),
                        f(r["fpr"], 6),
                        est(r, "epsilon_point", 7),
                        f(r["epsilon_lower_bound"], 7),
                        est(r, "epsilon_upper_bound", 7),
                        f(r.get("mu_lower_bound"), 6),
                        f(r.get("auroc"), 6),
                        est(r, "epsilon_gdp", 8),
                        f(r["utility"], 8),
                    ]
                    + ([f(r["epsilon_subsampled"], 7)] if sub else [])
                )
            )
        lines.append(
            f"acc* = audit accuracy with the threshold optimised on the same trials (optimistic); "
            f"eps_lb = Clopper-Pearson lower bound at {self.settings['confidence']:.2f} "
            f"({self.rows[0].get('lower_bound_method', 'split') if self.rows else 'split'}; the guarantee); "
            f"eps_max = the audited pair's eps at delta = {self.settings['delta']:g}, "
            f"{self._profile_kinds()} (the most a valid eps_lb can reach); "
            f"mu_lb = Gaussian-DP mu lower bound at the same confidence; "
            f"gdp_est = GDP estimate (model-based, not a bound); "
            f"theoretical eps: {self.epsilon_kind}"
            + (
                f"; eps_T = the same sigma subsampled over T = {self.settings['accounting_queries']} queries "
                f"at q = {self.settings['sampling_rate']:g}"
                if sub
                else ""
            )
        )
        names = {"epsilon_point": "eps_pt", "epsilon_gdp": "gdp_est", "epsilon_upper_bound": "eps_max"}
        for eps, key, why in missing:
            at = "-" if eps is None else ("inf" if math.isinf(eps) else f"{eps:g}")
            lines.append(f"n/a: {names[key]} at eps = {at}: {why}")
        return "\n".join(lines)

    def _profile_kinds(self) -> str:
        """How the rows' eps_max were computed: "exact", "an upper bound", or both, by theoretical ε."""
        kinds = {r.get("privacy_profile_kind") for r in self.rows} - {None}
        if kinds == {"exact"}:
            return "exact"
        if kinds == {"upper bound"}:
            return "an upper bound on it"
        if not kinds:
            return "not known"
        return "exact or an upper bound (see privacy_profile_kind)"


class PairReference(NamedTuple):
    """The audited pair's privacy profile from its known output distributions (None: not computable),
    how it was computed (or why not), and whether it is the release's exact profile or an upper bound."""

    profile: PairProfile | None
    how: str
    exact: bool = False


def _finite(x: float | None) -> float | None:
    """``x`` as a float if it is finite, else None (JSON null)."""
    return float(x) if x is not None and math.isfinite(x) else None


def _unbounded_reason(s: AuditSettings, n_out: int, tpr: float, fpr: float) -> str:
    """Why the plug-in / GDP estimate at the FPR target cannot be formed."""
    if n_out * s.fpr < 1:
        return (
            f"fewer than 1/FPR = {1 / s.fpr:g} OUT trials (n_out = {n_out}): no threshold can have an "
            f"empirical FPR in (0, {s.fpr:g}], so the estimate at that FPR is undefined; raise --trials"
        )
    if fpr == 0:
        return "no OUT trial scored at or above the threshold (empirical FPR 0): log(TPR/FPR) is unbounded"
    if tpr == 1:
        return "every IN trial scored at or above the threshold (empirical TPR 1): log(TNR/FNR) is unbounded"
    return "the estimate is not finite on these trials"  # pragma: no cover - the cases above are exhaustive


def selection(s: AuditSettings) -> ThresholdSelection:
    """The threshold selection the ``bound`` setting names, seeded by the audit's seed."""
    return {
        BoundKind.CORNER_GRID: CornerGrid(seed=s.seed),
        BoundKind.SPLIT: Split(s.split_fraction, s.seed),
        BoundKind.MULTI_SPLIT: MultiSplit(fraction=s.split_fraction, seed=s.seed),
        BoundKind.BONFERRONI: Bonferroni(),
    }[s.bound]


def bound_choice(s: AuditSettings) -> dict:
    """The report-only choices that decide ``epsilon_lower_bound``: the method (as rows name it) and the confidence."""
    return {"lower_bound_method": describe_selection(selection(s)), "confidence": s.confidence}


def first_bound_choice(first_end: dict | None) -> dict | None:
    """:func:`bound_choice` of a log's first report (its first end line), None if it was never reported.

    A report from before rows named their method gives ``lower_bound_method`` None (not compared)."""
    report = first_end.get("report") if isinstance(first_end, dict) else None
    if not isinstance(report, dict):
        return None
    rows = report.get("rows") or [{}]
    return {
        "lower_bound_method": rows[0].get("lower_bound_method"),
        "confidence": (report.get("settings") or {}).get("confidence"),
    }


def rereport_warning(first: dict | None, now: dict) -> str | None:
    """One line when a log first reported with one bound method or confidence is re-reported with another.

    Each method is a valid (1 - alpha) lower bound on its own, but the trials are the same: reporting
    whichever of several methods (or confidences) certifies most is a choice made after seeing them, and
    the maximum of K valid bounds holds only at 1 - K alpha. The first report's choice is the valid one."""
    if first is None:
        return None
    changed = [
        f"{what} {first[key]!r} -> {now[key]!r}"
        for key, what in (("lower_bound_method", "bound"), ("confidence", "confidence"))
        if first.get(key) is not None and first[key] != now[key]
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
) -> dict:
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
    t = auditor.threshold_at_fpr(s.fpr)
    tpr, fpr = auditor.tpr_fpr(t)
    chosen = selection(s)
    cp = auditor.epsilon_clopper_pearson(alpha=s.alpha, delta=s.delta, selection=chosen)
    gdp = auditor.mu_lower_bound(alpha=s.alpha, delta=s.delta, selection=chosen)
    dp = s.mechanism.is_dp
    if dp and mech.sigma > 0:
        per_trial = gdp_epsilon(math.sqrt(s.queries_per_trial) * mech.sensitivity / mech.sigma, s.delta)
    else:
        per_trial = math.inf if dp else None
    subsampled = None
    if s.accounting_queries is not None:
        subsampled = subsampled_gaussian_epsilon(
            mech.sigma, mech.add_remove_sensitivity, s.sampling_rate, s.accounting_queries, s.delta
        )
    # estimates that cannot be formed are null with a reason (never inf/NaN in the JSON)
    reasons = {}
    estimates = {
        "epsilon_point": auditor.epsilon_point(s.fpr, s.delta),
        "epsilon_gdp": auditor.epsilon_gdp(s.delta, s.fpr),
    }
    for key, value in estimates.items():
        if n_out * s.fpr < 1 or not math.isfinite(value):
            estimates[key] = None
            reasons[key] = _unbounded_reason(s, n_out, tpr, fpr)
    no_call = "no observed score has empirical FPR <= {:g}: the threshold is +inf (no trial called present)"
    if not math.isfinite(t):
        reasons["threshold"] = no_call.format(s.fpr)
    if not math.isfinite(cp.threshold):
        reasons["lower_bound_threshold"] = "the best threshold was +inf (no trial called present); the bound at it is 0"
    pair = _pair_fields(s.delta, cp.epsilon, known, reasons)
    profile = known.profile if known is not None else None
    mu = (profile.gaussian_mu if profile is not None and known.exact else None) if known is not None else gaussian_mu
    gdp_fields = _gdp_fields(gdp.epsilon, mu, reasons)
    row = {
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
        "lower_bound_method": describe_selection(chosen),
        "lower_bound_counts": {
            "tp": cp.true_positives,
            "n_in": cp.n_in,
            "fp": cp.false_positives,
            "n_out": cp.n_out,
            "threshold": _finite(cp.threshold),
        },
        "confidence": s.confidence,
        "mu_lower_bound": gdp.mu,
        **gdp_fields,
        "auroc": auditor.auroc(),
        "tpr_interpolated": auditor.tpr_at_fpr_interpolated(s.fpr),
        "accuracy_upper_bound": auditor.accuracy_upper_bound(s.alpha),
        "epsilon_gdp": estimates["epsilon_gdp"],
        "epsilon_gdp_kind": "model-based estimate, not a bound",
        **pair,
        "reasons": reasons,
        "epsilon_subsampled": subsampled,
        "accounting": None
        if subsampled is None
        else {
            "queries": s.accounting_queries,
            "sampling_rate": s.sampling_rate,
            "sensitivity_add_remove": mech.add_remove_sensitivity,
            "accountant": "dp_accounting PLD",
        },
        "utility": utility,
        "withheld_rate": _withheld_rate(s, withheld),
        "utility_chance": list(utility_chance) if utility_chance is not None else None,
    }
    row["contradictions"] = contradictions(row, utility_chance)
    return row


ESTIMATES = ("epsilon_point", "epsilon_gdp", "epsilon_from_mu_lb")
"""The row's ε estimates (no bound among them) that :func:`contradictions` holds against the pair's ε."""


def contradictions(row: dict, utility_chance: tuple[float, int] | None = None) -> list[str]:
    """One line for each number in ``row`` that contradicts another, so none is quoted unread:

    * an ε estimate (point, GDP, the GDP conversion of mu_lower_bound) above the audited pair's
      ε (exact, or an upper bound): no test can exceed the pair's ε, so the estimate is noise
      (few trials at the FPR target) or a wrong model (the GDP curve is not the pair's);
    * classification utility below a uniform guess (1/labels) by more than chance explains
      (binomial lower tail < 1 %): the answers are worse than guessing, e.g. labels misread.
    """
    out = []
    at = "" if row.get("epsilon") is None else f" at theoretical eps = {row['epsilon']:g}"
    ceiling = row.get("epsilon_upper_bound")
    if ceiling is not None and math.isfinite(ceiling):
        kind = row.get("privacy_profile_kind") or "exact"
        for key in ESTIMATES:
            value = row.get(key)
            if value is not None and value > ceiling + 1e-9:
                out.append(
                    f"{key} = {value:.4g}{at} exceeds the audited pair's {kind} eps = {ceiling:.4g}: no test can "
                    "do that, so this estimate is noise or assumes the wrong trade-off curve; do not quote it"
                )
    utility = row.get("utility")
    if utility_chance is not None and utility is not None:
        chance, n = utility_chance
        from scipy import stats

        if utility < chance and stats.binom.cdf(round(utility * n), n, chance) < 0.01:
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

    ``epsilon_upper_bound`` is the pair's ε(δ) whenever a profile is known; ``epsilon_exact`` and
    ``audit_tightness`` only when that profile is the release's exact one, and
    ``audit_tightness_at_least`` (a lower bound on the true ratio) when it is an upper bound."""
    profile = known.profile if known is not None else None
    eps = profile.epsilon(delta) if profile is not None else None
    exact = profile is not None and known.exact
    out = {
        "epsilon_upper_bound": eps,
        "epsilon_exact": eps if exact else None,
        "privacy_profile_kind": None if profile is None else ("exact" if exact else "upper bound"),
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
    if not exact:
        reasons["epsilon_exact"] = f"only an upper bound on the pair's epsilon is known: {known.how}"
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
    key = "audit_tightness" if pair.get("privacy_profile_kind") == "exact" else "audit_tightness_at_least"
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
