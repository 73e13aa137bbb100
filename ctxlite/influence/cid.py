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
"""

from __future__ import annotations

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
