"""Certified epsilon per audit: the lower-bound methods side by side on the same trials.

Audits of known epsilon, simulated (no model): the Gaussian mechanism (IN
scores ~ N(mu, 1), OUT ~ N(0, 1); its epsilon at delta is the mu-GDP curve's)
and randomised response (exactly eps-DP; scores are the released bits, so
every threshold ties). For each setting and trial count n (n / 2 IN and
n / 2 OUT trials) every method bounds the same audits at 95 % confidence:

* ``split-old``: the split as ctxlite chose it before (selection-half ties
  broken by the plug-in estimate) -- today's default before the corner grid;
* ``split``: the split with the median-limit tie-break;
* ``multi-split``: the median of 25 splits at alpha / 2;
* ``bonferroni``: every observed score at alpha / ((n_in + n_out) / 2);
* ``corner-grid``: the ROC corners at error counts 0, 1, 2, 4, ... at alpha / K
  -- the new default.

Printed: the median certified epsilon per method with its over-claim rate (bound
above the true epsilon); then the certified epsilon per 100 trials (the median
times 100 / n: what each 100 trials of model time buy, the issue's measure of
power); and, with ``--log RUN.jsonl``, the same methods on a finished
``ctxlite audit`` log's own trials beside the audited pair's epsilon (exact, or
an upper bound for rnm: its ``privacy_profile_kind``). The last line is
``gain_gaussian_mu1_n200=G overclaim_max=R``: G = median corner-grid bound /
median split-old bound on the Gaussian mu = 1 audits with 200 trials, R = the
largest over-claim rate of the corner grid over the simulated settings.
A measurement, not a test (the soundness tests are tests/unit/privacy/test_soundness.py).

    python bench/bench_power.py [--audits 200] [--log RUN.jsonl]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import zlib

import numpy as np

from ctxlite.privacy import estimators
from ctxlite.privacy.estimators import Bonferroni, CanaryScoreAuditor, CornerGrid, MultiSplit, Split, gdp_epsilon

ALPHA, DELTA = 0.05, 1e-5
TRIALS = (100, 200, 500, 1000)
METHODS = ("split-old", "split", "multi-split", "bonferroni", "corner-grid")


@contextlib.contextmanager
def plug_in_tie_break():
    """The split's tie-break before the median-limit key: setting that key's level to alpha makes it
    repeat the bound, so the plug-in estimate decides between equal bounds, as it did."""
    saved = estimators._TIE_BREAK_ALPHA
    estimators._TIE_BREAK_ALPHA = ALPHA
    try:
        yield
    finally:
        estimators._TIE_BREAK_ALPHA = saved


def bounds(ins, outs, seed: int, delta: float) -> dict[str, float]:
    auditor = CanaryScoreAuditor(ins, outs)
    selections = {
        "split": Split(0.5, seed),
        "multi-split": MultiSplit(fraction=0.5, seed=seed),
        "bonferroni": Bonferroni(),
        "corner-grid": CornerGrid(),
    }
    out = {k: auditor.epsilon_clopper_pearson(ALPHA, delta, sel).epsilon for k, sel in selections.items()}
    with plug_in_tie_break():
        out["split-old"] = auditor.epsilon_clopper_pearson(ALPHA, delta, Split(0.5, seed)).epsilon
    return out


def settings():
    """(name, true epsilon, delta, sampler(rng, n_side) -> (ins, outs))."""
    for mu in (0.5, 1.0, 2.0):
        yield (
            f"gaussian mu={mu:g}",
            gdp_epsilon(mu, DELTA),
            DELTA,
            lambda rng, k, mu=mu: (
                rng.normal(mu, 1.0, k),
                rng.normal(0.0, 1.0, k),
            ),
        )
    for eps in (1.0, 2.0):
        p = 1.0 / (1.0 + math.exp(-eps))
        yield (
            f"randomised response eps={eps:g}",
            eps,
            0.0,
            lambda rng, k, p=p: (
                (rng.random(k) < p).astype(float),
                (rng.random(k) < 1 - p).astype(float),
            ),
        )


def logged_trials(path: str) -> dict[str, tuple[list[tuple[bool, float]], tuple[float, bool] | None]]:
    """Per epsilon of a finished ``ctxlite audit --out`` log: its trials' (Z, score) in trial order and
    the audited pair's (epsilon, exact?) from its report, read back as ``ctxlite report`` reads it:
    exact, or an upper bound (rnm); None where the report has none."""
    from ctxlite.records import read_run_log
    from ctxlite.runs import report_log

    report = report_log(path).report
    exact = {}
    for row in report.rows if report is not None else ():
        key = "inf" if row.epsilon is None or math.isinf(row.epsilon) else f"{row.epsilon:g}"
        value = row.epsilon_upper_bound
        exact[key] = None if value is None else (value, row.privacy_profile_kind == "exact")
    trials: dict[str, list] = {}
    for key, rec in read_run_log(path, "audit").records.items():
        if "/trial=" in key:
            trials.setdefault(key.split("/")[0].removeprefix("eps="), []).append(
                (int(key.split("trial=")[1]), bool(rec["z"]), float(rec["score"]))
            )
    return {eps: ([(z, x) for _, z, x in sorted(t)], exact.get(eps)) for eps, t in trials.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--audits", type=int, default=200, help="simulated audits per setting and trial count")
    parser.add_argument("--log", help="also bound the trials of this finished audit log")
    args = parser.parse_args()
    print(f"median certified epsilon over {args.audits} audits (95 % confidence); over-claim rate in brackets")
    print(f"{'setting':<28} {'true eps':>8} {'n':>5} " + " ".join(f"{m:>18}" for m in METHODS))
    gain, overclaim_max, per_100 = None, 0.0, []
    for name, true_eps, delta, sample in settings():
        for n in TRIALS:
            rng = np.random.default_rng([n, zlib.crc32(name.encode())])  # str hash() varies per process
            runs = [bounds(*sample(rng, n // 2), seed=k, delta=delta) for k in range(args.audits)]
            medians = {m: float(np.median([r[m] for r in runs])) for m in METHODS}
            over = {m: float(np.mean([r[m] > true_eps for r in runs])) for m in METHODS}
            overclaim_max = max(overclaim_max, over["corner-grid"])
            cells = " ".join(f"{medians[m]:>11.3f} [{over[m]:.3f}]" for m in METHODS)
            print(f"{name:<28} {true_eps:>8.3f} {n:>5} {cells}", flush=True)
            per_100.append((name, true_eps, n, {m: medians[m] * 100.0 / n for m in METHODS}))
            if name == "gaussian mu=1" and n == 200:
                gain = medians["corner-grid"] / medians["split-old"] if medians["split-old"] > 0 else math.inf
    print("certified epsilon per 100 trials (median certified epsilon x 100 / n)")
    print(f"{'setting':<28} {'true eps':>8} {'n':>5} " + " ".join(f"{m:>18}" for m in METHODS))
    for name, true_eps, n, rate in per_100:
        print(f"{name:<28} {true_eps:>8.3f} {n:>5} " + " ".join(f"{rate[m]:>18.3f}" for m in METHODS))
    if args.log:  # the first n trials of the log, at each n it has; the pair's epsilon beside (<= : an upper bound)
        print(f"{'log, first n trials':<28} {'pair eps':>8} {'n':>5}")
        for eps, (trials, exact) in sorted(logged_trials(args.log).items()):
            for n in [m for m in TRIALS if m <= len(trials)] or [len(trials)]:
                ins = [x for z, x in trials[:n] if z]
                outs = [x for z, x in trials[:n] if not z]
                b = bounds(ins, outs, seed=0, delta=DELTA)
                cells = " ".join(f"{b[m]:>18.3f}" for m in METHODS)
                pair = "-" if exact is None else ("" if exact[1] else "<=") + f"{exact[0]:.3f}"
                print(f"{'log eps=' + eps:<28} {pair:>8} {n:>5} {cells}")
    print(f"gain_gaussian_mu1_n200={gain:.2f} overclaim_max={overclaim_max:.3f}")


if __name__ == "__main__":
    main()
