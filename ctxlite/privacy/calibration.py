"""Gaussian-mechanism calibration, sensitivities and privacy accounting.

Two different "theoretical epsilon"s appear in ContextLeak-style audits, and
every function here says which one it means:

* **per-query** -- one release of a Gaussian mechanism, with the canary always
  in the private set (no subsampling, no composition). This is what an audit
  of a single noisy histogram / embedding measures.
  :func:`analytic_gaussian_sigma`, :func:`gaussian_delta`,
  :func:`analytic_gaussian_epsilon`.
* **subsampled over T queries** -- each query sees a Poisson subsample of the
  records (rate q) and the mechanism answers T queries; the guarantee for the
  whole run comes from a privacy-loss-distribution accountant.
  :func:`subsampled_gaussian_epsilon`, :func:`calibrate_subsampled_sigma`
  (these need the ``dp-accounting`` package).

Sensitivities are stated per neighbouring relation (:class:`Neighbouring`).
With a fixed number m of ensembles, replacing, adding or removing one record
changes one ensemble's answer, so both relations give the same L2
sensitivity: sqrt(2) for the RNM histogram, 2C for the ESA sum (the DP-ICL
mechanisms of Wu et al. 2024 that ContextLeak audits). Never use the classic
sigma = sqrt(2 ln(1.25/delta))/eps formula: it is only valid for eps < 1.
"""

from __future__ import annotations

import enum
import math
import numbers

from ctxlite.errors import InvalidParameter
from ctxlite.privacy.estimators import gdp_delta_unchecked, gdp_epsilon
from ctxlite.privacy.roots import brentq

__all__ = [
    "Neighbouring",
    "rnm_l2_sensitivity",
    "esa_l2_sensitivity",
    "gaussian_delta",
    "analytic_gaussian_sigma",
    "analytic_gaussian_epsilon",
    "subsampled_gaussian_epsilon",
    "calibrate_subsampled_sigma",
]


class Neighbouring(enum.Enum):
    """Which pairs of private sets count as neighbours.

    REPLACE: one record is swapped for another (ContextLeak's canary game).
    ADD_REMOVE: one record is added or removed.
    """

    REPLACE = "replace"
    ADD_REMOVE = "add_remove"


def _check_relation(relation) -> Neighbouring:
    if not isinstance(relation, Neighbouring):
        raise InvalidParameter(f"relation must be Neighbouring.REPLACE or Neighbouring.ADD_REMOVE, got {relation!r}")
    return relation


