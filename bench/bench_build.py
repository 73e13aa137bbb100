"""Speed of two llama.cpp builds side by side: the portable build ``make`` installs against a host-native
one (not a test).

Each interpreter (a venv with one build of llama-cpp-python) runs the same job in a subprocess:
load the default model, then --repeats times score the first --examples bundled samples at λ = 1
with 8-grams and a fixed --response-tokens greedy response (generated once per interpreter with its
own build). The two interpreters alternate repeat by repeat, so a slower machine phase hits both
alike. Printed: each build's features, the median seconds per scoring pass, the ratio, and whether
the two builds' τ_i agree bit for bit (they need not: they round differently).

    python bench/bench_build.py --python .venv/bin/python --python /path/to/native-venv/bin/python
                                [--examples 3] [--response-tokens 24] [--repeats 3] [--threads 2]
"""

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

WORKER = r"""
import json, sys, time
from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings
from ctxlite.runtime.build import llama_build
from ctxlite.runtime.engine import Engine, EngineConfig
args = json.loads(sys.argv[1])
rows = [json.loads(l) for l in open("ctxlite/data/score_sample.jsonl", encoding="utf-8") if l.strip()]
rows = [r for r in rows if r.get("response")][: args["examples"]]
examples = [Example(id=r["id"], context=r["context"], query=r["query"], response=r["response"]) for r in rows]
scorer = InfluenceScorer(Engine(config=EngineConfig(n_threads=args["threads"])), "qa", InfluenceSettings(lambdas=(1.0,), ngram=8))
scorer.score(examples[0])  # warm-up
print(json.dumps({"features": llama_build()["cpu_features"], "examples": [e.id for e in examples]}), flush=True)
for _ in sys.stdin:
    t0 = time.perf_counter()
    taus = [g.influence for ex in examples for r in scorer.score(ex).results for g in r.ngrams]
    print(json.dumps({"seconds": time.perf_counter() - t0, "taus": taus}), flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append", required=True, help="an interpreter with one build (twice)")
    ap.add_argument("--examples", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    a = ap.parse_args()
    if len(a.python) != 2:
        ap.error("give --python twice: the two builds to compare")
    job = json.dumps({"examples": a.examples, "threads": a.threads})
    print(
        f"examples={a.examples} repeats={a.repeats} threads={a.threads} (fixed responses, λ=1, 8-grams, null ablations on)"
    )
    workers, info = [], []
    for py in a.python:
        p = subprocess.Popen(
            [py, "-c", WORKER, job], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        workers.append(p)
        info.append(json.loads(p.stdout.readline()))
    times, taus = [[], []], [None, None]
    for _ in range(a.repeats):
        for i, p in enumerate(workers):  # alternate: a slow phase of the machine hits both builds
            p.stdin.write("go\n")
            p.stdin.flush()
            row = json.loads(p.stdout.readline())
            times[i].append(row["seconds"])
            taus[i] = row["taus"]
    for p in workers:
        p.stdin.close()
        p.wait()
    for i, py in enumerate(a.python):
        print(f"build {i + 1}: {py}\n  CPU features: {' '.join(info[i]['features'])}")
        print(
            f"  seconds per pass: median {statistics.median(times[i]):.2f} (runs: {', '.join(f'{t:.2f}' for t in times[i])})"
        )
    ratio = statistics.median(times[0]) / statistics.median(times[1])
    diff = max(abs(x - y) for x, y in zip(taus[0], taus[1]))
    print(f"time ratio build 1 / build 2: {ratio:.3f}")
    print(
        f"n-grams: {len(taus[0])}, identical τ_i: {sum(x == y for x, y in zip(taus[0], taus[1]))}, max |Δτ_i| {diff:.4f} nats"
    )


if __name__ == "__main__":
    main()
