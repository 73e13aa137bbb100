"""Privacy estimators for canary (membership-inference) audits.

Pure numpy/scipy; no model code. An audit produces one score per trial: trials
run *with* the canary give ``in_scores``, trials *without* it give
``out_scores``; a higher score means "the canary was present". Thresholding the
scores is a hypothesis test, and any test's true/false positive rates bound the
privacy parameters of the mechanism that produced the scores: an
(epsilon, delta)-DP mechanism forces TPR <= e^epsilon * FPR + delta and
TNR <= e^epsilon * FNR + delta (Kairouz, Oh & Viswanath 2015, "The composition
theorem for differential privacy"). Inverting those inequalities turns measured
rates into epsilon estimates:

* :func:`point_epsilon` -- the plug-in estimate (no confidence, optimistic);
* :func:`clopper_pearson_epsilon` -- a (1 - alpha)-confidence lower bound from
  exact binomial intervals (Jagielski, Ullman & Oprea 2020, "Auditing
  differentially private machine learning: how private is private SGD?");
* :func:`gdp_mu` / :func:`gdp_epsilon` -- fit a Gaussian-DP trade-off curve
  through one (TPR, FPR) point (Dong, Roth & Su 2022, "Gaussian differential
  privacy", Corollary 2.13; Nasr et al. 2023, "Tight auditing of DP ML"): a
  model-based estimate, not a bound (it overshoots on non-Gaussian curves);
* :func:`one_run_epsilon` -- many canaries in one run (Steinke, Nasr &
  Jagielski 2023, "Privacy auditing with one (1) training run").

:class:`CanaryScoreAuditor` wraps them around a pair of score arrays, in the
style of jax_privacy's ``auditing.py`` and TF-Privacy's ``epsilon_lower_bound.py``.
A threshold picked on the same data it is evaluated on inflates the bound, so
:meth:`CanaryScoreAuditor.epsilon_clopper_pearson` takes a typed selection mode:
:class:`Split`, :class:`Bonferroni` or :class:`Explicit`.

Threshold convention everywhere: a trial is called "canary present" when
``score >= threshold``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

from ctxlite.errors import InvalidParameter

__all__ = [
    "Split",
    "Bonferroni",
    "Explicit",
    "ThresholdSelection",
    "ClopperPearsonBound",
    "CanaryScoreAuditor",
    "point_epsilon",
    "clopper_pearson_epsilon",
    "gdp_mu",
    "gdp_delta",
    "gdp_epsilon",
    "one_run_epsilon",
]


# --------------------------------------------------------------------------
# validation helpers


def _check_real(name: str, value, *, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidParameter(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if math.isnan(value) or (not allow_inf and math.isinf(value)):
        raise InvalidParameter(f"{name} must be finite, got {value!r}")
    return value


def _check_open_unit(name: str, value) -> float:
    value = _check_real(name, value)
    if not 0.0 < value < 1.0:
        raise InvalidParameter(f"{name} must be in (0, 1), got {value!r}")
    return value


def _check_delta(value) -> float:
    value = _check_real("delta", value)
    if not 0.0 <= value < 1.0:
        raise InvalidParameter(f"delta must be in [0, 1), got {value!r}")
    return value


def _check_rate(name: str, value) -> float:
    value = _check_real(name, value)
    if not 0.0 <= value <= 1.0:
        raise InvalidParameter(f"{name} must be in [0, 1], got {value!r}")
    return value


def _check_count(name: str, value, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidParameter(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise InvalidParameter(f"{name} must be >= {minimum}, got {value!r}")
    return value


def _check_scores(name: str, scores) -> np.ndarray:
    try:
        arr = np.array(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"{name} must be an array of real numbers: {exc}") from None
    if arr.ndim != 1:
        raise InvalidParameter(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise InvalidParameter(f"{name} must not be empty")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise InvalidParameter(f"{name} must be finite; {name}[{bad[0]}] = {arr[bad[0]]!r}")
    arr.setflags(write=False)
    return arr


# --------------------------------------------------------------------------
# threshold-selection modes


@dataclass(frozen=True)
class Split:
    """Choose the threshold on a random part of the trials, bound on the rest.

    ``fraction`` of the IN trials and the same fraction of the OUT trials
    (drawn with ``numpy.random.default_rng(seed)``) select the threshold that
    maximises the Clopper--Pearson bound there; the bound is then computed at
    that threshold on the held-out trials only, with the full ``alpha``. The
    threshold is independent of the evaluation data, so no correction is needed.

    >>> Split(fraction=0.3, seed=7)
    Split(fraction=0.3, seed=7)
    """

    fraction: float = 0.5
    seed: int = 0

    def __post_init__(self):
        fraction = _check_real("Split.fraction", self.fraction)
        if not 0.0 < fraction < 1.0:
            raise InvalidParameter(f"Split.fraction must be in (0, 1), got {self.fraction!r}")
        _check_count("Split.seed", self.seed)

    def halves(self, n_in: int, n_out: int) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Trial indices ``((in_select, in_eval), (out_select, out_eval))``.

        Each side keeps round(fraction * n) trials (at least 1, at most n - 1)
        for selection, drawn by one ``default_rng(seed)`` permutation of the IN
        trials and then one of the OUT trials; the rest are evaluated. Depends
        on the sizes only, never on the scores.

        >>> [(a.tolist(), b.tolist()) for a, b in Split(0.5, seed=0).halves(4, 2)]
        [([2, 0], [1, 3]), ([1], [0])]
        """
        n_in = _check_count("n_in", n_in, minimum=2)
        n_out = _check_count("n_out", n_out, minimum=2)
        rng = np.random.default_rng(self.seed)

        def split(n: int) -> tuple[np.ndarray, np.ndarray]:
            n_sel = min(max(int(round(self.fraction * n)), 1), n - 1)
            perm = rng.permutation(n)
            return perm[:n_sel], perm[n_sel:]

        return split(n_in), split(n_out)


