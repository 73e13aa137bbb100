"""Benchmark the C logits kernels (log-probs, mixing, sampling) against numpy and a memory copy (not a test).

For each kernel, all contenders run side by side on the same rows in one
process: per-row time = median over repeats of (one call over all rows) / rows.
Targets (Gemma-3 vocabulary, V = 262,144): C >= 10x numpy float64, >= 3x numpy
float32, and within 3x of copying the rows (np.copyto), i.e. memory speed.

    python bench/bench_kernels.py [--rows 32] [--vocab 262144] [--repeats 15]
"""

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
from ctxlite.runtime import kernels  # noqa: E402


def per_row_us(fn, n_rows: int, repeats: int) -> float:
    fn()  # warm up (page faults, caches, dispatch)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / n_rows * 1e6


def numpy_logprob(x: np.ndarray, targets: np.ndarray, T: float, dtype) -> np.ndarray:
    z = x.astype(dtype, copy=False) / dtype(T)
    m = z.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
    return z[np.arange(len(targets)), targets] - lse


def numpy_mixed(a, b, targets, lam, T, dtype):
    z = (dtype(lam) * a.astype(dtype, copy=False) + dtype(1 - lam) * b.astype(dtype, copy=False)) / dtype(T)
    m = z.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
    return z[np.arange(len(targets)), targets] - lse


def numpy_sample(x: np.ndarray, u: np.ndarray, T: float, window: float, dtype) -> np.ndarray:
    """Windowed inverse-CDF draw per row, vectorised numpy (what the audit did before the C kernel)."""
    out = np.empty(len(x), dtype=np.int64)
    for r in range(len(x)):
        z = x[r].astype(dtype, copy=False) / dtype(T)
        top = z.max()
        cand = np.flatnonzero(z >= top - window)
        cum = np.cumsum(np.exp(z[cand].astype(np.float64) - float(top)))
        out[r] = cand[min(int(np.searchsorted(cum, u[r] * cum[-1], side="right")), len(cand) - 1)]
    return out


def report(title: str, results: dict[str, float]) -> None:
    c = results["C kernel"]
    print(f"\n{title}")
    for name, us in results.items():
        if name == "C kernel":
            note = ""
        elif name.startswith("C kernel"):
            note = f"   {us / c:5.2f}x the plain C kernel's time"
        elif name.startswith("memcpy"):
            note = f"   C / memcpy = {c / us:5.2f}x   (target <= 3)"
        else:
            target = 10 if "float64" in name else 3
            note = f"   C is {us / c:6.2f}x faster   (target >= {target})"
        print(f"  {name:<24s} {us:10.1f} us/row{note}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--vocab", type=int, default=262_144)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--lam", type=float, default=1.5)
    args = p.parse_args()

    rng = np.random.default_rng(0)
    n, V, T = args.rows, args.vocab, args.temperature
    a = (rng.standard_normal((n, V)) * 3).astype(np.float32)
    b = (a + rng.standard_normal((n, V))).astype(np.float32)
    targets = rng.integers(0, V, n)
    banned = np.array([1, 106])  # e.g. EOS / end-of-turn before min_new_tokens
    dst = np.empty_like(a)

    print(f"ctxlite kernels bench: rows={n} V={V} T={T} lam={args.lam} repeats={args.repeats} (median)")
    print(
        f"  {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}, "
        f"rows = {a.nbytes / 2**20:.0f} MiB per side"
    )

    # Correctness guard: the two agree before we time anything.
    np.testing.assert_allclose(
        kernels.logprob_gather(a, targets, T), numpy_logprob(a, targets, T, np.float64), atol=1e-4
    )

    memcpy = per_row_us(lambda: np.copyto(dst, a), n, args.repeats)
    report(
        "logprob_gather (log softmax(x/T)[y])",
        {
            "C kernel": per_row_us(lambda: kernels.logprob_gather(a, targets, T), n, args.repeats),
            "C kernel, 2 banned ids": per_row_us(
                lambda: kernels.logprob_gather(a, targets, T, banned), n, args.repeats
            ),
            "numpy float64": per_row_us(lambda: numpy_logprob(a, targets, T, np.float64), n, args.repeats),
            "numpy float32": per_row_us(lambda: numpy_logprob(a, targets, T, np.float32), n, args.repeats),
            "memcpy (np.copyto)": memcpy,
        },
    )

    memcpy2 = per_row_us(lambda: (np.copyto(dst, a), np.copyto(dst, b)), n, args.repeats)
    report(
        f"mixed_logprob (lam={args.lam}, both rows read)",
        {
            "C kernel": per_row_us(lambda: kernels.mixed_logprob(a, b, targets, args.lam, T), n, args.repeats),
            "C kernel + max|pmi|": per_row_us(
                lambda: kernels.mixed_logprob(a, b, targets, args.lam, T, want_max_abs_pmi=True), n, args.repeats
            ),
            "numpy float64": per_row_us(lambda: numpy_mixed(a, b, targets, args.lam, T, np.float64), n, args.repeats),
            "numpy float32": per_row_us(lambda: numpy_mixed(a, b, targets, args.lam, T, np.float32), n, args.repeats),
            "memcpy (np.copyto)": memcpy2,
        },
    )

    u = rng.random(n)
    report(
        "sample_rows (one token per row from softmax(x/T), 30-nat window)",
        {
            "C kernel": per_row_us(lambda: kernels.sample_rows(a, u, T, 30.0), n, args.repeats),
            "C kernel, 2 banned ids": per_row_us(lambda: kernels.sample_rows(a, u, T, 30.0, banned), n, args.repeats),
            "numpy float64": per_row_us(lambda: numpy_sample(a, u, T, 30.0, np.float64), n, args.repeats),
            "numpy float32": per_row_us(lambda: numpy_sample(a, u, T, 30.0, np.float32), n, args.repeats),
            "memcpy (np.copyto)": memcpy,
        },
    )


if __name__ == "__main__":
    main()
