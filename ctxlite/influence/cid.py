"""Context Influence Decoding (CID; Flemings et al., ACL 2025): sample a response from λ-mixed logits.

p̄_λ(v | D) = softmax((λ·l_D(v) + (1−λ)·l_∅(v)) / T), where l_D are the
next-token logits with the private context in the prompt and l_∅ those of the
same template with an empty context slot. λ = 0 ignores the context, λ = 1 is
ordinary decoding, λ > 1 amplifies the context.

ε-bounded CID: with pmi_D(v) = log q_D(v) − log q_∅(v) (q = softmax(l/T)), if
λ·max_v |pmi_D(v)| ≤ ε/2 then |log p̄_λ(v|D) − log p_T(v|∅)| ≤ ε for every v;
so each step uses λ_t* = min(λ, ε / (2·max_v |pmi_D(v)|)) (the direction of
Flemings et al.'s Theorem B.1; derivation in docs/design.md#cid), shrunk by
:data:`EPSILON_MARGIN` so that rounding cannot carry the log-ratio past ε, and samples
from p̄_λ* over the *whole* vocabulary: a top-k / top-p filter, or the sampling window
of unbounded decoding, puts 0 where p_T(·|∅) is positive (an infinite ratio), so ε is
refused with them. The bound is against the empty context; against a neighbouring
non-empty context D' both sides are within ε of p_T(·|∅), so the per-token bound is 2ε.

That λ_t* (the rule of SPEC §1.5, which ``ctxlite score`` keeps) is sufficient, not tight: the
largest λ' ≤ λ with max_v |log p̄_λ'(v|D) − log p_T(v|∅)| ≤ ε is about twice it on typical rows.
:func:`tight_step` (what ``ctxlite serve`` samples with) finds that λ' per step by a bracketed
search (:func:`tight_lambda`) and checks the bound on the distribution it returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ctxlite.errors import InvalidParameter
from ctxlite.runtime import kernels
from ctxlite.runtime.sampling import SamplingSettings, log_softmax, sample_token


def check_lambda(lam: float) -> float:
    lam = float(lam)
    if not (lam >= 0 and np.isfinite(lam)):
        raise InvalidParameter(f"lambda must be a finite number >= 0, got {lam}")
    return lam


def check_epsilon(epsilon: float | None) -> float | None:
    """ε of ε-bounded CID as a float: finite and > 0 (None, unbounded CID, stays None)."""
    if epsilon is None:
        return None
    epsilon = float(epsilon)
    if not (epsilon > 0 and np.isfinite(epsilon)):
        raise InvalidParameter(f"epsilon must be a finite number > 0 (omit it for unbounded CID), got {epsilon}")
    return epsilon


def mixed_logits(with_context: np.ndarray, without_context: np.ndarray, lam: float) -> np.ndarray:
    """λ·l_D + (1−λ)·l_∅ in float64 (λ = 0 and λ = 1 return one side exactly).

    A −inf logit on either side gives −inf, as in the C kernel ``mixed_logprob``:
    for λ > 1 the weight 1 − λ of l_∅ is negative and would turn its −inf into
    +inf, a token of probability 1 that no side allows.
    """
    if lam == 1.0:
        return with_context.astype(np.float64)
    if lam == 0.0:
        return without_context.astype(np.float64)
    a, b = with_context.astype(np.float64), without_context.astype(np.float64)
    barred = np.isneginf(a) | np.isneginf(b)
    z = lam * np.where(barred, 0.0, a) + (1.0 - lam) * np.where(barred, 0.0, b)
    z[barred] = -np.inf
    return z


def cid_logprobs(with_context, without_context, lam: float, temperature: float, banned_ids=None) -> np.ndarray:
    """log p̄_λ(· | D) over the whole vocabulary; banned tokens get −inf (never dropped)."""
    return log_softmax(mixed_logits(with_context, without_context, lam), temperature, banned_ids)


EPSILON_MARGIN = 1e-9
"""λ_t* is shrunk by this relative margin: the log-ratio is computed in float64 with a relative error
far below it, so the distribution sampled stays within ε exactly, not up to rounding."""


def bounded_lambda(lam: float, epsilon: float | None, max_abs_pmi: float) -> float:
    """λ_t* = min(λ, (1 − margin)·ε / (2·max_v |pmi_D(v)|)) (after Flemings et al., Theorem B.1); λ
    when ε is None. Any estimate m of max|pmi| with |m − pmi(v)| bounding the spread of pmi keeps
    the bound: |log p̄ − log p_T(·|∅)| ≤ λ·(max pmi − min pmi) ≤ 2λ·m."""
    if epsilon is None:
        return lam
    if max_abs_pmi <= 0:
        return lam
    return min(lam, (1.0 - EPSILON_MARGIN) * epsilon / (2.0 * max_abs_pmi))


def check_bounded_sampling(settings: SamplingSettings, epsilon: float | None) -> None:
    """Refuse top-k / top-p with ε-bounded CID: a filter drops tokens p_T(·|∅) allows, so the
    sampled distribution's ratio to it is infinite and no ε holds."""
    if epsilon is not None and (settings.top_k or settings.top_p < 1):
        raise InvalidParameter(
            "epsilon-bounded CID samples the full mixed distribution: top-k / top-p would drop tokens the "
            "empty-context distribution allows (an infinite ratio, no epsilon holds); leave them off"
        )