@dataclass(frozen=True)
class Bonferroni:
    """Use every trial for both choosing and bounding; correct alpha for the choice.

    Every candidate threshold is evaluated at level ``alpha / K`` and the best
    bound is reported. With ``thresholds`` given (fixed before looking at the
    data) ``K = len(thresholds)``. With ``thresholds=None`` the candidates are
    all observed scores and ``K = max(n_in, n_out)``: a rate bound can only fail
    at one of the n order statistics of its sample, and the k-th order
    statistic's true survival probability is Beta(k, n - k + 1) distributed, so
    a union over the n order statistics covers *every* threshold at once (the
    same argument as a simultaneous Clopper--Pearson band). When thresholds are
    given, ``K = min(len(thresholds), max(n_in, n_out))``.

    >>> Bonferroni()
    Bonferroni(thresholds=None)
    >>> Bonferroni(thresholds=(0.5, 1.0)).thresholds
    (0.5, 1.0)
    """

    thresholds: tuple[float, ...] | None = None

    def __post_init__(self):
        if self.thresholds is None:
            return
        try:
            values = tuple(float(t) for t in self.thresholds)
        except (TypeError, ValueError):
            raise InvalidParameter(
                f"Bonferroni.thresholds must be a sequence of numbers, got {self.thresholds!r}"
            ) from None
        if not values:
            raise InvalidParameter("Bonferroni.thresholds must not be empty")
        for t in values:
            if math.isnan(t):
                raise InvalidParameter(f"Bonferroni.thresholds contains NaN: {self.thresholds!r}")
        object.__setattr__(self, "thresholds", values)


@dataclass(frozen=True)
class Explicit:
    """Use a threshold fixed in advance (e.g. chosen on earlier, separate trials).

    >>> Explicit(threshold=2.5)
    Explicit(threshold=2.5)
    """

    threshold: float

    def __post_init__(self):
        object.__setattr__(self, "threshold", _check_real("Explicit.threshold", self.threshold, allow_inf=True))


ThresholdSelection = Split | Bonferroni | Explicit


