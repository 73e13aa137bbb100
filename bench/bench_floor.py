"""Benchmark the noise floor against a second build of llama.cpp (not a test).

The floor (``ctxlite.influence.noise``) claims to measure how far rounding alone moves τ_i. This
checks it where it matters: the same examples are scored by two builds of llama-cpp-python (by
default the project's portable AVX2 build, this interpreter, and a native AVX-512 build,
``--second``), each in its own subprocess, and every n-gram's τ_i of the second build is compared
with the first's: **coverage** is the fraction of n-grams with |τ_i(second) − τ_i(first)| ≤ the
floor the first build reported for that result (target ≥ 0.95). ``--ubatch N`` adds a third run:
the first build with ``n_batch = n_ubatch = N`` (another batch size on the same machine).

Data: the first --samples bundled score samples (ctxlite/data/score_sample.jsonl) and
--per-length long contexts of each of --lengths tokens (bench_search.long_examples). Each
example's response is fixed once, by the first build (its bundled response, else CID at λ = 1
with --seed), and both builds score that text. Settings: λ = 1, T = 0.8, disjoint --ngram windows, exhaustive search (every n-gram
measured), default probes. The floor's cost is its probes' decoded tokens over the rest of the
run's (the base, the without-context pass and the ablations), ctxlite's own counts.

    python bench/bench_floor.py [--samples 30] [--lengths 512] [--per-length 2]
                                [--second /work/venv-native/bin/python] [--ubatch 37] [--threads 1]

Its last line: ``coverage=C floor_share=S`` over every n-gram and every example.
"""

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout
DATA = ROOT / "ctxlite" / "data" / "score_sample.jsonl"


def worker(args) -> None:
    """Score the examples of ``args.worker_in`` on this interpreter's llama.cpp; write ``args.worker_out``."""
    import llama_cpp

    from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings
    from ctxlite.runtime.engine import Engine, EngineConfig
    from ctxlite.runtime.planning import dry_count

    spec = json.loads(Path(args.worker_in).read_text(encoding="utf-8"))
    cfg = EngineConfig(n_ctx=spec["n_ctx"], n_threads=args.threads, n_batch=args.n_batch)
    engine = Engine(args.model, cfg)
    if spec.get("make"):  # the first build: build the long contexts and fix the responses
        spec["examples"] = fixed_examples(engine, spec)
    settings = InfluenceSettings(lambdas=(1.0,), ngram=spec["ngram"], search="exhaustive")
    scorer = InfluenceScorer(engine, "qa", settings)
    bare = InfluenceScorer(engine, "qa", dataclasses.replace(settings, null_ablations=0))

    def count(s, ex) -> int:
        before = engine.tokens_decoded
        s.score(ex)
        return engine.tokens_decoded - before

    out = []
    for d in spec["examples"]:
        ex = Example(context=d["context"], query=d["query"], response=d["response"], id=d["id"])
        t0, tok0 = time.perf_counter(), engine.tokens_decoded
        r = scorer.score(ex).results[0]
        seconds, tokens = time.perf_counter() - t0, engine.tokens_decoded - tok0
        floor = r.noise_floor
        without = dry_count(engine, lambda: count(bare, ex))  # the same run without probes, counted dry
        out.append(
            {
                "id": ex.id,
                "context_tokens": r.context_tokens,
                "response_tokens": len(r.response_ids),
                "tau": {str(g.start): g.influence for g in r.ngrams},
                "floor": floor.max,
                "probes": len(floor.sums),
                "probe_sums": floor.sums,
                "floor_per_token": floor.per_token,
                "per_token": {str(g.start): g.per_token for g in r.ngrams},
                "null_tokens": r.search.null_tokens,
                "tokens_without_probes": without,
                "tokens": tokens,
                "seconds": seconds,
            }
        )
        print(
            f"  {ex.id}: {len(r.ngrams)} n-grams, floor {floor.max:.3f}, {seconds:.1f} s", file=sys.stderr, flush=True
        )
    info = llama_cpp.llama_print_system_info().decode().strip()
    result = {"system_info": info, "n_batch": args.n_batch, "examples": spec["examples"], "results": out}
    Path(args.worker_out).write_text(json.dumps(result), encoding="utf-8")


def fixed_examples(engine, spec) -> list[dict]:
    from bench_search import fixed_response, long_examples

    from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings

    samples = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    exs = [
        Example(context=s["context"], query=s["query"], response=s.get("response"), id=s["id"])
        for s in samples[: spec["samples"]]
    ]
    exs += long_examples(engine, samples, spec["lengths"], spec.get("per_length", 1))
    plain = InfluenceScorer(engine, "qa", InfluenceSettings(lambdas=(1.0,), ngram=spec["ngram"]))
    exs = [fixed_response(engine, plain, ex, spec["seed"]) for ex in exs]
    return [{"id": e.id, "context": e.context, "query": e.query, "response": e.response} for e in exs]


def run_build(python: str, spec: dict, args, n_batch: int, label: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.json", Path(tmp) / "out.json"
        src.write_text(json.dumps(spec), encoding="utf-8")
        cmd = [python, __file__, "--worker-in", str(src), "--worker-out", str(dst), "--threads", str(args.threads)]
        cmd += ["--n-batch", str(n_batch)] + (["--model", args.model] if args.model else [])
        print(f"{label}: {python} (n_batch {n_batch})", flush=True)
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'bench'}")
        subprocess.run(cmd, check=True, env=env)
        return json.loads(dst.read_text(encoding="utf-8"))