def bounded_step(row_with, row_without, lam: float, epsilon: float | None, temperature: float, banned=None):
    """One step of (ε-bounded) CID on the raw float32 logits rows: (log p̄_λ_t*(·|D) over the whole
    vocabulary, λ_t*, the kernel's max_v |pmi_D(v)|)."""
    m = kernels.mixed_logprob(
        row_with[None, :],
        row_without[None, :],
        np.zeros(1, np.int32),
        1.0,
        temperature,
        banned_ids=banned,
        want_max_abs_pmi=True,
    ).max_abs_pmi[0]
    lam_t = bounded_lambda(lam, epsilon, m)
    return cid_logprobs(row_with, row_without, lam_t, temperature, banned), lam_t, float(m)


TIGHT_TOLERANCE = 1e-3
""":func:`tight_lambda` stops once its bracket is this narrow, relative to the λ it returns: the λ
returned is within this fraction of the largest λ' whose bound holds (up to the rounding margin)."""

U = 2.0**-53
"""The unit roundoff of float64."""


def log_ratio_bound(lam: float, lq0: np.ndarray, pmi: np.ndarray, top: float, bottom: float, buf=None) -> float:
    """f(λ) = max_v |log p̄_λ(v|D) − log p_T(v|∅)| over the tokens p_T(·|∅) allows (``lq0``: their
    log p_T(v|∅); ``pmi``: their pmi_D(v), all finite; ``top``, ``bottom``: its max and min).

    Mixing is a tilt of p_T(·|∅): log p̄_λ(v) = log p_T(v|∅) + λ·pmi(v) − log Z_λ with
    Z_λ = Σ_v p_T(v|∅)·e^{λ·pmi(v)} (temperature and banned tokens are in both sides already), so
    f(λ) = max(λ·top − log Z_λ, log Z_λ − λ·bottom). f is non-decreasing in λ ≥ 0: the derivative of
    log Z_λ is E_λ[pmi], the mean of pmi under p̄_λ, which lies in [bottom, top], so both branches
    have non-negative derivatives (top − E_λ[pmi] and E_λ[pmi] − bottom); f(0) = 0. And
    f(λ) ≤ λ·(top − bottom) ≤ 2λ·max|pmi| (log Z_λ lies in [λ·bottom, λ·top]), while
    f(λ) ≥ λ·(top − bottom)/2 (the larger of two numbers that sum to it)."""
    buf = np.empty_like(pmi) if buf is None else buf
    np.multiply(pmi, lam, out=buf)
    buf += lq0
    peak = float(buf.max())
    buf -= peak
    np.exp(buf, out=buf)
    log_z = peak + math.log(float(buf.sum()))
    return max(lam * top - log_z, log_z - lam * bottom)


