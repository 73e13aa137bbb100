"""The token loop of ``ctxlite serve``: ε-bounded CID, one sampled token at a time.

Each step reads the next-token logits with the private context (stream 0: its prompt starts with
the context, so the engine's KV cache keeps the context's cells from one request to the next) and
without it (stream 1), computes the tight λ_t*, the largest λ' ≤ λ with
max_v |log p̄_λ'(v|D) − log p_T(v|∅)| ≤ ε (:func:`ctxlite.influence.cid.tight_step`: about twice
the sufficient min(λ, ε / (2·max_v |pmi_D(v)|)) that ``ctxlite score`` keeps, with the bound checked
on the distribution sampled), and samples one token from the whole mixed distribution
(no top-k, top-p or sampling window: a token p_T(·|∅) allows is never given probability 0). Both
streams then take the sampled token. The end-of-generation token is sampled like any other: it is
released (the response stops), so its step counts.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ctxlite.influence.cid import check_epsilon, check_lambda, tight_step
from ctxlite.runtime.sampling import SamplingSettings, sample_token


@dataclass(frozen=True)
class Step:
    """One sampled token: its id, λ_t*, max_v |pmi_D(v)| and the realised bound, max_v
    |log p̄(v|D) − log p_T(v|∅)| of the distribution sampled (≤ ε when the loop is bounded; where
    ``realised`` was not measured, the bound 2·λ_t*·max|pmi|); ``eog``: it ends the response."""

    token: int
    lam: float
    max_abs_pmi: float
    eog: bool
    realised: float | None = None

    @property
    def epsilon(self) -> float:
        return 2.0 * self.lam * self.max_abs_pmi if self.realised is None else self.realised


def steps(
    engine,
    prompt_with: Sequence[int],
    prompt_without: Sequence[int],
    lam: float,
    epsilon: float | None,
    temperature: float,
    max_tokens: int,
    seed: int | None,
) -> Iterator[Step]:
    """Up to ``max_tokens`` steps of (ε-bounded) CID; the caller may stop early (the generator is
    simply not resumed). ``seed`` None draws from the OS's entropy."""
    lam, epsilon = check_lambda(lam), check_epsilon(epsilon)
    settings = SamplingSettings(temperature=temperature, min_new_tokens=0, max_new_tokens=max_tokens)
    engine.check_fits(max(len(prompt_with), len(prompt_without)) + max_tokens)
    rng = np.random.default_rng(seed)
    streams = engine.streams([list(prompt_with), list(prompt_without)])
    for t in range(max_tokens):
        rows = streams.last_logits
        logp, lam_t, m, realised = tight_step(rows[0], rows[1], lam, epsilon, temperature)
        token = sample_token(logp, settings, rng, full_vocabulary=True)
        eog = bool(engine.is_eog(token))
        yield Step(token, lam_t, m, eog, realised)
        if eog:
            return
        if t + 1 < max_tokens:
            streams.step([token, token])


FORCED_ROWS_BYTES = 1 << 28
"""The most logits rows (bytes of float32, both sequences') teacher forcing holds at once (128 rows
of a 262k vocabulary); a longer prompt is scored in pieces, each a from-scratch decode of both
sequences up to its last token: quadratic in the prompt's length, and the engine is held meanwhile
(a path for testing a server, never a deployment's)."""


def forced_steps(
    engine,
    prompt_with: Sequence[int],
    prompt_without: Sequence[int],
    targets: Sequence[int],
    lam: float,
    epsilon: float | None,
    temperature: float,
) -> list[tuple[Step, float]]:
    """Teacher forcing: for each of ``targets`` (the tokens that follow both prompts, in order) the
    step the sampler would take there -- the tight λ_t* on the two rows before it
    (:func:`ctxlite.influence.cid.tight_step`) -- and log p̄_λ_t*(target | D, ·), the mixed
    distribution's log-probability of that token. The rows are decoded from scratch, each sequence
    in one pass (as ``ctxlite score`` decodes them: a local engine on the same build reproduces them bit for bit, up to
    ``FORCED_ROWS_BYTES``), not a token at a time as sampling steps them (which rounds otherwise,
    by up to ~0.1 nat here)."""
    lam, epsilon = check_lambda(lam), check_epsilon(epsilon)
    with_, without = [*prompt_with, *targets], [*prompt_without, *targets]
    engine.check_fits(max(len(with_), len(without)), "context + prompt")
    piece = max(1, FORCED_ROWS_BYTES // (2 * 4 * engine.n_vocab))
    out: list[tuple[Step, float]] = []
    for lo in range(0, len(targets), piece):
        hi = min(len(targets), lo + piece)
        a = engine.logits_rows(with_[: len(prompt_with) + hi], len(prompt_with) + lo)
        b = engine.logits_rows(without[: len(prompt_without) + hi], len(prompt_without) + lo)
        for j in range(lo, hi):
            logp, lam_t, m, realised = tight_step(a[j - lo], b[j - lo], lam, epsilon, temperature)
            token = int(targets[j])
            out.append((Step(token, lam_t, m, bool(engine.is_eog(token)), realised), float(logp[token])))
    return out


class TextStream:
    """The text of tokens as they come: each :meth:`add` returns the characters completed so far
    (a character split over tokens comes out with the token that ends it); :meth:`flush` the rest."""

    def __init__(self, engine):
        self.engine = engine
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token: int) -> str:
        return self._decoder.decode(self.engine.token_bytes(token))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


class StopText:
    """Text released up to the first occurrence of any stop sequence, piece by piece.

    :meth:`add` returns what can be shown now: it holds back the longest suffix that is a proper
    prefix of a stop sequence (it may still become one), so no shown text is ever part of a stop
    sequence; once one occurs, ``stopped`` is set and the text before it is the last returned.
    Every stop occurrence starts inside the held text or after it: a start inside the shown text
    would make a longer held suffix, so the scan never looks back. Cutting the text is
    post-processing of released tokens: the tokens sampled up to the stop are charged all the same.
    """

    def __init__(self, stops: Sequence[str]):
        self.stops = tuple(s for s in stops if s)
        self.held = ""
        self.stopped = False

    def add(self, piece: str) -> str:
        if self.stopped:
            return ""
        text = self.held + piece
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if found:
            self.stopped, self.held = True, ""
            return text[: min(found)]
        keep = max((n for s in self.stops for n in range(1, len(s)) if text.endswith(s[:n])), default=0)
        self.held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        """The held text at the end of the response (no stop sequence followed it)."""
        rest, self.held = ("" if self.stopped else self.held), ""
        return rest
