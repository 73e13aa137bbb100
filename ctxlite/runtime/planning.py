"""What a run costs before it runs: its exact decode counts and a time estimate for this machine.

:func:`plan_run` runs the whole job once against the engine in *dry-run* mode: every decode the
job asks for is counted (calls and tokens, after KV reuse, exactly as a real run would issue
them) and answered with flat logits instead of being computed. The job's control flow does not
depend on the logits' values except where it *samples* (a generated response, a generated
text): with flat logits those run to ``max_new_tokens``, so the counts are then an upper bound,
and the plan says so. The seconds are an estimate: :func:`calibrate` times real decodes on this
machine and fits seconds = a · tokens + b · calls (least squares), then the plan multiplies out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ctxlite.errors import InvalidParameter
from ctxlite.runtime.backend import DryRun


@dataclass(frozen=True)
class Calibration:
    seconds_per_token: float
    seconds_per_call: float


@dataclass(frozen=True)
class Plan:
    decode_calls: int
    tokens_decoded: int
    estimated_seconds: float
    calibration: Calibration
    exact: bool  # False: sampled outputs were counted at their maximum length (an upper bound), or see ``estimate``
    estimate: str | None = None  # why the counts are neither exact nor a bound (a logit-dependent path)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        minutes, seconds = divmod(round(self.estimated_seconds), 60)
        what = "exact" if self.exact else "an upper bound (sampled outputs counted at their maximum length)"
        if self.estimate:
            what = f"an estimate ({self.estimate})"
        return (
            f"plan: {self.decode_calls} forward passes (llama_decode calls), {self.tokens_decoded} tokens "
            f"decoded; about {minutes} min {seconds:02d} s on this machine (calibrated: "
            f"{1e3 * self.calibration.seconds_per_token:.2f} ms/token + {1e3 * self.calibration.seconds_per_call:.1f} "
            f"ms/pass); the counts are {what}; nothing was run"
        )


def calibrate(engine, sizes: Sequence[int] = (16, 128), repeats: int = 3) -> Calibration:
    """Time real decodes of ``sizes`` tokens from an empty cache and fit seconds = a · tokens + b per call."""
    n_tok = max(sizes)
    base = engine.tokenize("The quick brown fox jumps over the lazy dog. " * (n_tok // 8 + 1))[:n_tok]
    rows, times = [], []
    for n in sizes:
        for _ in range(repeats):
            engine.clear()
            calls = engine.decode_calls
            start = time.perf_counter()
            engine.logprobs(base[:n], n - 1)
            times.append(time.perf_counter() - start)
            rows.append([n, engine.decode_calls - calls])
    engine.clear()
    (a, b), *_ = np.linalg.lstsq(np.asarray(rows, dtype=float), np.asarray(times), rcond=None)
    return Calibration(max(float(a), 0.0), max(float(b), 0.0))


def dry_count(engine, job: Callable[[], int]):
    """What ``job(engine)`` returns when run with ``engine`` in dry-run mode (it counts its own
    decodes from ``engine.tokens_decoded``), or None where the backend cannot run dry. Nothing runs,
    so nothing is counted: the engine's counters are restored, and its cache is cleared (a dry run
    leaves the bookkeeping of decodes that never ran); a dry run in progress (a plan) stays one."""
    if not isinstance(engine, DryRun):
        return None
    was, counters = engine.dry_run, (engine.decode_calls, engine.tokens_decoded)
    engine.dry_run = True
    try:
        return job()
    finally:
        engine.dry_run = was
        engine.decode_calls, engine.tokens_decoded = counters
        engine.clear()


def plan_run(engines: Sequence, job: Callable[[], None], sampled: bool, estimate: str | None = None) -> Plan:
    """Run ``job`` with every engine of ``engines`` in dry-run mode and return what it would cost.

    ``sampled``: the job generates text, so its counts are an upper bound. ``estimate``: the job's
    decodes depend on the logits in another way (adaptive search), said in the plan."""
    engines = [e for e in engines if e is not None]
    if not engines or not all(isinstance(e, DryRun) for e in engines):
        raise InvalidParameter("planning needs the llama.cpp engine (a backend that can run dry)")
    cal = calibrate(engines[0])
    before = [(e.decode_calls, e.tokens_decoded) for e in engines]
    for e in engines:
        e.dry_run = True
        e.clear()
    try:
        job()
    finally:
        for e in engines:
            e.dry_run = False
            e.clear()
    calls = sum(e.decode_calls - c for e, (c, _) in zip(engines, before))
    tokens = sum(e.tokens_decoded - t for e, (_, t) in zip(engines, before))
    seconds = cal.seconds_per_token * tokens + cal.seconds_per_call * calls
    return Plan(calls, tokens, float(seconds), cal, exact=not sampled and estimate is None, estimate=estimate)