def tight_lambda(lq0: np.ndarray, pmi: np.ndarray, lam: float, epsilon: float) -> float:
    """The largest λ' ≤ ``lam`` with :func:`log_ratio_bound` ≤ ``epsilon``, from below, within
    :data:`TIGHT_TOLERANCE` (``lq0``, ``pmi`` as there).

    f is non-decreasing and continuous, so its feasible set is an interval [0, λ_max]. Its bounds
    bracket λ_max: λ·(top − bottom) ≤ ε holds (the SPEC rule's λ, ε / (2·max|pmi|), is at most
    this lower end), λ·(top − bottom)/2 > ε does not, so the bracket is at most a factor 2 wide. A
    false-position search with the Illinois modification (each step keeps the bracket, so it ends
    in a few evaluations of f, one O(V) pass each) narrows it; the feasible end is returned."""
    top, bottom = float(pmi.max()), float(pmi.min())
    spread = top - bottom
    if not spread > 0:  # the two distributions agree: mixing changes nothing
        return lam
    lo = min(lam, epsilon / spread)
    hi = min(lam, 2.0 * epsilon / spread)
    buf = np.empty_like(pmi)
    f = lambda x: log_ratio_bound(x, lq0, pmi, top, bottom, buf) - epsilon  # noqa: E731
    g_hi = f(hi)
    if g_hi <= 0:
        return hi
    g_lo = f(lo)
    if g_lo > 0:  # rounding at the lower end's own bound: leave it to the caller's check
        return lo
    side = 0
    for _ in range(100):
        if hi - lo <= TIGHT_TOLERANCE * lo:
            break
        x = hi - g_hi * (hi - lo) / (g_hi - g_lo) if g_hi != g_lo else 0.5 * (lo + hi)
        if not lo < x < hi:
            x = 0.5 * (lo + hi)
        g = f(x)
        if g <= 0:
            lo, g_lo = x, g
            if side == -1:
                g_hi *= 0.5
            side = -1
        else:
            hi, g_hi = x, g
            if side == 1:
                g_lo *= 0.5
            side = 1
    return lo


def rounding_margin(row_with: np.ndarray, row_without: np.ndarray, lam: float, temperature: float) -> float:
    """A bound on how far float64 rounding can move the computed max_v |log p̄ − log p_T(·|∅)| from
    the exact one of the float32 logits: each side's log-probabilities (log_softmax of l/T, or the
    tilt log p_T(·|∅) + λ·pmi − log Z_λ) are sums and differences of a few terms of magnitude at most
    X = (|λ| + |1 − λ| + 1)·2·max|logit| / T, each rounded to ≤ u·X (u = 2^-53), and a log-sum-exp of
    V terms whose exps are off by that relative (+u) and whose sum (numpy's pairwise summation) adds
    ≤ (log2 V + 1)u more: ≤ u·(8X + 2·log2 V + 4) per side, twice that for the difference, doubled
    again for safety."""
    x = max(float(np.max(np.abs(row_with))), float(np.max(np.abs(row_without))))
    if not math.isfinite(x):
        finite = lambda r: float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0))  # noqa: E731
        x = max(finite(row_with), finite(row_without))
    x = (abs(lam) + abs(1.0 - lam) + 1.0) * 2.0 * x / temperature
    n = max(len(row_without), 2)
    return 4.0 * U * (8.0 * x + 2.0 * math.log2(n) + 4.0)


def realised_bound(logp: np.ndarray, lq0: np.ndarray) -> float:
    """max_v |logp(v) − lq0(v)| over the whole vocabulary: a token that one side gives probability 0
    and the other does not makes it infinite; one both give 0 is left out."""
    gap = np.subtract(logp, lq0)
    worst = float(np.abs(gap, out=gap).max())
    if math.isfinite(worst):
        return worst
    zero_p, zero_q = np.isneginf(logp), np.isneginf(lq0)
    if np.any(zero_p != zero_q):
        return math.inf
    return float(np.max(gap[~zero_p], initial=0.0))


def _tilted(lq0: np.ndarray, pmi: np.ndarray, lam: float) -> np.ndarray:
    """log p̄_λ(·|D) as the tilt of p_T(·|∅): log p_T(v|∅) + λ·pmi(v), normalised (all finite)."""
    z = np.multiply(pmi, lam)
    z += lq0
    peak = float(z.max())
    z -= peak
    log_sum = math.log(float(np.exp(z).sum()))
    z -= log_sum
    return z