@dataclass(frozen=True)
class ClopperPearsonBound:
    """Result of :meth:`CanaryScoreAuditor.epsilon_clopper_pearson`.

    ``epsilon`` is a lower bound on the mechanism's epsilon (at the given delta)
    that holds with probability ``confidence`` over the audit's randomness.
    The counts are those the bound was computed from: for :class:`Split` they
    are the held-out trials only. ``alpha_per_threshold`` is the level each
    candidate threshold was tested at (``alpha / K`` under Bonferroni).
    """

    epsilon: float
    threshold: float
    true_positives: int
    n_in: int
    false_positives: int
    n_out: int
    confidence: float
    alpha_per_threshold: float
    delta: float
    selection: ThresholdSelection


# --------------------------------------------------------------------------
# plain functions on rates and counts


def _log_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """log(num/den) with -inf for num <= 0 and +inf for num > 0 = den."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    pos = num > 0
    finite = np.log(np.where(pos, num, 1.0)) - np.log(np.where(den > 0, den, 1.0))
    return np.where(pos, np.where(den > 0, finite, np.inf), -np.inf)


def point_epsilon(tpr: float, fpr: float, delta: float = 0.0) -> float:
    """Plug-in epsilon from one test's true and false positive rates.

    An (epsilon, delta)-DP mechanism forces TPR <= e^eps * FPR + delta and
    TNR <= e^eps * FNR + delta (Kairouz et al. 2015), hence

        eps_hat = max(log((TPR - delta) / FPR), log((1 - FPR - delta) / (1 - TPR)), 0).

    A term whose numerator is <= 0 drops out; a term with a positive numerator
    over a zero rate (FPR = 0 or TPR = 1) is ``inf``: perfect separation on
    these trials. It is an estimate, not a bound (no sampling error allowed
    for); ContextLeak (seed 001, section 5) reports it at FPR = 0.1.

    >>> round(point_epsilon(0.5, 0.1), 4)      # log(5)
    1.6094
    >>> round(point_epsilon(0.5, 0.1, delta=1e-5), 4)
    1.6094
    >>> point_epsilon(0.3, 0.0)
    inf
    >>> point_epsilon(0.1, 0.2)
    0.0
    """
    tpr = _check_rate("tpr", tpr)
    fpr = _check_rate("fpr", fpr)
    delta = _check_delta(delta)
    a = _log_ratio(tpr - delta, fpr)
    b = _log_ratio(1.0 - fpr - delta, 1.0 - tpr)
    return float(max(a, b, 0.0))


def _cp_lower(k: np.ndarray, n: np.ndarray, a: float) -> np.ndarray:
    """One-sided (1 - a) Clopper--Pearson lower limit for k successes of n."""
    k = np.asarray(k)
    n = np.asarray(n)
    safe_k = np.maximum(k, 1)
    return np.where(k == 0, 0.0, special.betaincinv(safe_k, n - safe_k + 1, a))  # Beta(k, n-k+1) quantile


def _cp_upper(k: np.ndarray, n: np.ndarray, a: float) -> np.ndarray:
    """One-sided (1 - a) Clopper--Pearson upper limit for k successes of n."""
    k = np.asarray(k)
    n = np.asarray(n)
    safe_k = np.minimum(k, n - 1)
    return np.where(k == n, 1.0, special.betaincinv(safe_k + 1, n - safe_k, 1.0 - a))  # Beta(k+1, n-k) quantile


def clopper_pearson_epsilon_array(tp, n_in, fp, n_out, alpha: float, delta: float) -> np.ndarray:
    """Vectorised :func:`clopper_pearson_epsilon` (no validation)."""
    tp = np.asarray(tp)
    fp = np.asarray(fp)
    half = alpha / 2.0
    tpr_lo = _cp_lower(tp, n_in, half)
    fpr_hi = _cp_upper(fp, n_out, half)
    tnr_lo = _cp_lower(n_out - fp, n_out, half)
    fnr_hi = _cp_upper(n_in - tp, n_in, half)
    a = _log_ratio(tpr_lo - delta, fpr_hi)
    b = _log_ratio(tnr_lo - delta, fnr_hi)
    return np.maximum(np.maximum(a, b), 0.0)


def clopper_pearson_epsilon(tp: int, n_in: int, fp: int, n_out: int, alpha: float = 0.05, delta: float = 0.0) -> float:
    """Lower confidence bound on epsilon from a test's counts (Clopper--Pearson).

    ``tp`` of ``n_in`` canary-present trials and ``fp`` of ``n_out``
    canary-absent trials were called "present". Each rate gets an exact
    one-sided binomial (Clopper--Pearson) limit at level alpha/2, so all hold
    together with probability >= 1 - alpha:

        TPR_lo = BetaPPF(alpha/2; TP, n_in - TP + 1)      (0 if TP = 0)
        FPR_hi = BetaPPF(1 - alpha/2; FP + 1, n_out - FP) (1 if FP = n_out)

    and likewise TNR_lo (from the n_out - FP true negatives) and FNR_hi (from
    the n_in - TP false negatives). Plugging the pessimistic rates into the DP
    inequalities gives the bound

        eps_lb = max(log((TPR_lo - delta) / FPR_hi), log((TNR_lo - delta) / FNR_hi), 0).

    Valid only if the threshold that produced the counts did not depend on
    these trials (see :class:`Split`, :class:`Bonferroni`). Reference:
    Jagielski, Ullman & Oprea 2020; Nasr et al. 2021 ("Adversary instantiation").

    >>> round(clopper_pearson_epsilon(250, 500, 50, 500, alpha=0.05), 3)
    1.256
    >>> round(clopper_pearson_epsilon(900, 1000, 100, 1000), 3)
    1.99
    >>> round(clopper_pearson_epsilon(50, 100, 10, 100), 3)
    0.816
    """
    n_in = _check_count("n_in", n_in, minimum=1)
    n_out = _check_count("n_out", n_out, minimum=1)
    tp = _check_count("tp", tp)
    fp = _check_count("fp", fp)
    if tp > n_in:
        raise InvalidParameter(f"tp must be <= n_in = {n_in}, got {tp}")
    if fp > n_out:
        raise InvalidParameter(f"fp must be <= n_out = {n_out}, got {fp}")
    alpha = _check_open_unit("alpha", alpha)
    delta = _check_delta(delta)
    return float(clopper_pearson_epsilon_array(tp, n_in, fp, n_out, alpha, delta))


def gdp_mu(tpr: float, fpr: float) -> float:
    """Gaussian-DP parameter mu of the trade-off curve through (TPR, FPR).

    A mu-GDP mechanism's best test at false positive rate FPR has false
    negative rate FNR = Phi(Phi^-1(1 - FPR) - mu) (Dong, Roth & Su 2022), so
    one measured point gives

        mu = Phi^-1(1 - FPR) - Phi^-1(FNR),   FNR = 1 - TPR.

    ``inf`` when FPR = 0 or TPR = 1 (and TPR > FPR); 0 when TPR = FPR; negative
    when the test is worse than chance.

    >>> round(gdp_mu(0.5, 0.1), 4)
    1.2816
    >>> gdp_mu(0.3, 0.3)
    0.0
    """
    tpr = _check_rate("tpr", tpr)
    fpr = _check_rate("fpr", fpr)
    if tpr == fpr:
        return 0.0
    return float(stats.norm.isf(fpr) + stats.norm.ppf(tpr))


def gdp_delta(mu: float, epsilon: float) -> float:
    """delta(epsilon) of a mu-GDP mechanism (Dong, Roth & Su 2022, Cor. 2.13).

        delta(eps) = Phi(-eps/mu + mu/2) - e^eps * Phi(-eps/mu - mu/2).

    This is also the exact (eps, delta) curve of the Gaussian mechanism with
    sensitivity/sigma = mu (Balle & Wang 2018). Computed in log space
    (``scipy.special.log_ndtr``) so large epsilon does not overflow.

    >>> round(gdp_delta(1.0, 0.0), 4)     # total variation 2*Phi(1/2) - 1
    0.3829
    >>> f"{gdp_delta(1.2816, 5.849):.2e}"
    '1.00e-05'
    """
    mu = _check_real("mu", mu, allow_inf=True)
    epsilon = _check_real("epsilon", epsilon, allow_inf=True)
    if mu < 0:
        raise InvalidParameter(f"mu must be >= 0, got {mu!r}")
    if epsilon < 0:
        raise InvalidParameter(f"epsilon must be >= 0, got {epsilon!r}")
    return gdp_delta_unchecked(mu, epsilon)


def gdp_delta_unchecked(mu: float, epsilon: float) -> float:
    """``gdp_delta`` without argument checks, for callers that have checked them (root finding)."""
    if mu == 0.0 or math.isinf(epsilon):
        return 0.0
    if math.isinf(mu):
        return 1.0
    l1 = special.log_ndtr(-epsilon / mu + mu / 2.0)
    l2 = epsilon + special.log_ndtr(-epsilon / mu - mu / 2.0)
    if l2 >= l1:  # rounding only: the difference is a hockey-stick divergence >= 0
        return 0.0
    return float(math.exp(l1) * -math.expm1(l2 - l1))


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon with delta(epsilon) <= delta for a mu-GDP mechanism.

    Solves Phi(-eps/mu + mu/2) - e^eps * Phi(-eps/mu - mu/2) = delta for eps
    with Brent's method (the left side decreases in eps). mu <= 0 gives 0, as
    does any delta at or above the mechanism's total variation
    2*Phi(mu/2) - 1; mu = inf gives inf. Dong, Roth & Su 2022, Corollary 2.13.

    >>> round(gdp_epsilon(gdp_mu(0.5, 0.1), 1e-5), 3)
    5.849
    >>> gdp_epsilon(-0.3, 1e-5)
    0.0
    """
    mu = _check_real("mu", mu, allow_inf=True)
    delta = _check_open_unit("delta", delta)
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if gdp_delta_unchecked(mu, 0.0) <= delta:
        return 0.0
    hi = max(1.0, mu * mu)
    while gdp_delta_unchecked(mu, hi) > delta:
        hi *= 2.0
    return float(optimize.brentq(lambda e: gdp_delta_unchecked(mu, e) - delta, 0.0, hi, xtol=1e-13, rtol=1e-14))


