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
* :meth:`CanaryScoreAuditor.mu_lower_bound` -- a (1 - alpha) lower bound on
  the GDP parameter mu from Clopper--Pearson limits;
* the attack's ROC, its convex hull, the interpolated TPR at a fixed FPR,
  AUROC and an upper confidence limit on its accuracy.

Many canaries in one run are :mod:`ctxlite.privacy.one_run`'s.

:class:`CanaryScoreAuditor` wraps them around a pair of score arrays, in the
style of jax_privacy's ``auditing.py`` and TF-Privacy's ``epsilon_lower_bound.py``.
A threshold picked on the same data it is evaluated on inflates the bound, so
the bounds take a typed selection mode: :class:`Split`, :class:`MultiSplit`,
:class:`Bonferroni`, :class:`CornerGrid` or :class:`Explicit`.

Threshold convention everywhere: a trial is called "canary present" when
``score >= threshold``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
from scipy import special

from ctxlite.errors import InvalidParameter
from ctxlite.privacy.roots import brentq

__all__ = [
    "Split",
    "MultiSplit",
    "Bonferroni",
    "CornerGrid",
    "Explicit",
    "ThresholdSelection",
    "describe_selection",
    "ThresholdBound",
    "ClopperPearsonBound",
    "GdpBound",
    "CanaryScoreAuditor",
    "point_epsilon",
    "clopper_pearson_epsilon",
    "gdp_mu",
    "gdp_mu_lower_array",
    "gdp_delta",
    "gdp_epsilon",
]


# --------------------------------------------------------------------------
# validation helpers


