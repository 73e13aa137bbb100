"""Context Influence Decoding (CID): sample a response from λ-mixed logits (SPEC §1.1, §1.3, §1.5).

p̄_λ(v | D) = softmax((λ·l_D(v) + (1−λ)·l_∅(v)) / T), where l_D are the
next-token logits with the private context in the prompt and l_∅ those of the
same template with an empty context slot. λ = 0 ignores the context, λ = 1 is
ordinary decoding, λ > 1 amplifies the context.

ε-bounded CID: with pmi_D(v) = log q_D(v) − log q_∅(v) (q = softmax(l/T)), if
λ·max_v |pmi_D(v)| ≤ ε/2 then |log p̄_λ(v|D) − log p_T(v|∅)| ≤ ε for every v;
so each step uses λ_t* = min(λ, ε / (2·max_v |pmi_D(v)|)).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ctxlite import kernels
from ctxlite.errors import InvalidParameter

TOP_P_WINDOW_NATS = 30.0
"""Sampling (and top-p's sort) only considers tokens within this many nats of
the best one: the mass it ignores is below V·e^-30 ≈ 2e-8 for a 262k vocabulary."""


@dataclass(frozen=True)
class SamplingSettings:
    """How responses are sampled (reference: T = 0.8, 10 to 50 new tokens)."""

    temperature: float = 0.8
    top_k: int = 0
    top_p: float = 1.0
    min_new_tokens: int = 10
    max_new_tokens: int = 50
    seed: int = 0

    def __post_init__(self):
        if not self.temperature > 0:
            raise InvalidParameter(f"temperature must be > 0, got {self.temperature}")
        if self.top_k < 0:
            raise InvalidParameter(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise InvalidParameter(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens or self.max_new_tokens < 1:
            raise InvalidParameter(
                f"need 0 <= min_new_tokens <= max_new_tokens and max_new_tokens >= 1, "
                f"got {self.min_new_tokens}, {self.max_new_tokens}"
            )


def check_lambda(lam: float) -> float:
    lam = float(lam)
    if not (lam >= 0 and np.isfinite(lam)):
        raise InvalidParameter(f"lambda must be a finite number >= 0, got {lam}")
    return lam


def check_epsilon(epsilon: float | None) -> float | None:
    if epsilon is None:
        return None
    epsilon = float(epsilon)
    if not epsilon > 0:
        raise InvalidParameter(f"epsilon must be > 0, got {epsilon}")
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
    z = mixed_logits(with_context, without_context, lam) / temperature
    if banned_ids is not None and len(banned_ids):
        z[np.asarray(banned_ids)] = -np.inf
    z -= z.max()
    return z - np.log(np.exp(z).sum())


def bounded_lambda(lam: float, epsilon: float | None, max_abs_pmi: float) -> float:
    """λ_t* = min(λ, ε / (2·max_v |pmi_D(v)|)) (SPEC §1.5); λ when ε is None."""
    if epsilon is None:
        return lam
    if max_abs_pmi <= 0:
        return lam
    return min(lam, epsilon / (2.0 * max_abs_pmi))


def sample_token(logp: np.ndarray, settings: SamplingSettings, rng: np.random.Generator) -> int:
    """Draw one token id from log-probabilities, after optional top-k / top-p filtering."""
    if settings.top_k:
        k = min(settings.top_k, len(logp))
        cand = np.argpartition(logp, -k)[-k:]
    else:
        cand = np.flatnonzero(logp >= logp.max() - TOP_P_WINDOW_NATS)
    lp = logp[cand]
    if settings.top_p < 1:
        order = np.argsort(-lp, kind="stable")
        cand, lp = cand[order], lp[order]
        p = np.exp(lp - lp.max())
        p /= p.sum()
        keep = int(np.searchsorted(np.cumsum(p), settings.top_p) + 1)
        cand, lp = cand[:keep], lp[:keep]
    p = np.exp(lp - lp.max())
    p /= p.sum()
    return int(cand[rng.choice(len(cand), p=p)])


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


def generate(engine, prompt_with: list[int], prompt_without: list[int], lam: float, settings: SamplingSettings, epsilon: float | None = None) -> Generation:
    """Sample a response with CID at mixing ``lam`` (and ε-bounded λ_t* when ``epsilon``).

    Two streams (with / without the context) advance one token per batch; EOG
    tokens are banned (−inf) before ``min_new_tokens`` and stop generation after.
    """
    lam = check_lambda(lam)
    epsilon = check_epsilon(epsilon)
    engine.check_fits(max(len(prompt_with), len(prompt_without)) + settings.max_new_tokens)
    rng = np.random.default_rng(settings.seed)
    eog = engine.eog_ids
    streams = engine.streams([prompt_with, prompt_without])
    gen = Generation(token_ids=[], text="", lam=lam, epsilon=epsilon)
    T = settings.temperature
    for t in range(settings.max_new_tokens):
        rows = streams.last_logits
        banned = eog if t < settings.min_new_tokens else None
        m = kernels.mixed_logprob(
            rows[0:1], rows[1:2], np.zeros(1, np.int32), 1.0, T, banned_ids=banned, want_max_abs_pmi=True
        ).max_abs_pmi[0]
        lam_t = bounded_lambda(lam, epsilon, m)
        gen.step_lambdas.append(lam_t)
        gen.step_max_abs_pmi.append(float(m))
        token = sample_token(cid_logprobs(rows[0], rows[1], lam_t, T, banned), settings, rng)
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


def sample_streams(engine, prompts: Sequence[Sequence[int]], settings: SamplingSettings, rng: np.random.Generator,
                   stop: tuple[str, ...] = (), greedy: bool = False) -> list[list[int]]:
    """One sampled continuation per prompt (ordinary decoding, λ = 1), prompts in lock-step.

    Up to ``n_seq_max - 1`` prompts run as ``Engine.streams`` at a time
    (identical prompts are decoded once and share their KV cells); each step
    decodes one token for every unfinished stream in a single batch. A stream
    ends at an EOG token (banned before ``min_new_tokens``), at
    ``max_new_tokens``, or once its text (leading whitespace ignored) contains
    one of ``stop`` (the caller cuts the stop string from the text). Without
    top-k/top-p, tokens are drawn by ``kernels.sample_rows`` (windowed
    inverse CDF in C, one uniform per stream and step); ``greedy`` takes the argmax.
    """
    if not prompts:
        return []
    width = engine.config.n_seq_max - 1
    out: list[list[int]] = []
    for lo in range(0, len(prompts), width):
        out.extend(_lockstep(engine, prompts[lo : lo + width], settings, rng, stop, greedy))
    return out


def _draw(rows: np.ndarray, settings: SamplingSettings, banned, rng, greedy: bool) -> np.ndarray:
    """One token per row of raw logits under ``settings`` (top-k/top-p through ``sample_token``)."""
    if greedy or not (settings.top_k or settings.top_p < 1):
        T = 0.0 if greedy else settings.temperature
        return kernels.sample_rows(rows, rng.random(len(rows)), T, TOP_P_WINDOW_NATS, banned_ids=banned)
    return np.array([sample_token(cid_logprobs(r, r, 1.0, settings.temperature, banned), settings, rng) for r in rows])


def _lockstep(engine, prompts, settings: SamplingSettings, rng, stop: tuple[str, ...], greedy: bool) -> list[list[int]]:
    for p in prompts:
        engine.check_fits(len(p) + settings.max_new_tokens)
    streams = engine.streams(prompts)
    k = len(prompts)
    outs: list[list[int]] = [[] for _ in range(k)]
    active = np.ones(k, dtype=bool)
    for t in range(settings.max_new_tokens):
        banned = engine.eog_ids if t < settings.min_new_tokens else None
        live = np.flatnonzero(active)
        drawn = _draw(streams.last_logits[live], settings, banned, rng, greedy)
        step = np.zeros(k, dtype=np.int32)
        for i, tok in zip(live, drawn.tolist()):
            if engine.is_eog(tok):
                active[i] = False
                continue
            outs[i].append(tok)
            step[i] = tok
            if stop and any(s in engine.detokenize(outs[i]).lstrip() for s in stop):
                active[i] = False
        if not active.any() or t + 1 == settings.max_new_tokens:
            break
        streams.step(step, active)
    return outs


def sample_continuations(engine, prompt: list[int], k: int, settings: SamplingSettings, stop: tuple[str, ...] = ()) -> list[list[int]]:
    """k independent sampled continuations of one prompt (seeded by ``settings.seed``); see ``sample_streams``."""
    if k < 1:
        raise InvalidParameter(f"k must be >= 1, got {k}")
    return sample_streams(engine, [prompt] * k, settings, np.random.default_rng(settings.seed), stop)
