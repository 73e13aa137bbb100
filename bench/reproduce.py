"""Run the two papers' claims on the registry's models and say, claim by claim, whether they hold here.

Seed 000 is context influence (Flemings et al., ACL 2025), seed 001 ContextLeak (Choi et al.,
2025). Each claim (``bench/reproduction/``: one small function per claim) measures what the claim
is about on ``gemma-3-270m`` (and ``smollm2-135m-instruct`` where a second model is needed) and
prints one line:

    000.6   REPRODUCED   <reason> [<test>: effect, CI, statistic, p, n]

- ``reproduced``: the claimed direction, significant by a one-sided test at --alpha (Wilcoxon
  signed-rank on paired values, Page's trend test over ordered settings, or the claim's own bound);
- ``not reproduced``: the direction does not hold, or not significantly (the reason says which);
- ``not testable here``: the claim needs what is not here (a model pair, a remote model), with
  whatever could be measured anyway;
- ``error``: the claim's code failed.

It writes OUT/reproduce.json (every claim's verdict, numbers, test, settings and per-example data)
and OUT/reproduce.html (one offline page, ctxlite's own plots). ``--quick`` runs small versions
(minutes) of the claims marked robust only (unless --claims names others) and exits 1 when one is
not reproduced or any claim errs: a check of directions by statistical tests, never of times. The full run is the reproduction
(``make reproduce``; its report is committed under docs/reproduction/).

    python bench/reproduce.py [--quick] [--claims 000.6,001] [--seed 0] [--threads 1]
                              [--alpha 0.05] [--out runs/reproduce]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout
sys.path.insert(0, str(HERE))

from reproduction import claims, report  # noqa: E402,F401  (importing claims registers them)
from reproduction.framework import RunContext, failed_assertions, run_claims, select, summary_line  # noqa: E402


def environment() -> dict:
    import ctxlite

    try:
        import llama_cpp

        llama = llama_cpp.__version__
    except Exception:  # noqa: BLE001 - reported, not needed
        llama = None
    return {
        "ctxlite": ctxlite.__version__,
        "llama_cpp_python": llama,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small runs (minutes); exit 1 if a robust claim fails")
    ap.add_argument("--claims", default="", help="comma-separated ids or papers (000.6, 000.1, 001); default all")
    ap.add_argument("--seed", type=int, default=0, help="seed of every sampled response and audit (default 0)")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads per engine (default 1)")
    ap.add_argument("--alpha", type=float, default=0.05, help="level of each one-sided test (default 0.05)")
    ap.add_argument("--out", default=None, help="folder for reproduce.json and reproduce.html "
                    "(default runs/reproduce, or runs/reproduce-quick with --quick)")  # fmt: skip
    ap.add_argument("--list", action="store_true", help="list the claims and exit")
    args = ap.parse_args(argv)
    named = [c for c in args.claims.split(",") if c.strip()]
    try:
        chosen = select(named)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    if args.quick and not named:  # the CI check: the robust directions only
        chosen = [c for c in chosen if c.robust]
    if args.list:
        for c in chosen:
            print(f"{c.id:<7} {'robust ' if c.robust else '       '}{c.statement}")
        return 0
    if not 0 < args.alpha < 1 or args.threads < 1:
        print("error: --alpha must be in (0, 1) and --threads >= 1", file=sys.stderr)
        return 2
    out = Path(args.out or ("runs/reproduce-quick" if args.quick else "runs/reproduce"))
    ctx = RunContext(quick=args.quick, seed=args.seed, threads=args.threads, alpha=args.alpha)
    start, runs = time.monotonic(), []

    def done(run) -> None:  # print the claim's line and rewrite the report: finished work is kept
        print(summary_line(run), flush=True)
        runs.append(run)
        report.write(out, report.summary(runs, ctx, env, time.monotonic() - start))

    env = environment()
    print(f"{'quick' if args.quick else 'full'} run of {len(chosen)} claim(s), seed {args.seed}, "
          f"{args.threads} thread(s), alpha {args.alpha:g}", flush=True)  # fmt: skip
    try:
        run_claims(chosen, ctx, on_done=done)
    except KeyboardInterrupt:
        print(f"interrupted: {len(runs)} finished claim(s) kept in {out}", file=sys.stderr)
        return 130
    finally:
        ctx.close()
    result = report.summary(runs, ctx, env, time.monotonic() - start)
    js, html = report.write(out, result)
    print(f"{len(runs)} claim(s) in {result['seconds']:.0f} s ({result['cpu_seconds']:.0f} s of CPU): "
          + ", ".join(f"{k} {v}" for k, v in result["outcomes"].items()))  # fmt: skip
    print(f"wrote {js} and {html}")
    if args.quick:
        failed = failed_assertions(runs)
        if failed:
            print("quick check FAILED: " + ", ".join(r.claim.id for r in failed), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