def tight_step(row_with, row_without, lam: float, epsilon: float | None, temperature: float, banned=None):
    """One step of ε-bounded CID with the tight λ_t* (``ctxlite serve``): (log p̄_λ_t*(·|D) over the
    whole vocabulary, λ_t*, max_v |pmi_D(v)|, the realised bound max_v |log p̄ − log p_T(v|∅)| of
    that very distribution).

    λ_t* = :func:`tight_lambda` at ε less :func:`rounding_margin` and the relative
    :data:`EPSILON_MARGIN`; the distribution sampled is then computed -- as the tilt of
    p_T(·|∅) by e^{λ_t*·pmi} where every token has a finite log-probability on both sides (the same
    distribution as :func:`cid_logprobs`, in a third of its passes), else by :func:`cid_logprobs`
    -- and its bound checked against ε less the rounding margin, so the exact log-ratio of the
    logits' distributions is within ε. Should the check fail (rounding the search did not
    foresee), the SPEC rule's λ, then λ = 0 (the empty context's distribution itself, a bound of
    0) are checked in turn. Without ε: λ itself, its realised bound reported."""
    a, b = np.asarray(row_with), np.asarray(row_without)
    lq0 = log_softmax(b, temperature, banned)
    pmi = log_softmax(a, temperature, banned)
    pmi -= lq0  # nan where both sides are −inf, ±inf where one is
    top, bottom = float(pmi.max()), float(pmi.min())  # nan (or ±inf) unless every token is finite on both
    dense = math.isfinite(top) and math.isfinite(bottom)
    if dense:
        allowed_lq0, allowed_pmi, max_abs_pmi = lq0, pmi, max(top, -bottom)
    else:
        allowed = np.isfinite(lq0)
        lqd_allowed = pmi[allowed] + lq0[allowed]
        if not np.all(np.isfinite(lqd_allowed)) or np.any(np.isfinite(pmi[~allowed] + lq0[~allowed])):
            allowed_lq0 = allowed_pmi = None  # a token only one side allows: no λ > 0 keeps the bound
            max_abs_pmi = math.inf
        else:
            allowed_lq0, allowed_pmi = lq0[allowed], pmi[allowed]
            max_abs_pmi = float(np.max(np.abs(allowed_pmi), initial=0.0))
    distribution = (lambda x: _tilted(lq0, pmi, x)) if dense else (lambda x: cid_logprobs(a, b, x, temperature, banned))
    if epsilon is None:
        logp = distribution(lam)
        return logp, lam, max_abs_pmi, realised_bound(logp, lq0)
    margin = rounding_margin(a, b, lam, temperature)
    target = epsilon * (1.0 - EPSILON_MARGIN) - margin
    found = allowed_pmi is not None and target > 0
    candidates = [tight_lambda(allowed_lq0, allowed_pmi, lam, target)] if found else []
    candidates += [bounded_lambda(lam, max(target, 0.0), max_abs_pmi) if max_abs_pmi > 0 else lam, 0.0]
    for lam_t in candidates:
        logp = distribution(lam_t) if lam_t > 0 else lq0.copy()  # λ = 0: the empty context's own
        realised = realised_bound(logp, lq0)
        if realised <= epsilon - margin or lam_t == 0.0:
            return logp, lam_t, max_abs_pmi, realised
    raise AssertionError("unreachable: λ = 0 is the last candidate")


@dataclass
class Generation:
    """A sampled response: token ids (stop token excluded) and per-step CID facts."""

    token_ids: list[int]
    text: str
    lam: float
    step_lambdas: list[float] = field(default_factory=list)
    step_max_abs_pmi: list[float] = field(default_factory=list)
    epsilon: float | None = None
    stop_reason: str = "max_new_tokens"

    @property
    def realised_epsilon(self) -> list[float]:
        """Per-token bound 2·λ_t·max|pmi| actually guaranteed at each step."""
        return [2.0 * l * m for l, m in zip(self.step_lambdas, self.step_max_abs_pmi)]


def generate(
    engine,
    prompt_with: list[int],
    prompt_without: list[int],
    lam: float,
    settings: SamplingSettings,
    epsilon: float | None = None,
) -> Generation:
    """Sample a response with CID at mixing ``lam`` (and ε-bounded λ_t* when ``epsilon``).

    Two streams (with / without the context) advance one token per batch; EOG
    tokens are banned (−inf) before ``min_new_tokens`` and stop generation after.
    """
    lam = check_lambda(lam)
    epsilon = check_epsilon(epsilon)
    check_bounded_sampling(settings, epsilon)
    engine.check_fits(max(len(prompt_with), len(prompt_without)) + settings.max_new_tokens)
    rng = np.random.default_rng(settings.seed)
    eog = engine.eog_ids
    streams = engine.streams([prompt_with, prompt_without])
    gen = Generation(token_ids=[], text="", lam=lam, epsilon=epsilon)
    T = settings.temperature
    for t in range(settings.max_new_tokens):
        rows = streams.last_logits
        banned = eog if t < settings.min_new_tokens else None
        logp, lam_t, m = bounded_step(rows[0], rows[1], lam, epsilon, T, banned)
        gen.step_lambdas.append(lam_t)
        gen.step_max_abs_pmi.append(m)
        token = sample_token(logp, settings, rng, full_vocabulary=epsilon is not None)
        if engine.is_eog(token):
            gen.stop_reason = "eog"
            gen.step_lambdas.pop()
            gen.step_max_abs_pmi.pop()
            break
        gen.token_ids.append(token)
        if t + 1 < settings.max_new_tokens:
            streams.step([token, token])
    gen.text = engine.detokenize(gen.token_ids)
    return gen