def compare(first: dict, other: dict, label: str) -> tuple[int, int]:
    """Print the per-example coverage of ``other``'s τ_i by ``first``'s floor; return (covered, n-grams)."""
    print(f"\n{label} against the first build's floor")
    print(f"  second: {other['system_info']} (n_batch {other['n_batch']})")
    print(
        f"  {'example':<22} {'L':>4} {'|y|':>4} {'n-grams':>7} {'floor':>7} {'max |Δτ|':>9} {'mean |Δτ|':>9} {'covered':>8}"
    )
    covered = total = 0
    for a, b in zip(first["results"], other["results"]):
        assert a["id"] == b["id"] and a["tau"].keys() == b["tau"].keys(), (a["id"], b["id"])
        diffs = [abs(b["tau"][k] - a["tau"][k]) for k in a["tau"]]
        ok = sum(d <= a["floor"] for d in diffs)
        covered, total = covered + ok, total + len(diffs)
        print(
            f"  {a['id']:<22} {a['context_tokens']:>4} {a['response_tokens']:>4} {len(diffs):>7} {a['floor']:>7.3f} "
            f"{max(diffs):>9.3f} {sum(diffs) / len(diffs):>9.3f} {ok:>4}/{len(diffs):<3}"
        )
    print(f"  coverage {covered}/{total} = {covered / total:.3f}")
    return covered, total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=30, help="bundled samples (0 = none)")
    p.add_argument("--lengths", default="512", help="long-context lengths in tokens ('' = none)")
    p.add_argument("--per-length", type=int, default=1, help="long contexts per length (each from another offset)")
    p.add_argument(
        "--second", default="/work/venv-native/bin/python", help="the second build's interpreter ('' = not run)"
    )
    p.add_argument("--ubatch", type=int, default=0, help="also the first build with this n_batch (0 = not run)")
    p.add_argument("--ngram", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default=None)
    p.add_argument("--dump", default=None, help="also write every build's results (JSON) to this file")
    p.add_argument("--first-from", default=None, help="take the first build's results from an earlier --dump")
    p.add_argument("--n-batch", type=int, default=512, help=argparse.SUPPRESS)
    p.add_argument("--worker-in", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker_in:
        return worker(args)
    from ctxlite.influence import noise

    lengths = [int(x) for x in args.lengths.split(",") if x]
    spec = {"make": True, "samples": args.samples, "lengths": lengths, "ngram": args.ngram, "seed": args.seed}
    spec["per_length"] = args.per_length
    spec["n_ctx"] = max(lengths + [512]) + 256
    print(
        f"noise floor vs a second build: {args.samples} bundled samples + contexts of {lengths} tokens, "
        f"{args.ngram}-grams, λ = 1, exhaustive search, probes: budget {noise.BUDGET:g} of the run's tokens, "
        f"at least {noise.MIN_PAIRS} pairs; --threads {args.threads}; load average {os.getloadavg()[0]:.2f}"
    )
    if args.first_from:
        first = json.loads(Path(args.first_from).read_text(encoding="utf-8"))["first"]
        print(f"first build: from {args.first_from}")
    else:
        first = run_build(sys.executable, spec, args, args.n_batch, "first build")
    print(f"  first: {first['system_info']}")
    spec = dict(spec, make=False, examples=first["examples"])
    results, runs = [], {"first": first}
    if args.dump:  # written now too, so that a failing second build does not cost the first one's run
        Path(args.dump).write_text(json.dumps(runs), encoding="utf-8")
    if args.second:
        runs["second"] = run_build(args.second, spec, args, 512, "second build")
        results.append(compare(first, runs["second"], "second build"))
    if args.ubatch:
        runs["ubatch"] = run_build(sys.executable, spec, args, args.ubatch, "other n_batch")
        results.append(compare(first, runs["ubatch"], "other n_batch"))
    if args.dump:
        Path(args.dump).write_text(json.dumps(runs), encoding="utf-8")
    # the probes' whole cost: the run's tokens over the same run's without probes (counted dry), which
    # also counts the few tokens an ablation after a probe re-decodes (its restart cells are not canonical)
    rows = first["results"]
    null = sum(r["tokens"] - r["tokens_without_probes"] for r in rows)
    rest = sum(r["tokens_without_probes"] for r in rows)
    shares = [(r["tokens"] - r["tokens_without_probes"]) / r["tokens_without_probes"] for r in rows]
    print(
        f"\nfloor cost: {null} tokens for the probes over {rest} tokens of the runs without them = "
        f"{null / rest:.3f} (per example {min(shares):.3f}–{max(shares):.3f}; the probes' own decodes "
        f"{sum(r['null_tokens'] for r in rows)}); probes per result "
        f"{min(r['probes'] for r in rows)}–{max(r['probes'] for r in rows)}"
    )
    covered, total = results[0]
    print(f"coverage={covered / total:.3f} floor_share={null / rest:.3f}")


if __name__ == "__main__":
    main()