def _one_run_p_value(epsilon: float, m: int, r: int, v: int, delta: float) -> float:
    q = special.expit(epsilon)
    p = stats.binom.sf(v - 1, r, q)  # P[Bin(r, q) >= v]
    if delta > 0 and v > 0:
        i = np.arange(1, v + 1)
        cdf_v = stats.binom.cdf(v - 1, r, q)
        window = cdf_v - stats.binom.cdf(v - i - 1, r, q)  # P[v > Bin >= v - i]
        p += 2.0 * m * delta * float(np.max(window / i))
    return float(min(p, 1.0))


def one_run_epsilon(m: int, r: int, v: int, alpha: float = 0.05, delta: float = 0.0) -> float:
    """Lower bound on epsilon from one run with many canaries (Steinke et al. 2023).

    ``m`` canaries are each included independently with probability 1/2; the
    auditor guesses "in"/"out" for ``r`` of them and ``v`` guesses are right.
    Under (eps, delta)-DP each guess is right with probability at most
    q = sigmoid(eps) = e^eps / (1 + e^eps), up to the delta slack, so

        p(eps) = P[Bin(r, q) >= v] + 2*m*delta * max_i P[v > Bin(r, q) >= v - i] / i

    is a p-value for "the mechanism is (eps, delta)-DP" (Steinke, Nasr &
    Jagielski 2023, "Privacy auditing with one (1) training run"). The bound
    is the largest eps with p(eps) <= alpha, found by bisection (0 if even
    eps = 0 is not rejected).

    >>> round(one_run_epsilon(1000, 100, 100), 3)
    3.493
    >>> one_run_epsilon(1000, 100, 50)
    0.0
    """
    m = _check_count("m", m, minimum=1)
    r = _check_count("r", r, minimum=1)
    v = _check_count("v", v)
    if r > m:
        raise InvalidParameter(f"r (guesses) must be <= m = {m} canaries, got {r}")
    if v > r:
        raise InvalidParameter(f"v (correct guesses) must be <= r = {r}, got {v}")
    alpha = _check_open_unit("alpha", alpha)
    delta = _check_delta(delta)

    def rejected(eps: float) -> bool:
        return _one_run_p_value(eps, m, r, v, delta) <= alpha

    if not rejected(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejected(hi):
        lo, hi = hi, 2.0 * hi
        if hi > 1e4:  # p-value never exceeds alpha: unbounded evidence
            return math.inf
    while hi - lo > 1e-10 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if rejected(mid):
            lo = mid
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------
# the auditor


class CanaryScoreAuditor:
    """Estimators over the scores of canary-present and canary-absent trials.

    ``in_scores``: one score per trial run with the canary; ``out_scores``:
    one per trial without it. Higher = "canary present"; a threshold t calls a
    trial present when ``score >= t``. The arrays are validated once here
    (1-D, finite, non-empty) and copied.

    >>> auditor = CanaryScoreAuditor([3.0, 2.5, 2.0, 1.0, 0.2], [1.5, 0.8, 0.5, 0.1, -1.0])
    >>> auditor.tpr_fpr(2.0)
    (0.6, 0.0)
    >>> auditor.audit_accuracy()
    0.8
    """

    def __init__(self, in_scores, out_scores):
        self._in = _check_scores("in_scores", in_scores)
        self._out = _check_scores("out_scores", out_scores)
        self._in_sorted = np.sort(self._in)
        self._out_sorted = np.sort(self._out)
        # candidate thresholds: every observed score, then +inf ("call nothing")
        self._candidates = np.append(np.unique(np.concatenate([self._in, self._out])), np.inf)

    @property
    def in_scores(self) -> np.ndarray:
        """Read-only scores of the canary-present trials."""
        return self._in

    @property
    def out_scores(self) -> np.ndarray:
        """Read-only scores of the canary-absent trials."""
        return self._out

    @property
    def n_in(self) -> int:
        return int(self._in.size)

    @property
    def n_out(self) -> int:
        return int(self._out.size)

    # -- counts ----------------------------------------------------------

    @staticmethod
    def _count_at_least(sorted_scores: np.ndarray, thresholds) -> np.ndarray:
        return sorted_scores.size - np.searchsorted(sorted_scores, thresholds, side="left")

    def _counts(self, thresholds) -> tuple[np.ndarray, np.ndarray]:
        return (
            self._count_at_least(self._in_sorted, thresholds),
            self._count_at_least(self._out_sorted, thresholds),
        )

    # -- rates -----------------------------------------------------------

    def tpr_fpr(self, threshold: float) -> tuple[float, float]:
        """(TPR, FPR) of the test ``score >= threshold``.

        TPR = fraction of in-scores >= threshold, FPR = fraction of
        out-scores >= threshold.

        >>> CanaryScoreAuditor([1, 2, 3, 4], [0, 1, 2, 5]).tpr_fpr(2)
        (0.75, 0.5)
        """
        threshold = _check_real("threshold", threshold, allow_inf=True)
        tp, fp = self._counts(threshold)
        return float(tp) / self.n_in, float(fp) / self.n_out

    def threshold_at_fpr(self, fpr: float) -> float:
        """Lowest candidate threshold whose empirical FPR is <= ``fpr``.

        Candidates are the observed scores and +inf. Since TPR only falls as
        the threshold rises, this threshold has the highest TPR among all
        thresholds with FPR <= ``fpr`` on these trials.

        >>> CanaryScoreAuditor([1, 2, 3, 4], [0, 1, 2, 5]).threshold_at_fpr(0.25)
        3.0
        """
        fpr = _check_rate("fpr", fpr)
        _, fp = self._counts(self._candidates)
        ok = fp / self.n_out <= fpr + 1e-12
        return float(self._candidates[int(np.argmax(ok))])

    def tpr_at_given_fpr(self, fpr: float) -> float:
        """Empirical TPR at :meth:`threshold_at_fpr` (the best TPR with FPR <= fpr).

        >>> CanaryScoreAuditor([1, 2, 3, 4], [0, 1, 2, 5]).tpr_at_given_fpr(0.25)
        0.5
        """
        return self.tpr_fpr(self.threshold_at_fpr(fpr))[0]

    def audit_accuracy(self) -> float:
        """Best balanced accuracy over all thresholds, chosen on these same trials.

        Accuracy of the guess "canary present iff score >= t" in the game where
        the canary is present with probability 1/2: (TPR + 1 - FPR) / 2 (equal
        to plain accuracy when n_in = n_out), maximised over t. This is what
        ContextLeak reports; because t is optimised on the data it is scored
        on, it is **optimistic** (biased upwards), never below 0.5.

        >>> CanaryScoreAuditor([1, 2, 3, 4], [0, 1, 2, 5]).audit_accuracy()  # t = 3: (0.5 + 0.75) / 2
        0.625
        """
        tp, fp = self._counts(self._candidates)
        acc = 0.5 * (tp / self.n_in + 1.0 - fp / self.n_out)
        return float(np.max(acc))

    # -- epsilon estimates -------------------------------------------------

    def epsilon_point(self, fpr: float = 0.1, delta: float = 0.0) -> float:
        """Plug-in epsilon at the threshold whose empirical FPR is <= ``fpr``.

        :func:`point_epsilon` of the (TPR, FPR) measured at
        :meth:`threshold_at_fpr`: max(log((TPR - delta)/FPR),
        log((1 - FPR - delta)/(1 - TPR)), 0), ``inf`` on perfect separation.
        An estimate with no confidence attached (ContextLeak, seed 001 section 5).

        >>> auditor = CanaryScoreAuditor([1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        ...                              [0, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 9.5])
        >>> auditor.tpr_fpr(auditor.threshold_at_fpr(0.1))
        (0.3, 0.1)
        >>> round(auditor.epsilon_point(fpr=0.1), 4)   # log(0.3 / 0.1)
        1.0986
        """
        delta = _check_delta(delta)
        tpr, fpr_emp = self.tpr_fpr(self.threshold_at_fpr(fpr))
        return point_epsilon(tpr, fpr_emp, delta)

    def epsilon_gdp(self, delta: float, fpr: float = 0.1) -> float:
        """Epsilon at ``delta`` of the Gaussian-DP curve through the measured point.

        Measures (TPR, FPR) at :meth:`threshold_at_fpr`, converts it to
        mu = Phi^-1(1 - FPR) - Phi^-1(1 - TPR) (:func:`gdp_mu`) and returns
        :func:`gdp_epsilon` (mu, delta). Assumes the mechanism's trade-off
        curve is Gaussian (true for the Gaussian mechanism; Nasr et al. 2023):
        a **model-based estimate, not a bound**, with no confidence. On a
        pure-epsilon mechanism (e.g. randomised response) the Gaussian curve
        through one measured point implies a larger epsilon at small delta,
        so it can exceed the true epsilon even with exact rates. ``inf``
        when FPR = 0 or TPR = 1 at the threshold.

        >>> auditor = CanaryScoreAuditor([1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        ...                              [0, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 9.5])
        >>> round(gdp_mu(0.3, 0.1), 4)                # Phi^-1(0.9) - Phi^-1(0.7)
        0.7572
        >>> round(auditor.epsilon_gdp(1e-5), 3)
        3.181
        """
        delta = _check_open_unit("delta", delta)
        tpr, fpr_emp = self.tpr_fpr(self.threshold_at_fpr(fpr))
        return gdp_epsilon(gdp_mu(tpr, fpr_emp), delta)

    def epsilon_clopper_pearson(
        self,
        alpha: float = 0.05,
        delta: float = 0.0,
        selection: ThresholdSelection = Split(),
    ) -> ClopperPearsonBound:
        """(1 - alpha)-confidence lower bound on epsilon (Clopper--Pearson).

        The threshold is chosen according to ``selection``:

        * :class:`Split` -- pick it on a random ``fraction`` of the trials
          (maximising the bound there), bound on the others with full alpha;
        * :class:`Bonferroni` -- every candidate on all trials at alpha / K,
          report the best;
        * :class:`Explicit` -- a threshold fixed in advance, full alpha.

        The bound at the chosen threshold is :func:`clopper_pearson_epsilon`.
        Jagielski, Ullman & Oprea 2020; Nasr et al. 2021.

        >>> rng = np.random.default_rng(0)
        >>> auditor = CanaryScoreAuditor(rng.normal(2.0, 1.0, 500), rng.normal(0.0, 1.0, 500))
        >>> res = auditor.epsilon_clopper_pearson(alpha=0.05, selection=Explicit(2.0))
        >>> (res.true_positives, res.false_positives, round(res.epsilon, 3), res.confidence)
        (238, 8, 2.624, 0.95)
        >>> round(auditor.epsilon_clopper_pearson(selection=Bonferroni()).epsilon, 3)
        2.475
        >>> round(auditor.epsilon_clopper_pearson(selection=Split(0.5, seed=1)).epsilon, 3)
        2.942
        """
        alpha = _check_open_unit("alpha", alpha)
        delta = _check_delta(delta)
        if isinstance(selection, Explicit):
            t = selection.threshold
            tp, fp = self._counts(t)
            eps = clopper_pearson_epsilon_array(tp, self.n_in, fp, self.n_out, alpha, delta)
            return ClopperPearsonBound(
                float(eps),
                t,
                int(tp),
                self.n_in,
                int(fp),
                self.n_out,
                1.0 - alpha,
                alpha,
                delta,
                selection,
            )
        if isinstance(selection, Bonferroni):
            k_max = max(self.n_in, self.n_out)
            if selection.thresholds is None:
                cands, k = self._candidates, k_max
            else:
                cands = np.asarray(selection.thresholds, dtype=np.float64)
                k = min(len(cands), k_max)
            a = alpha / k
            tp, fp = self._counts(cands)
            eps = clopper_pearson_epsilon_array(tp, self.n_in, fp, self.n_out, a, delta)
            best = int(np.argmax(eps))
            return ClopperPearsonBound(
                float(eps[best]),
                float(cands[best]),
                int(tp[best]),
                self.n_in,
                int(fp[best]),
                self.n_out,
                1.0 - alpha,
                a,
                delta,
                selection,
            )
        if isinstance(selection, Split):
            return self._split_bound(alpha, delta, selection)
        raise InvalidParameter(f"selection must be Split(...), Bonferroni(...) or Explicit(...), got {selection!r}")

    def _split_bound(self, alpha: float, delta: float, selection: Split) -> ClopperPearsonBound:
        if self.n_in < 2 or self.n_out < 2:
            raise InvalidParameter(f"Split needs >= 2 trials per side, got n_in={self.n_in}, n_out={self.n_out}")
        (in_s, in_e), (out_s, out_e) = selection.halves(self.n_in, self.n_out)
        in_sel, in_eval = np.sort(self._in[in_s]), np.sort(self._in[in_e])
        out_sel, out_eval = np.sort(self._out[out_s]), np.sort(self._out[out_e])
        # the threshold is chosen from in_sel / out_sel only (never the evaluation half)
        cands = np.append(np.unique(np.concatenate([in_sel, out_sel])), np.inf)
        tp_s = self._count_at_least(in_sel, cands)
        fp_s = self._count_at_least(out_sel, cands)
        eps_s = clopper_pearson_epsilon_array(tp_s, in_sel.size, fp_s, out_sel.size, alpha, delta)
        # ties in the selection bound (e.g. all zero): prefer the higher plug-in estimate
        pt_a = _log_ratio(tp_s / in_sel.size - delta, fp_s / out_sel.size)
        pt_b = _log_ratio(1.0 - fp_s / out_sel.size - delta, 1.0 - tp_s / in_sel.size)
        pt = np.maximum(pt_a, pt_b)
        best = int(np.lexsort((-pt, -eps_s))[0])
        t = float(cands[best])
        tp = int(self._count_at_least(in_eval, t))
        fp = int(self._count_at_least(out_eval, t))
        eps = clopper_pearson_epsilon_array(tp, in_eval.size, fp, out_eval.size, alpha, delta)
        return ClopperPearsonBound(
            float(eps),
            t,
            tp,
            int(in_eval.size),
            fp,
            int(out_eval.size),
            1.0 - alpha,
            alpha,
            delta,
            selection,
        )