def check_real(name: str, value, *, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidParameter(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if math.isnan(value) or (not allow_inf and math.isinf(value)):
        raise InvalidParameter(f"{name} must be finite, got {value!r}")
    return value


def check_open_unit(name: str, value) -> float:
    value = check_real(name, value)
    if not 0.0 < value < 1.0:
        raise InvalidParameter(f"{name} must be in (0, 1), got {value!r}")
    return value


def check_delta(value) -> float:
    value = check_real("delta", value)
    if not 0.0 <= value < 1.0:
        raise InvalidParameter(f"delta must be in [0, 1), got {value!r}")
    return value


def check_rate(name: str, value) -> float:
    value = check_real(name, value)
    if not 0.0 <= value <= 1.0:
        raise InvalidParameter(f"{name} must be in [0, 1], got {value!r}")
    return value


def check_count(name: str, value, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidParameter(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise InvalidParameter(f"{name} must be >= {minimum}, got {value!r}")
    return value


def check_scores(name: str, scores) -> np.ndarray:
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
        fraction = check_real("Split.fraction", self.fraction)
        if not 0.0 < fraction < 1.0:
            raise InvalidParameter(f"Split.fraction must be in (0, 1), got {self.fraction!r}")
        check_count("Split.seed", self.seed)

    def halves(self, n_in: int, n_out: int) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Trial indices ``((in_select, in_eval), (out_select, out_eval))``.

        Each side keeps round(fraction * n) trials (at least 1, at most n - 1)
        for selection, drawn by one ``default_rng(seed)`` permutation of the IN
        trials and then one of the OUT trials; the rest are evaluated. Depends
        on the sizes only, never on the scores.

        >>> [(a.tolist(), b.tolist()) for a, b in Split(0.5, seed=0).halves(4, 2)]
        [([2, 0], [1, 3]), ([1], [0])]
        """
        n_in = check_count("n_in", n_in, minimum=2)
        n_out = check_count("n_out", n_out, minimum=2)
        rng = np.random.default_rng(self.seed)

        def split(n: int) -> tuple[np.ndarray, np.ndarray]:
            n_sel = min(max(int(round(self.fraction * n)), 1), n - 1)
            perm = rng.permutation(n)
            return perm[:n_sel], perm[n_sel:]

        return split(n_in), split(n_out)


@dataclass(frozen=True)
class MultiSplit:
    """Many independent :class:`Split` s at alpha / 2 each; report their median.

    Split ``i`` (of ``splits``) draws its halves with seed
    ``SeedSequence([seed, i])``. If the median of the S bounds exceeded the
    true epsilon, at least S / 2 of them would; each does so with probability
    <= alpha / 2, so by Markov's inequality that happens with probability
    <= (S * alpha / 2) / (S / 2) = alpha (the median-aggregation rule of
    Meinshausen, Meier & Buehlmann 2009, Theorem 3.1, as in jax_privacy).
    One split's result depends on the luck of its draw; the median of many
    does not, at the price of half the level.

    >>> [s.seed for s in MultiSplit(splits=3, seed=0).members()]
    [2968811710, 3964924996, 3141116543]
    """

    splits: int = 25
    fraction: float = 0.5
    seed: int = 0

    def __post_init__(self):
        check_count("MultiSplit.splits", self.splits, minimum=1)
        Split(self.fraction, self.seed)  # the same checks as one split's

    def members(self) -> tuple[Split, ...]:
        """The splits, each with its own seed derived from (``seed``, its index)."""
        return tuple(
            Split(self.fraction, int(np.random.SeedSequence([self.seed, i]).generate_state(1)[0]))
            for i in range(self.splits)
        )


@dataclass(frozen=True)
class Bonferroni:
    """Use every trial for both choosing and bounding; correct alpha for the choice.

    Every candidate threshold is evaluated at level ``alpha / K`` (each of its
    two one-sided rate limits at ``alpha / 2K``) and the best bound is
    reported. With ``thresholds`` given (fixed before looking at the data)
    ``K = min(len(thresholds), (n_in + n_out) / 2)``; with ``thresholds=None``
    the candidates are all observed scores and ``K = (n_in + n_out) / 2``.

    Proof that K = (n_in + n_out) / 2 covers *every* threshold at once. The
    bound at t fails only if the FPR limit fails, S_out(t) > U(fp(t)), or the
    TPR limit fails, S_in(t) < L(tp(t)), where S(t) = P[score >= t]. Take the
    OUT side and a count m < n_out; the worst threshold with fp(t) = m lies
    just above the (m + 1)-th largest OUT score X, so "the limit fails at some
    t with fp(t) = m" implies P[score > X] > U(m). The set of x with
    P[score > x] > U(m) is a lower set whose complement has probability
    p >= U(m), and X falls in it only if at most m scores fall in the
    complement: probability P[Bin(n_out, p) <= m] <= a, by the definition of
    the Clopper--Pearson limit U at level a. Ties and atoms change nothing.
    So the OUT limits fail somewhere with probability <= n_out * a, the IN
    limits (mirror image, counts 1..n_in) <= n_in * a, and a = alpha / (n_in +
    n_out) per one-sided limit (= (alpha / K) / 2) keeps the total <= alpha.
    This is the union over order statistics behind a simultaneous
    Clopper--Pearson band; it allows (n_in + n_out) / 2 where a bound per side
    needs max(n_in, n_out).

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
class CornerGrid:
    """Bonferroni over a few ROC corners, fixed by their error counts rather than by the scores.

    The ε bound is largest at the ends of the ROC curve (few false positives,
    or few false negatives), so only those corners are tested: for each count
    c in the grid G(n) = {0, 1, then round(ratio^j)} up to n / 2,

    * corner A_c: the lowest threshold with at most c of the n_out OUT scores
      at or above it (the most true positives for <= c false positives);
    * corner B_c: the highest threshold with at most c of the n_in IN scores
      below it (the fewest false positives for <= c false negatives).

    K = |G(n_out)| + |G(n_in)| (14 at 100 trials a side, against 100 for
    :class:`Bonferroni`), and each corner is bounded at alpha / K.

    Ties are broken at random first (an independent uniform draw from
    ``default_rng(seed)`` orders equal scores): the test at a tied score then
    calls a random part of the tie "present", a randomised test. Appending
    independent noise to the scores is post-processing, so the randomised
    mechanism is at least as private and bounding it is valid; without it,
    discrete scores (labels, counts, bits) jump past the grid counts and a
    corner can fall on a threshold that calls nothing present.

    Proof. At A_c the bound uses the FPR limit U(c) >= U(fp(A_c)) (the grid
    count, not the observed one, which ties can make smaller). A_c lies above
    the (c + 1)-th largest OUT score X, so a failure S_out(A_c) > U(c) implies
    P[score > X] > U(c), which has probability <= a (the argument in
    :class:`Bonferroni`'s proof, for the one count c). Given the OUT scores,
    A_c is a fixed threshold, independent of the IN scores, so the TPR limit
    at A_c fails with probability <= a. B_c mirrors this with the sides
    swapped. 2K one-sided limits at a = alpha / 2K each: total <= alpha. The
    grid depends only on (n_in, n_out), never on the scores; a corner set
    chosen from the scores (e.g. the convex hull's vertices) would not have a
    fixed K.

    >>> CornerGrid().counts(100).tolist()
    [0, 1, 2, 4, 8, 16, 32]
    >>> CornerGrid(ratio=4).counts(100).tolist()
    [0, 1, 4, 16]
    """

    ratio: float = 2.0
    seed: int = 0

    def __post_init__(self):
        ratio = check_real("CornerGrid.ratio", self.ratio)
        if not ratio > 1.0:
            raise InvalidParameter(f"CornerGrid.ratio must be > 1, got {self.ratio!r}")
        check_count("CornerGrid.seed", self.seed)

    def ranks(self, in_scores: np.ndarray, out_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distinct ranks 0..n_in + n_out - 1 of the pooled scores, ties in a seeded random order.

        >>> [r.tolist() for r in CornerGrid(seed=0).ranks(np.array([1.0, 1.0]), np.array([0.0, 1.0]))]
        [[3, 2], [0, 1]]
        """
        scores = np.concatenate([in_scores, out_scores])
        tie_break = np.random.default_rng(self.seed).random(scores.size)
        order = np.argsort(scores, kind="stable")  # without ties, the lexsort's order at a tenth of its cost
        ordered = scores[order]
        if np.any(ordered[1:] == ordered[:-1]):
            order = np.lexsort((tie_break, scores))
        rank = np.empty(scores.size, dtype=np.int64)
        rank[order] = np.arange(scores.size)
        return rank[: in_scores.size], rank[in_scores.size :]

    def counts(self, n: int) -> np.ndarray:
        """The grid G(n): 0, 1 and the distinct round(ratio^j) up to n // 2 (at least {0})."""
        top = n // 2
        grid = {0, 1} if top >= 1 else {0}
        power = float(self.ratio)
        while round(power) <= top:
            grid.add(int(round(power)))
            power *= self.ratio
        return np.array(sorted(grid), dtype=np.int64)

    def k(self, n_in: int, n_out: int) -> int:
        """The Bonferroni K: the number of corners tested."""
        return int(self.counts(n_out).size + self.counts(n_in).size)


@dataclass(frozen=True)
class Explicit:
    """Use a threshold fixed in advance (e.g. chosen on earlier, separate trials).

    >>> Explicit(threshold=2.5)
    Explicit(threshold=2.5)
    """

    threshold: float

    def __post_init__(self):
        object.__setattr__(self, "threshold", check_real("Explicit.threshold", self.threshold, allow_inf=True))


ThresholdSelection = Split | MultiSplit | Bonferroni | CornerGrid | Explicit


def describe_selection(selection: ThresholdSelection) -> str:
    """One line naming a selection mode and its parameters, for reports.

    >>> describe_selection(Bonferroni())
    'Bonferroni over every observed score'
    """
    if isinstance(selection, Split):
        return f"split (threshold chosen on {selection.fraction:g} of the trials, seed {selection.seed})"
    if isinstance(selection, MultiSplit):
        return f"multi-split (median of {selection.splits} splits at alpha/2, fraction {selection.fraction:g})"
    if isinstance(selection, Bonferroni):
        what = "every observed score" if selection.thresholds is None else f"{len(selection.thresholds)} thresholds"
        return f"Bonferroni over {what}"
    if isinstance(selection, CornerGrid):
        return (
            f"corner grid (Bonferroni over ROC corners at error counts 0, 1, 2, 4, ..., ratio {selection.ratio:g}; "
            f"ties randomised, seed {selection.seed})"
        )
    if isinstance(selection, Explicit):
        return f"explicit threshold {selection.threshold:g}"
    raise InvalidParameter(f"not a threshold selection: {selection!r}")


@dataclass(frozen=True)
class ThresholdBound:
    """Where a bound was computed: the chosen threshold and the counts there.

    The counts are those the bound was computed from: for :class:`Split` they
    are the held-out trials only; for :class:`CornerGrid` the grid count stands
    in for the observed one on the side that fixed the corner.
    ``alpha_per_threshold`` is the level each candidate threshold was tested
    at (``alpha / K`` under Bonferroni and the corner grid). The bound holds
    with probability ``confidence`` over the audit's randomness.
    """

    threshold: float
    true_positives: int
    n_in: int
    false_positives: int
    n_out: int
    confidence: float
    alpha_per_threshold: float
    delta: float
    selection: ThresholdSelection


@dataclass(frozen=True)
class ClopperPearsonBound(ThresholdBound):
    """Result of :meth:`CanaryScoreAuditor.epsilon_clopper_pearson`: ``epsilon`` is a lower bound on the
    mechanism's epsilon at ``delta``."""

    epsilon: float


@dataclass(frozen=True)
class GdpBound(ThresholdBound):
    """Result of :meth:`CanaryScoreAuditor.mu_lower_bound`.

    ``mu``: with probability ``confidence``, the mechanism is *not* mu'-GDP
    for any mu' < mu. ``epsilon`` is the epsilon at ``delta`` of the mu-GDP
    curve: a lower bound on epsilon only for a mechanism whose privacy is a
    Gaussian trade-off curve (the Gaussian mechanism and its compositions);
    for others it is the GDP reading of the audit, not an (epsilon, delta)
    bound.
    """

    mu: float
    epsilon: float


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
    tpr = check_rate("tpr", tpr)
    fpr = check_rate("fpr", fpr)
    delta = check_delta(delta)
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
    n_in = check_count("n_in", n_in, minimum=1)
    n_out = check_count("n_out", n_out, minimum=1)
    tp = check_count("tp", tp)
    fp = check_count("fp", fp)
    if tp > n_in:
        raise InvalidParameter(f"tp must be <= n_in = {n_in}, got {tp}")
    if fp > n_out:
        raise InvalidParameter(f"fp must be <= n_out = {n_out}, got {fp}")
    alpha = check_open_unit("alpha", alpha)
    delta = check_delta(delta)
    return float(clopper_pearson_epsilon_array(tp, n_in, fp, n_out, alpha, delta))


def gdp_mu_lower_array(tp, n_in, fp, n_out, alpha: float) -> np.ndarray:
    """Vectorised mu lower bound of :meth:`CanaryScoreAuditor.mu_lower_bound` (no validation).

    max(Phi^-1(TPR_lo) - Phi^-1(FPR_hi), 0), each limit one-sided at alpha / 2.

    >>> round(float(gdp_mu_lower_array(90, 100, 10, 100, 0.05)), 3)
    1.86
    """
    half = alpha / 2.0
    tpr_lo = _cp_lower(np.asarray(tp), n_in, half)
    fpr_hi = _cp_upper(np.asarray(fp), n_out, half)
    with np.errstate(invalid="ignore"):
        mu = special.ndtri(tpr_lo) - special.ndtri(fpr_hi)
    return np.where(np.isnan(mu), 0.0, np.maximum(mu, 0.0))


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
    tpr = check_rate("tpr", tpr)
    fpr = check_rate("fpr", fpr)
    if tpr == fpr:
        return 0.0
    return float(special.ndtri(tpr) - special.ndtri(fpr))  # Φ⁻¹(TPR) − Φ⁻¹(FPR): norm.ppf's bits


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
    mu = check_real("mu", mu, allow_inf=True)
    epsilon = check_real("epsilon", epsilon, allow_inf=True)
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
    mu = check_real("mu", mu, allow_inf=True)
    delta = check_open_unit("delta", delta)
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if gdp_delta_unchecked(mu, 0.0) <= delta:
        return 0.0
    hi = max(1.0, mu * mu)
    while gdp_delta_unchecked(mu, hi) > delta:
        hi *= 2.0
    return brentq(lambda e: gdp_delta_unchecked(mu, e) - delta, 0.0, hi, xtol=1e-13, rtol=1e-14)


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
        self._in = check_scores("in_scores", in_scores)
        self._out = check_scores("out_scores", out_scores)
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
        threshold = check_real("threshold", threshold, allow_inf=True)
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
        fpr = check_rate("fpr", fpr)
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

    def roc(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The empirical ROC: ``(thresholds, fpr, tpr)``, thresholds descending from +inf.

        One point per candidate threshold (+inf first, at (0, 0); the lowest
        observed score last, at (1, 1)); FPR and TPR never decrease along it.

        >>> t, fpr, tpr = CanaryScoreAuditor([1, 2], [0, 1]).roc()
        >>> t.tolist(), fpr.tolist(), tpr.tolist()
        ([inf, 2.0, 1.0, 0.0], [0.0, 0.0, 0.5, 1.0], [0.0, 0.5, 1.0, 1.0])
        """
        tp, fp = self._roc_counts()
        return self._candidates[::-1].copy(), fp / self.n_out, tp / self.n_in

    def _roc_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(TP, FP) at each ROC point, in :meth:`roc`'s order."""
        return self._counts(self._candidates[::-1])

    def roc_hull(self) -> tuple[np.ndarray, np.ndarray]:
        """Vertices ``(fpr, tpr)`` of the ROC's upper convex hull, from (0, 0) to (1, 1).

        Every point of the hull is the (FPR, TPR) of a randomised test: call
        "present" at the higher of two adjacent vertices' thresholds, and at
        the lower one with a fixed probability. No test built from these
        scores does better. Collinear points are dropped: the turns are decided
        on the integer counts (FP, TP), exactly, not on rounded rates.

        >>> f, t = CanaryScoreAuditor([0, 4, 6, 7], [1, 2, 3, 5]).roc_hull()
        >>> f.tolist(), t.tolist()
        ([0.0, 0.0, 0.25, 1.0], [0.0, 0.5, 0.75, 1.0])
        """
        tp, fp = self._roc_counts()
        hull: list[tuple[int, int]] = []
        for p in zip(fp.tolist(), tp.tolist()):  # Andrew's monotone chain, upper half, in counts
            while len(hull) >= 2:
                (x0, y0), (x1, y1) = hull[-2], hull[-1]
                if (x1 - x0) * (p[1] - y0) - (y1 - y0) * (p[0] - x0) < 0:
                    break  # a right turn: hull[-1] stays a vertex
                hull.pop()
            if not hull or hull[-1] != p:
                hull.append(p)
        xs, ys = zip(*hull)
        return np.array(xs) / self.n_out, np.array(ys) / self.n_in

    def tpr_at_fpr_interpolated(self, fpr: float) -> float:
        """TPR of the best randomised test with FPR exactly ``fpr``: the ROC hull at ``fpr``.

        If the hull vertices (F1, T1) and (F2, T2) bracket the target
        (F1 <= fpr < F2), calling "present" at F1's threshold, and at F2's
        with probability (fpr - F1) / (F2 - F1), has FPR = fpr and TPR =
        T1 + (fpr - F1) / (F2 - F1) * (T2 - T1). The DP inequalities hold
        for randomised tests too, so this point is as valid an input to
        :func:`point_epsilon` as a deterministic one, and it does not jump
        with the score that happens to sit at the target FPR.

        >>> a = CanaryScoreAuditor([1, 3], [0, 2])
        >>> [a.tpr_at_fpr_interpolated(f) for f in (0, 0.25, 0.5, 1)]
        [0.5, 0.75, 1.0, 1.0]
        """
        fpr = check_rate("fpr", fpr)
        f, t = self.roc_hull()
        i = int(np.searchsorted(f, fpr, side="right")) - 1  # the last vertex with F <= fpr
        if i == f.size - 1 or f[i] == fpr:
            return float(t[i])
        w = (fpr - f[i]) / (f[i + 1] - f[i])
        return float(t[i] + w * (t[i + 1] - t[i]))

    def auroc(self, hull: bool = False) -> float:
        """Area under the ROC curve.

        Default: P[IN score > OUT score] + P[equal] / 2 (Mann--Whitney U /
        (n_in * n_out)), the trapezoid area under :meth:`roc`: 0.5 for an
        attack that cannot tell the sides apart, 1 for perfect separation.
        ``hull=True``: the area under :meth:`roc_hull`, i.e. allowing
        randomised tests (jax_privacy's ``attack_auroc`` convention); never
        smaller.

        >>> a = CanaryScoreAuditor([0, 4, 6, 7], [1, 2, 3, 5])
        >>> a.auroc(), a.auroc(hull=True)   # 11/16, 13/16
        (0.6875, 0.8125)
        """
        if hull:
            f, t = self.roc_hull()
            return float(np.sum(np.diff(f) * (t[1:] + t[:-1]) / 2.0))
        from scipy import stats  # on first use: scipy.stats costs ~0.5 s of every command's start

        ranks = stats.rankdata(np.concatenate([self._in, self._out]))  # ties get their mean rank
        u = float(np.sum(ranks[: self.n_in])) - self.n_in * (self.n_in + 1) / 2.0
        return u / (self.n_in * self.n_out)

    def accuracy_upper_bound(self, alpha: float = 0.05, prevalence: float = 0.5) -> float:
        """(1 - alpha) upper confidence limit on the best accuracy any threshold test can reach.

        Accuracy of the test ``score >= t`` when the canary is present with
        probability ``prevalence`` (pi): pi * TPR + (1 - pi) * TNR. The limit
        is the maximum over thresholds of pi * TPR_hi + (1 - pi) * TNR_hi,
        each a one-sided Clopper--Pearson limit at alpha / 2. No correction
        for the maximum is needed: the best threshold t* of the true curve is
        fixed, its limits hold with probability >= 1 - alpha, its counts are
        some candidate's, and the maximum is at least that candidate's value.
        Randomised tests cannot do better (accuracy is linear in the rates).
        An (epsilon, 0)-DP mechanism caps the balanced accuracy at
        e^epsilon / (1 + e^epsilon); :meth:`audit_accuracy` is the optimistic
        estimate this limit brackets from above.

        >>> a = CanaryScoreAuditor([1] * 500 + [3] * 500, [0] * 500 + [2] * 500)
        >>> a.audit_accuracy(), round(a.accuracy_upper_bound(), 4)
        (0.75, 0.7657)
        """
        alpha = check_open_unit("alpha", alpha)
        prevalence = check_rate("prevalence", prevalence)
        tp, fp = self._counts(self._candidates)
        tpr_hi = _cp_upper(tp, self.n_in, alpha / 2.0)
        tnr_hi = _cp_upper(self.n_out - fp, self.n_out, alpha / 2.0)
        return float(np.max(prevalence * tpr_hi + (1.0 - prevalence) * tnr_hi))

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
        delta = check_delta(delta)
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
        delta = check_open_unit("delta", delta)
        tpr, fpr_emp = self.tpr_fpr(self.threshold_at_fpr(fpr))
        return gdp_epsilon(gdp_mu(tpr, fpr_emp), delta)

    def epsilon_clopper_pearson(
        self,
        alpha: float = 0.05,
        delta: float = 0.0,
        selection: ThresholdSelection = CornerGrid(),
    ) -> ClopperPearsonBound:
        """(1 - alpha)-confidence lower bound on epsilon (Clopper--Pearson).

        The threshold is chosen according to ``selection``:

        * :class:`Split` -- pick it on a random ``fraction`` of the trials
          (maximising the bound there), bound on the others with full alpha;
        * :class:`MultiSplit` -- the median of many splits at alpha / 2;
        * :class:`Bonferroni` -- every candidate on all trials at alpha / K,
          report the best;
        * :class:`CornerGrid` -- the ROC corners at a fixed grid of error
          counts, on all trials at alpha / K with a small K;
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
        >>> round(auditor.epsilon_clopper_pearson(selection=CornerGrid()).epsilon, 3)
        2.95
        >>> round(auditor.epsilon_clopper_pearson(selection=Split(0.5, seed=1)).epsilon, 3)
        2.942
        """
        alpha = check_open_unit("alpha", alpha)
        delta = check_delta(delta)

        def objective(tp, n_in, fp, n_out, a):
            return clopper_pearson_epsilon_array(tp, n_in, fp, n_out, a, delta)

        c = self._choose(objective, alpha, selection)
        return ClopperPearsonBound(**c.where(alpha, delta, selection), epsilon=c.value)

    def mu_lower_bound(
        self, alpha: float = 0.05, delta: float = 1e-5, selection: ThresholdSelection = CornerGrid()
    ) -> GdpBound:
        """(1 - alpha)-confidence lower bound on the Gaussian-DP parameter mu.

        A mu-GDP mechanism forces TPR <= Phi(Phi^-1(FPR) + mu) for every test
        (Dong, Roth & Su 2022, Definition 2.6), so with the Clopper--Pearson
        limits at the chosen threshold

            mu_lb = max(Phi^-1(TPR_lo) - Phi^-1(FPR_hi), 0)

        holds with probability 1 - alpha (the TNR/FNR form gives the same
        number: the Gaussian curve is symmetric). The threshold is chosen by
        ``selection`` exactly as in :meth:`epsilon_clopper_pearson`, with mu
        as the objective. Unlike :meth:`epsilon_gdp` (a plug-in estimate)
        this is a bound on mu; its ``epsilon`` is :func:`gdp_epsilon`
        (mu_lb, delta), a lower bound on the mechanism's epsilon only when its
        trade-off curve *is* Gaussian (the Gaussian mechanism on a fixed pair):
        a curve below G_mu that is not Gaussian has a smaller epsilon(delta).

        >>> rng = np.random.default_rng(0)
        >>> auditor = CanaryScoreAuditor(rng.normal(2.0, 1.0, 500), rng.normal(0.0, 1.0, 500))
        >>> res = auditor.mu_lower_bound(selection=CornerGrid())
        >>> round(res.mu, 3), round(res.epsilon, 3)
        (1.801, 8.795)
        """
        alpha = check_open_unit("alpha", alpha)
        delta = check_open_unit("delta", delta)
        c = self._choose(gdp_mu_lower_array, alpha, selection)
        return GdpBound(**c.where(alpha, delta, selection), mu=c.value, epsilon=gdp_epsilon(c.value, delta))

    # -- threshold selection ------------------------------------------------

    def _choose(self, objective, alpha: float, selection: ThresholdSelection) -> _Choice:
        """The best ``objective(tp, n_in, fp, n_out, a)`` over ``selection``'s thresholds, valid at 1 - alpha."""
        if isinstance(selection, Explicit):
            t = selection.threshold
            tp, fp = self._counts(t)
            return _Choice(
                float(objective(tp, self.n_in, fp, self.n_out, alpha)), t, tp, self.n_in, fp, self.n_out, alpha
            )
        if isinstance(selection, Bonferroni):
            k = (self.n_in + self.n_out) / 2.0
            if selection.thresholds is None:
                cands = self._candidates
            else:
                cands = np.asarray(selection.thresholds, dtype=np.float64)
                k = min(float(len(cands)), k)
            tp, fp = self._counts(cands)
            return _best(objective, cands, tp, self.n_in, fp, self.n_out, self._level(alpha, k))
        if isinstance(selection, CornerGrid):
            return self._corner_choice(objective, alpha, selection)
        if isinstance(selection, Split):
            return self._split_choice(objective, alpha, selection)
        if isinstance(selection, MultiSplit):
            a = self._level(alpha, 2)
            choices = sorted((self._split_choice(objective, a, m) for m in selection.members()), key=lambda c: c.value)
            return choices[(len(choices) - 1) // 2]  # the lower median: a split's own bound and counts
        raise InvalidParameter(
            "selection must be Split(...), MultiSplit(...), Bonferroni(...), CornerGrid(...) or Explicit(...), "
            f"got {selection!r}"
        )

    def _corner_choice(self, objective, alpha: float, grid: CornerGrid) -> _Choice:
        """The corners A_c and B_c of :class:`CornerGrid` on the tie-broken ranks, each at alpha / K."""
        r_in, r_out = grid.ranks(self._in, self._out)
        n = self.n_in + self.n_out
        cuts = np.arange(n + 1)  # rank threshold t: ranks >= t are called present; t = n calls none
        tp = self._count_at_least(np.sort(r_in), cuts)  # falls with t, as fp does; fn = n_in - tp rises
        fp = self._count_at_least(np.sort(r_out), cuts)
        c_out, c_in = grid.counts(self.n_out), grid.counts(self.n_in)
        # fp falls and fn = n_in - tp rises with t: each corner is a binary search, not a scan of every cut
        lowest = np.searchsorted(-fp, -c_out, side="left")  # A_c: the first t with fp <= c; t = n has fp 0
        highest = np.searchsorted(self.n_in - tp, c_in, side="right") - 1  # B_c: the last t with fn <= c; t = 0
        picked = np.r_[lowest, highest]
        tp_used = np.r_[tp[lowest], self.n_in - c_in]  # the grid count on the side that fixed the corner
        fp_used = np.r_[c_out, fp[highest]]  # (equal to the observed count: ranks have no ties)
        sorted_scores = np.sort(np.concatenate([self._in, self._out]))
        thresholds = np.append(sorted_scores, np.inf)[picked]  # the score at the cut (randomised if tied)
        level = self._level(alpha, grid.k(self.n_in, self.n_out))
        return _best(objective, thresholds, tp_used, self.n_in, fp_used, self.n_out, level)

    @staticmethod
    def _level(alpha: float, k: float) -> float:
        """The Bonferroni level of each of ``k`` simultaneous tests (alpha / k: they all hold w.p. >= 1 - alpha)."""
        return alpha / k

    def _split_choice(self, objective, alpha: float, selection: Split) -> _Choice:
        """Choose on the selection half, bound on the evaluation half.

        Ties in the selection half's bound (all 0 on weak evidence) are broken
        by the same bound at 50 % confidence (each rate at its median limit:
        finite, and larger where the evidence is larger), and only then by the
        plug-in estimate, which is +inf at any threshold with TPR = 1 or
        FPR = 0 and so would pull the choice to an extreme threshold.
        """
        if self.n_in < 2 or self.n_out < 2:
            raise InvalidParameter(f"Split needs >= 2 trials per side, got n_in={self.n_in}, n_out={self.n_out}")
        (in_s, in_e), (out_s, out_e) = selection.halves(self.n_in, self.n_out)
        in_sel, in_eval = np.sort(self._in[in_s]), np.sort(self._in[in_e])
        out_sel, out_eval = np.sort(self._out[out_s]), np.sort(self._out[out_e])
        # the threshold is chosen from in_sel / out_sel only (never the evaluation half)
        cands = np.append(np.unique(np.concatenate([in_sel, out_sel])), np.inf)
        tp_s = self._count_at_least(in_sel, cands)
        fp_s = self._count_at_least(out_sel, cands)
        bound = objective(tp_s, in_sel.size, fp_s, out_sel.size, alpha)
        tied = np.flatnonzero(bound == bound.max())  # the tie-break keys only where they can matter
        tp_t, fp_t = tp_s[tied], fp_s[tied]
        median = objective(tp_t, in_sel.size, fp_t, out_sel.size, _TIE_BREAK_ALPHA)
        tpr_t, fpr_t = tp_t / in_sel.size, fp_t / out_sel.size
        plug_in = np.maximum(_log_ratio(tpr_t, fpr_t), _log_ratio(1.0 - fpr_t, 1.0 - tpr_t))
        best = int(tied[np.lexsort((-plug_in, -median))[0]])
        t = float(cands[best])
        tp = self._count_at_least(in_eval, t)
        fp = self._count_at_least(out_eval, t)
        return _Choice(
            float(objective(tp, in_eval.size, fp, out_eval.size, alpha)), t, tp, in_eval.size, fp, out_eval.size, alpha
        )


_TIE_BREAK_ALPHA = 1.0 - 1e-9
"""Level of the split's tie-break bound: each one-sided limit at ~1/2, i.e. the rates' median limits."""


@dataclass(frozen=True)
class _Choice:
    """A chosen threshold: the objective there, the counts it was computed from and the level used."""

    value: float
    threshold: float
    tp: int
    n_in: int
    fp: int
    n_out: int
    alpha: float

    def __post_init__(self):
        for name in ("tp", "n_in", "fp", "n_out"):
            object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "threshold", float(self.threshold))

    def where(self, alpha: float, delta: float, selection: ThresholdSelection) -> dict:
        """The :class:`ThresholdBound` fields of a bound at overall level ``alpha``."""
        return dict(
            threshold=self.threshold,
            true_positives=self.tp,
            n_in=self.n_in,
            false_positives=self.fp,
            n_out=self.n_out,
            confidence=1.0 - alpha,
            alpha_per_threshold=self.alpha,
            delta=delta,
            selection=selection,
        )


def _best(objective, cands: np.ndarray, tp, n_in: int, fp, n_out: int, a: float) -> _Choice:
    """The candidate with the largest objective at level ``a`` (the first of equals)."""
    values = objective(tp, n_in, fp, n_out, a)
    i = int(np.argmax(values))
    return _Choice(float(values[i]), cands[i], np.asarray(tp)[i], n_in, np.asarray(fp)[i], n_out, a)