def _check_positive(name: str, value, *, allow_zero: bool = False, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidParameter(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise InvalidParameter(f"{name} must be finite, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidParameter(f"{name} must be {'>=' if allow_zero else '>'} 0, got {value!r}")
    return value


def _check_delta(delta) -> float:
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0.0 < float(delta) < 1.0:
        raise InvalidParameter(f"delta must be in (0, 1), got {delta!r}")
    return float(delta)


def rnm_l2_sensitivity(relation: Neighbouring) -> float:
    """L2 sensitivity of the report-noisy-max vote histogram: sqrt(2).

    The m ensembles are fixed, so the histogram n = (n_1, ..., n_k) always
    sums to m. Replacing, adding or removing one record changes one ensemble's
    prompt, hence at most one vote, which moves from one class to another:
    ||n - n'||_2 <= sqrt(1 + 1) under REPLACE and under ADD_REMOVE alike
    (RNM of Wu et al. 2024, DP-ICL). 1 would hold only if an added record
    formed a new ensemble whose vote appears.

    >>> round(rnm_l2_sensitivity(Neighbouring.REPLACE), 4)
    1.4142
    >>> round(rnm_l2_sensitivity(Neighbouring.ADD_REMOVE), 4)
    1.4142
    """
    _check_relation(relation)
    return math.sqrt(2.0)


def esa_l2_sensitivity(clip_norm: float, relation: Neighbouring) -> float:
    """L2 sensitivity of the sum of clipped ensemble embeddings (ESA): 2C.

    Each of the m fixed ensembles' embeddings is clipped to L2 norm
    ``clip_norm`` (C) and the noise is added to their sum. Replacing, adding
    or removing one record changes one ensemble's output, i.e. swaps one
    clipped vector u for another v: ||u - v||_2 <= ||u|| + ||v|| <= 2C, under
    REPLACE and ADD_REMOVE alike, since an added record joins an existing
    ensemble (ESA of Wu et al. 2024, DP-ICL). C would hold only if an added
    record formed a new ensemble.

    >>> esa_l2_sensitivity(1.5, Neighbouring.REPLACE)
    3.0
    >>> esa_l2_sensitivity(1.5, Neighbouring.ADD_REMOVE)
    3.0
    """
    clip_norm = _check_positive("clip_norm", clip_norm)
    _check_relation(relation)
    return 2.0 * clip_norm


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Exact delta(epsilon) of one Gaussian-mechanism release (per-query).

    Adding N(0, sigma^2) noise to a function with L2 sensitivity Delta is
    (eps, delta)-DP exactly for

        delta = Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta)

    (Balle & Wang 2018, "Improving the Gaussian mechanism for differential
    privacy", Theorem 8), evaluated in log space. sigma = 0 gives 1.

    >>> f"{gaussian_delta(3.7306, 1.0):.3e}"
    '1.000e-05'
    >>> gaussian_delta(1.0, math.inf)
    0.0
    """
    sigma = _check_positive("sigma", sigma, allow_zero=True)
    epsilon = _check_positive("epsilon", epsilon, allow_zero=True, allow_inf=True)
    sensitivity = _check_positive("sensitivity", sensitivity)
    mu = math.inf if sigma == 0 else sensitivity / sigma
    return gdp_delta_unchecked(mu, epsilon)


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest sigma making the Gaussian mechanism (eps, delta)-DP (per-query).

    The analytic Gaussian mechanism (Balle & Wang 2018, Algorithm 1 solved
    with a root finder): the smallest sigma with

        Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta) <= delta.

    The left side decreases in sigma; Brent's method on log(sigma/Delta), then
    sigma is nudged up until the inequality holds in floating point. Valid
    for every eps > 0, unlike the classic sqrt(2 ln(1.25/delta))/eps.
    eps = inf gives 0 (no noise needed).

    >>> round(analytic_gaussian_sigma(1.0, 1e-5), 4)
    3.7306
    >>> round(analytic_gaussian_sigma(8.0, 1e-4), 4)
    0.5431
    >>> round(analytic_gaussian_sigma(3.0, 1e-5, sensitivity=math.sqrt(2)), 4)
    1.9666
    """
    epsilon = _check_positive("epsilon", epsilon, allow_inf=True)
    delta = _check_delta(delta)
    sensitivity = _check_positive("sensitivity", sensitivity)
    if math.isinf(epsilon):
        return 0.0

    def excess(log_ratio: float) -> float:  # sigma / Delta = exp(log_ratio)
        return gdp_delta_unchecked(math.exp(-log_ratio), epsilon) - delta

    lo, hi = -1.0, 1.0
    while excess(lo) <= 0:
        lo -= 2.0
    while excess(hi) > 0:
        hi += 2.0
    root = brentq(excess, lo, hi, xtol=1e-15, rtol=1e-15)
    ratio = math.exp(root)
    while gdp_delta_unchecked(1.0 / ratio, epsilon) > delta:
        ratio = math.nextafter(ratio, math.inf)
    return ratio * sensitivity


def analytic_gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest epsilon for which one Gaussian release is (eps, delta)-DP (per-query).

    Inverts :func:`gaussian_delta` in epsilon: the mechanism is mu-GDP with
    mu = Delta/sigma (Dong, Roth & Su 2022), so this is
    :func:`ctxlite.privacy.estimators.gdp_epsilon` (mu, delta).

    >>> round(analytic_gaussian_epsilon(3.7306, 1e-5), 4)
    1.0
    """
    sigma = _check_positive("sigma", sigma)
    delta = _check_delta(delta)
    sensitivity = _check_positive("sensitivity", sensitivity)
    return gdp_epsilon(sensitivity / sigma, delta)


def _check_accounting_args(sensitivity, sampling_rate, num_queries, delta):
    sensitivity = _check_positive("sensitivity", sensitivity)
    sampling_rate = _check_positive("sampling_rate", sampling_rate)
    if sampling_rate > 1.0:
        raise InvalidParameter(f"sampling_rate must be in (0, 1], got {sampling_rate!r}")
    if isinstance(num_queries, bool) or not isinstance(num_queries, numbers.Integral) or num_queries < 1:
        raise InvalidParameter(f"num_queries must be an integer >= 1, got {num_queries!r}")
    return sensitivity, sampling_rate, int(num_queries), _check_delta(delta)


def _pld_epsilon(
    noise_multiplier: float, sampling_rate: float, num_queries: int, delta: float, discretization: float
) -> float:
    import dp_accounting  # optional dependency, only needed for accounting
    from dp_accounting import dp_event

    event = dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(sampling_rate, dp_event.GaussianDpEvent(noise_multiplier=noise_multiplier)),
        num_queries,
    )
    accountant = dp_accounting.pld.PLDAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=discretization,
    )
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))


def subsampled_gaussian_epsilon(
    sigma: float,
    sensitivity: float,
    sampling_rate: float,
    num_queries: int,
    delta: float,
    *,
    discretization: float = 1e-4,
) -> float:
    """epsilon of T Poisson-subsampled Gaussian releases (subsampled over T queries).

    Each of ``num_queries`` queries includes every record independently with
    probability ``sampling_rate``, then adds N(0, sigma^2) to a sum with L2
    sensitivity ``sensitivity``. The privacy loss distribution of
    ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma / Delta))`` self-composed T
    times is computed by the maintained ``dp_accounting`` PLD accountant
    (Koskela et al. 2020; Doroshenko et al. 2022, "Connect the dots") and
    inverted at ``delta``. The accountant's discretisation is pessimistic:
    the result is an upper bound on the true epsilon, within about
    ``discretization`` of it.

    Subsampling is analysed under add/remove neighbouring (a sampled record's
    contribution appears or not), so pass the add/remove sensitivity there
    (:func:`rnm_l2_sensitivity`, :func:`esa_l2_sensitivity`: sqrt(2) and 2C,
    not 1 and C, since the record joins one of m fixed ensembles).
    With ``sampling_rate=1, num_queries=1`` this is the per-query epsilon of
    :func:`analytic_gaussian_epsilon` (any relation, with that relation's
    sensitivity), up to the discretisation.

    >>> round(subsampled_gaussian_epsilon(3.7306, 1.0, 1.0, 1, 1e-5), 3)
    1.0
    >>> round(subsampled_gaussian_epsilon(1.0, 1.0, 0.01, 100, 1e-5), 3)
    0.718
    """
    sigma = _check_positive("sigma", sigma, allow_zero=True)
    sensitivity, sampling_rate, num_queries, delta = _check_accounting_args(
        sensitivity, sampling_rate, num_queries, delta
    )
    discretization = _check_positive("discretization", discretization)
    if sigma == 0:
        return math.inf
    return _pld_epsilon(sigma / sensitivity, sampling_rate, num_queries, delta, discretization)


def calibrate_subsampled_sigma(
    epsilon: float,
    delta: float,
    sensitivity: float,
    sampling_rate: float,
    num_queries: int,
    *,
    rtol: float = 1e-3,
    discretization: float = 1e-4,
) -> float:
    """Smallest sigma (to relative ``rtol``) meeting (eps, delta) subsampled over T queries.

    Bisection on log(sigma) with :func:`subsampled_gaussian_epsilon` as the
    oracle (epsilon decreases as sigma grows). The upper end starts at
    sqrt(T) times the per-query analytic sigma -- T unsubsampled releases are a
    single Gaussian with sensitivity sqrt(T)*Delta -- and the returned sigma is
    always an upper end, i.e. its accounted epsilon is <= ``epsilon``.

    Four unsubsampled queries are one Gaussian release with sensitivity 2, so
    sigma is twice the per-query analytic sigma (up to ``rtol`` and the
    accountant's pessimism):

    >>> sigma = calibrate_subsampled_sigma(3.0, 1e-5, 1.0, 1.0, 4)
    >>> subsampled_gaussian_epsilon(sigma, 1.0, 1.0, 4, 1e-5) <= 3.0
    True
    >>> round(sigma, 3), round(2 * analytic_gaussian_sigma(3.0, 1e-5), 3)
    (2.781, 2.781)
    """
    epsilon = _check_positive("epsilon", epsilon)
    sensitivity, sampling_rate, num_queries, delta = _check_accounting_args(
        sensitivity, sampling_rate, num_queries, delta
    )
    rtol = _check_positive("rtol", rtol)

    def eps_at(s: float) -> float:
        return _pld_epsilon(s / sensitivity, sampling_rate, num_queries, delta, discretization)

    hi = 1.05 * math.sqrt(num_queries) * analytic_gaussian_sigma(epsilon, delta, sensitivity)
    while eps_at(hi) > epsilon:
        hi *= 2.0
    lo = hi / 2.0
    while eps_at(lo) <= epsilon:
        hi = lo
        lo /= 2.0
        if lo < 1e-6 * sensitivity:
            raise InvalidParameter(f"epsilon={epsilon!r} is met by any sigma >= {hi!r}; calibration is degenerate")
    while hi / lo > 1.0 + rtol:
        mid = math.sqrt(lo * hi)
        if eps_at(mid) <= epsilon:
            hi = mid
        else:
            lo = mid
    return hi
