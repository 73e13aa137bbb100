"""Sampling from a model's next-token distribution: one token from log-probabilities, and
lock-step continuations of many prompts that share the engine's KV cache.

Temperature T scales logits, p_T(v) = softmax(l/T)(v); top-k keeps the k most likely tokens,
top-p (nucleus sampling, Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration")
the smallest set whose mass reaches p.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ctxlite.errors import InvalidParameter
from ctxlite.runtime import kernels

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
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
            raise InvalidParameter(f"seed must be a whole number >= 0 (a numpy Generator seed), got {self.seed!r}")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens or self.max_new_tokens < 1:
            raise InvalidParameter(
                f"need 0 <= min_new_tokens <= max_new_tokens and max_new_tokens >= 1, "
                f"got {self.min_new_tokens}, {self.max_new_tokens}"
            )


def log_softmax(logits: np.ndarray, temperature: float, banned_ids=None) -> np.ndarray:
    """log softmax(l / T) over the whole vocabulary in float64; banned tokens get −inf (never dropped)."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    if banned_ids is not None and len(banned_ids):
        z[np.asarray(banned_ids)] = -np.inf
    z -= z.max()
    return z - np.log(np.exp(z).sum())


def sample_token(
    logp: np.ndarray, settings: SamplingSettings, rng: np.random.Generator, *, full_vocabulary: bool = False
) -> int:
    """Draw one token id from log-probabilities, after optional top-k / top-p filtering.

    ``full_vocabulary``: draw from ``logp`` itself, every token with probability > 0 a candidate (no
    window, no filter; top-k / top-p must be off): what ε-bounded CID needs, since a filter puts 0
    where p(·|∅) does not."""
    if full_vocabulary:
        if settings.top_k or settings.top_p < 1:
            raise InvalidParameter("sampling from the full vocabulary cannot apply top-k / top-p")
        cand = np.flatnonzero(logp > -np.inf)
    elif settings.top_k:
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


def sample_streams(
    engine,
    prompts: Sequence[Sequence[int]],
    settings: SamplingSettings,
    rng: np.random.Generator,
    stop: tuple[str, ...] = (),
    greedy: bool = False,
) -> list[list[int]]:
    """One sampled continuation per prompt (ordinary decoding, λ = 1), prompts in lock-step.

    Up to ``engine.max_streams`` prompts run as ``Engine.streams`` at a time
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
    width = engine.max_streams
    out: list[list[int]] = []
    for lo in range(0, len(prompts), width):
        out.extend(_lockstep(engine, prompts[lo : lo + width], settings, rng, stop, greedy))
    return out


def _draw(rows: np.ndarray, settings: SamplingSettings, banned, rng, greedy: bool) -> np.ndarray:
    """One token per row of raw logits under ``settings`` (top-k/top-p through ``sample_token``)."""
    if greedy or not (settings.top_k or settings.top_p < 1):
        T = 0.0 if greedy else settings.temperature
        return kernels.sample_rows(rows, rng.random(len(rows)), T, TOP_P_WINDOW_NATS, banned_ids=banned)
    return np.array([sample_token(log_softmax(r, settings.temperature, banned), settings, rng) for r in rows])


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


def sample_continuations(
    engine, prompt: list[int], k: int, settings: SamplingSettings, stop: tuple[str, ...] = ()
) -> list[list[int]]:
    """k independent sampled continuations of one prompt (seeded by ``settings.seed``); see ``sample_streams``."""
    if k < 1:
        raise InvalidParameter(f"k must be >= 1, got {k}")
    return sample_streams(engine, [prompt] * k, settings, np.random.default_rng(settings.seed), stop)
