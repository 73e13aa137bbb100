"""Slow, obviously-right float64 numpy versions of every function in ``ctxlite.runtime.kernels``.

Same signatures and results (up to float32 rounding of the logits path);
used only by the tests.  Clarity over speed: loops over rows, full-precision
log-softmax, no tricks beyond the max-shift that keeps exp finite.  Input
validation is left to the fast versions.
"""

from __future__ import annotations

import numpy as np

from ctxlite.runtime.kernels import MixedLogprob, NoisyHistogram

__all__ = [
    "embed_aggregate",
    "logprob_gather",
    "mixed_logprob",
    "nearest_cosine",
    "noisy_histogram",
    "sample_cdf",
    "sample_rows",
]


def _ban_mask(V: int, n_rows: int, banned_ids, ban_rows) -> np.ndarray:
    """Boolean (n_rows, V): True where a token is banned on that row."""
    mask = np.zeros((n_rows, V), dtype=bool)
    if banned_ids is not None and len(banned_ids) > 0:
        rows = np.ones(n_rows, bool) if ban_rows is None else np.asarray(ban_rows).astype(bool)
        for r in range(n_rows):
            if rows[r]:
                mask[r, np.asarray(banned_ids, dtype=np.int64)] = True
    return mask


def _log_softmax(z: np.ndarray) -> np.ndarray:
    """log softmax of a float64 vector that may contain -inf (at least one finite entry)."""
    m = np.max(z)
    return z - m - np.log(np.sum(np.exp(z - m)))


def logprob_gather(logits, targets, temperature: float = 1.0, banned_ids=None, ban_rows=None) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float32).astype(np.float64)
    n_rows, V = x.shape
    banned = _ban_mask(V, n_rows, banned_ids, ban_rows)
    out = np.empty(n_rows)
    for r in range(n_rows):
        z = np.where(banned[r], -np.inf, x[r] / temperature)
        out[r] = _log_softmax(z)[targets[r]]
    return out


def sample_cdf(row, temperature: float, window: float, banned=None) -> tuple[np.ndarray, np.ndarray]:
    """(candidate ids, running sums of p) of one row's windowed softmax, in id order (T > 0)."""
    x = np.asarray(row, dtype=np.float32).astype(np.float64)
    allowed = np.ones(len(x), bool)
    if banned is not None and len(banned):
        allowed[np.asarray(banned, dtype=np.int64)] = False
    m = x[allowed].max()
    z = (x - m) / temperature
    cand = np.flatnonzero(allowed & (z >= -window))
    return cand, np.cumsum(np.exp(z[cand]))


def sample_rows(logits, uniforms, temperature: float, window: float, banned_ids=None, ban_rows=None) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float32)
    n_rows, V = x.shape
    ban = _ban_mask(V, n_rows, banned_ids, ban_rows)
    out = np.empty(n_rows, dtype=np.int32)
    for r in range(n_rows):
        banned = np.flatnonzero(ban[r])
        if temperature == 0:
            z = np.where(ban[r], -np.inf, x[r].astype(np.float64))
            out[r] = int(np.argmax(z))  # first maximum
            continue
        cand, cum = sample_cdf(x[r], temperature, window, banned)
        k = int(np.searchsorted(cum, uniforms[r] * cum[-1], side="right"))
        out[r] = cand[min(k, len(cand) - 1)]
    return out


def _mix(a: np.ndarray, b: np.ndarray, lam: float) -> np.ndarray:
    if lam == 0:
        return b.copy()
    if lam == 1:
        return a.copy()
    dead = np.isneginf(a) | np.isneginf(b)
    with np.errstate(invalid="ignore"):
        z = lam * a + (1 - lam) * b
    return np.where(dead, -np.inf, z)


def mixed_logprob(
    with_context,
    without_context,
    targets,
    lam: float,
    temperature: float = 1.0,
    banned_ids=None,
    ban_rows=None,
    want_max_abs_pmi: bool = False,
) -> MixedLogprob:
    a = np.asarray(with_context, dtype=np.float32).astype(np.float64)
    b = np.asarray(without_context, dtype=np.float32).astype(np.float64)
    n_rows, V = a.shape
    banned = _ban_mask(V, n_rows, banned_ids, ban_rows)
    logprob = np.empty(n_rows)
    pmi_out = np.empty(n_rows) if want_max_abs_pmi else None
    for r in range(n_rows):
        allowed = ~banned[r]
        z = np.where(allowed, _mix(a[r], b[r], lam) / temperature, -np.inf)
        logprob[r] = _log_softmax(z)[targets[r]]
        if want_max_abs_pmi:
            log_qa = _log_softmax(a[r][allowed] / temperature)
            log_qb = _log_softmax(b[r][allowed] / temperature)
            both_zero = np.isneginf(log_qa) & np.isneginf(log_qb)
            with np.errstate(invalid="ignore"):
                pmi = log_qa[~both_zero] - log_qb[~both_zero]
            pmi_out[r] = np.max(np.abs(pmi))
    return MixedLogprob(logprob=logprob, max_abs_pmi=pmi_out)


def noisy_histogram(votes, n_classes: int, noise) -> NoisyHistogram:
    counts = np.zeros(n_classes, dtype=np.int64)
    for v in np.asarray(votes, dtype=np.int64).ravel():
        counts[v] += 1
    noisy = counts + np.asarray(noise, dtype=np.float64)
    return NoisyHistogram(counts=counts, noisy_counts=noisy, argmax=int(np.argmax(noisy)))


def _norm(x: np.ndarray) -> float:
    s = np.max(np.abs(x))
    return 0.0 if s == 0 else float(s * np.sqrt(np.sum((x / s) ** 2)))


def embed_aggregate(embeddings, clip_norm: float, noise) -> np.ndarray:
    E = np.asarray(embeddings, dtype=np.float64)
    total = np.zeros(E.shape[1])
    for row in E:
        norm = _norm(row)
        total += row if norm <= clip_norm else row * (clip_norm / norm)
    return (total + np.asarray(noise, dtype=np.float64)) / E.shape[0]


def cosine_similarities(query, candidates) -> np.ndarray:
    """cos(query, c_i) for every candidate, 0 where either norm is 0 (helper for tests)."""
    q = np.asarray(query, dtype=np.float64)
    qn = _norm(q)
    sims = []
    for c in np.asarray(candidates, dtype=np.float64):
        cn = _norm(c)
        sims.append(0.0 if qn == 0 or cn == 0 else float(np.dot(q / qn, c / cn)))
    return np.array(sims)


def nearest_cosine(query, candidates) -> int:
    return int(np.argmax(cosine_similarities(query, candidates)))
