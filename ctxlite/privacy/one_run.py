"""Privacy auditing with one run: many canaries, each included with probability 1/2.

m canaries are each inserted independently with probability 1/2; after one
run, the auditor guesses "included" for the r canaries with the highest scores
and v of those guesses are right. Two ways to turn (m, r, v) into a lower
bound on epsilon:

* :func:`one_run_epsilon` -- each guess of an (epsilon, delta)-DP mechanism is
  right with probability at most sigmoid(epsilon), up to delta slack (Steinke,
  Nasr & Jagielski 2023, "Privacy auditing with one (1) training run");
* :func:`one_run_epsilon_fdp` -- the same guesses read through the
  mechanism's whole trade-off curve (Mahloujifar, Melis & Chaudhuri 2024,
  "Auditing f-differential privacy in one run"), here the Gaussian curve of
  the Gaussian mechanism calibrated to (epsilon, delta): tighter, and a bound
  on epsilon for mechanisms whose trade-off curve is at least that one.

:func:`one_run_audit` applies either to IN and OUT scores. Both bounds are
valid only if the inclusion bits really are fair coins; :func:`inclusion_p_value`
tests the one thing the scores can show about that (how many canaries were
in), and :func:`one_run_audit` refuses counts that make the assumption
implausible. Separate IN and OUT trials of a fixed design (ctxlite's audits)
are not a one-run experiment: bound them with
:meth:`~ctxlite.privacy.estimators.CanaryScoreAuditor.epsilon_clopper_pearson`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from ctxlite.errors import InvalidParameter
from ctxlite.privacy.calibration import analytic_gaussian_sigma
from ctxlite.privacy.estimators import check_count, check_delta, check_open_unit, check_scores
from ctxlite.privacy.roots import brentq

__all__ = [
    "one_run_epsilon",
    "one_run_epsilon_fdp",
    "inclusion_p_value",
    "guess_counts",
    "OneRunBound",
    "one_run_audit",
]


def _check_counts(m: int, r: int, v: int) -> tuple[int, int, int]:
    m = check_count("m", m, minimum=1)
    r = check_count("r", r, minimum=1)
    v = check_count("v", v)
    if r > m:
        raise InvalidParameter(f"r (guesses) must be <= m = {m} canaries, got {r}")
    if v > r:
        raise InvalidParameter(f"v (correct guesses) must be <= r = {r}, got {v}")
    return m, r, v


def _largest_rejected(excess) -> float:
    """The largest epsilon >= 0 with ``excess(epsilon) > 0`` (a claim test's margin, decreasing in epsilon).

    0 if even epsilon = 0 is not rejected, inf if no epsilon up to 1e4 is;
    else the root of the margin by Brent's method (absolute error 1e-9).
    """
    if not excess(0.0) > 0:
        return 0.0
    lo, hi = 0.0, 1.0
    while excess(hi) > 0:
        lo, hi = hi, 2.0 * hi
        if hi > 1e4:  # never stops rejecting: unbounded evidence
            return math.inf
    return brentq(excess, lo, hi, xtol=1e-9, rtol=1e-12)


def _one_run_p_value(epsilon: float, m: int, r: int, v: int, delta: float) -> float:
    from scipy import stats  # on first use: scipy.stats costs ~0.5 s of every command's start

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
    is the largest eps with p(eps) <= alpha, found by Brent's method (0 if even
    eps = 0 is not rejected).

    >>> round(one_run_epsilon(1000, 100, 100), 3)
    3.493
    >>> one_run_epsilon(1000, 100, 50)
    0.0
    """
    m, r, v = _check_counts(m, r, v)
    alpha = check_open_unit("alpha", alpha)
    delta = check_delta(delta)
    return _largest_rejected(lambda eps: alpha - _one_run_p_value(eps, m, r, v, delta))


def _gaussian_mu(epsilon: float, delta: float) -> float:
    """mu of the Gaussian mechanism calibrated to exactly (epsilon, delta) (analytic, Balle & Wang 2018)."""
    if epsilon == 0.0:  # delta(0) = 2 Phi(mu / 2) - 1, the total variation
        return 2.0 * float(special.ndtri((1.0 + delta) / 2.0))
    return 1.0 / analytic_gaussian_sigma(epsilon, delta)


def _fdp_margin(epsilon: float, m: int, r: int, v: int, alpha: float, delta: float) -> float:
    """By how much ``v`` right of ``r`` guesses falsify "at least as private as the (epsilon, delta)
    Gaussian mechanism" (> 0: falsified at level alpha).

    The recursion of Mahloujifar, Melis & Chaudhuri 2024 (their
    ``audit_rh_with_cap``): start from the probability budgets alpha * v / m
    (right guesses) and alpha * (r - v) / m (wrong guesses), push them down
    the trade-off curve f(x) = Phi(Phi^-1(x) - mu) one right guess at a time,
    and reject when the budgets exceed what r guesses of m allow.
    """
    mu = _gaussian_mu(epsilon, delta)
    right, wrong = alpha * v / m, alpha * (r - v) / m
    for i in range(v - 1, -1, -1):
        wrong_new = max(wrong, float(special.ndtr(special.ndtri(right) - mu)))
        if wrong_new == wrong:
            break
        right = min(right + (i / (r - i)) * (wrong_new - wrong), 1.0)
        wrong = wrong_new
    return right + wrong - r / m


def one_run_epsilon_fdp(m: int, r: int, v: int, alpha: float = 0.05, delta: float = 1e-5) -> float:
    """Lower bound on epsilon from one run, read through the Gaussian trade-off curve (f-DP).

    The largest epsilon for which ``v`` right of ``r`` guesses among ``m``
    canaries reject, at level alpha, the claim "the mechanism is f-DP for
    the trade-off curve f of the Gaussian mechanism calibrated to (epsilon,
    delta)" (Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-differential
    privacy in one run"; see :func:`_fdp_margin`). Using the whole curve
    instead of one (epsilon, delta) point certifies more from the same
    guesses; the price is the claim tested: it is an (epsilon, delta) bound
    for mechanisms whose trade-off curve is Gaussian (the Gaussian mechanism,
    DP-SGD's, ctxlite's RNM and ESA), not for every (epsilon, delta)-DP one.
    ``delta`` must be > 0 (a Gaussian mechanism is never (epsilon, 0)-DP).

    >>> round(one_run_epsilon_fdp(1000, 100, 90, alpha=0.05, delta=1e-5), 4)   # jax_privacy: 2.4564
    2.4564
    """
    m, r, v = _check_counts(m, r, v)
    alpha = check_open_unit("alpha", alpha)
    delta = check_open_unit("delta", delta)
    return _largest_rejected(lambda eps: _fdp_margin(eps, m, r, v, alpha, delta))


def inclusion_p_value(n_in: int, m: int) -> float:
    """Two-sided exact binomial p-value of ``n_in`` of ``m`` canaries included, if each was a fair coin.

    >>> round(inclusion_p_value(50, 100), 3), f"{inclusion_p_value(100, 4100):.1e}"
    (1.0, '0.0e+00')
    """
    m = check_count("m", m, minimum=1)
    n_in = check_count("n_in", n_in)
    if n_in > m:
        raise InvalidParameter(f"n_in must be <= m = {m}, got {n_in}")
    from scipy import stats  # on first use (see _one_run_p_value)

    return float(stats.binomtest(n_in, m, 0.5).pvalue)


def guess_counts(in_scores, out_scores, seed: int = 0) -> np.ndarray:
    """Right guesses when the r highest-scoring canaries are guessed "in", for r = 0, 1, ..., m.

    The order comes from the pooled scores alone (ties broken by a seeded
    random order, never by the labels), so the guesses for each r are fixed
    before the labels are looked at.

    >>> guess_counts([3.0, 2.0, 0.5], [1.0, 0.0]).tolist()
    [0, 1, 2, 2, 3, 3]
    """
    ins, outs = check_scores("in_scores", in_scores), check_scores("out_scores", out_scores)
    m = ins.size + outs.size
    scores = np.concatenate([ins, outs])
    tie_order = np.random.default_rng(seed).permutation(m)
    order = np.lexsort((tie_order, -scores))  # by score, descending; ties in random order
    return np.r_[0, np.cumsum(order < ins.size)]


def _level(alpha: float, k: int) -> float:
    """The Bonferroni level of each of ``k`` guess counts tried (alpha / k: all hold w.p. >= 1 - alpha)."""
    return alpha / k


@dataclass(frozen=True)
class OneRunBound:
    """Result of :func:`one_run_audit`: the bound, the guesses it came from, and the level per guess count."""

    epsilon: float
    guesses: int
    correct: int
    m: int
    confidence: float
    alpha_per_test: float
    delta: float
    fdp: bool
    inclusion_p_value: float


INCLUSION_LEVEL = 1e-3
"""Below this two-sided p-value the inclusion count refutes fair-coin inclusion: :func:`one_run_audit` refuses."""


def one_run_audit(
    in_scores,
    out_scores,
    alpha: float = 0.05,
    delta: float = 1e-5,
    guesses: int | None = None,
    fdp: bool = False,
    check_inclusion: bool = True,
    seed: int = 0,
) -> OneRunBound:
    """One-run lower bound on epsilon from the scores of included (IN) and excluded (OUT) canaries.

    Guess "in" for the r highest pooled scores (:func:`guess_counts`) and bound
    with :func:`one_run_epsilon` (or :func:`one_run_epsilon_fdp` with
    ``fdp=True``). ``guesses`` fixes r; by default every r in the grid 1, 2,
    4, ..., m is tried at alpha / K (Bonferroni over the K grid points, which
    depend on m only) and the best bound is reported.

    Refuses (:class:`~ctxlite.errors.InvalidParameter`) when the number of
    IN canaries is implausible for fair-coin inclusion (two-sided binomial
    p-value below :data:`INCLUSION_LEVEL`): with, say, 100 IN against 4,000
    OUT null scores the guesses look informative and both methods report
    epsilon ~ 3 for a mechanism that leaks nothing. ``check_inclusion=False``
    skips the check, for a caller who knows the coins were fair.

    >>> rng = np.random.default_rng(0)
    >>> res = one_run_audit(rng.normal(2, 1, 500), rng.normal(0, 1, 500))
    >>> res.guesses, res.correct, round(res.epsilon, 3)
    (128, 128, 3.03)
    """
    ins, outs = check_scores("in_scores", in_scores), check_scores("out_scores", out_scores)
    alpha = check_open_unit("alpha", alpha)
    delta = check_open_unit("delta", delta) if fdp else check_delta(delta)
    m = ins.size + outs.size
    p_incl = inclusion_p_value(ins.size, m)
    if check_inclusion and p_incl < INCLUSION_LEVEL:
        raise InvalidParameter(
            f"one-run auditing assumes each canary was included with probability 1/2, but {ins.size} of {m} "
            f"were (two-sided binomial p = {p_incl:.1e}): the bound would not hold. For IN and OUT trials "
            "of a fixed design use CanaryScoreAuditor.epsilon_clopper_pearson"
        )
    if guesses is None:
        grid = sorted({min(2**j, m) for j in range(int(math.ceil(math.log2(m))) + 1)})
    elif check_count("guesses", guesses, minimum=1) <= m:
        grid = [guesses]
    else:
        raise InvalidParameter(f"guesses must be <= the {m} canaries, got {guesses}")
    a = _level(alpha, len(grid))
    bound = one_run_epsilon_fdp if fdp else one_run_epsilon
    right = guess_counts(ins, outs, seed)
    best = None
    for r in grid:
        v = int(right[r])
        eps = bound(m, r, v, a, delta)
        if best is None or eps > best[0]:
            best = (eps, r, v)
    eps, r, v = best
    return OneRunBound(eps, r, v, m, 1.0 - alpha, a, delta, fdp, p_incl)
