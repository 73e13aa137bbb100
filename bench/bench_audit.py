"""Trials per second of ``ctxlite`` audits vs a plain llama-cpp-python loop.

Same model, same private set, same canary and query, same trials (Z drawn by
the same seeds). The baseline is the obvious implementation: for every query
of every trial call the high-level ``llama_cpp.Llama.create_completion`` on
the full prompt (its own prefix cache included) and, for generation, embed the
output with a second ``Llama(embedding=True)``. ctxlite reads the exact label
distribution from one forward pass per distinct prompt (classification) and
samples the queries of a trial as streams that share the prompt's KV cache
(generation). One run each; this is a measurement, not a test.

    python bench/bench_audit.py [--threads 1] [--trials 20] [--queries 16]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from ctxlite.audit import AuditSettings, _Game, _rng, load_records, run_audit
from ctxlite.canaries import make_canary
from ctxlite.engine import Engine, EngineConfig
from ctxlite.mechanisms import TaskFormat
from ctxlite.oracle import ModelOracle
from ctxlite.queries import build_query


def _pooled(v) -> np.ndarray:
    """Mean-pool llama_cpp's per-token embeddings (it returns one row per token without pooling)."""
    a = np.asarray(v, dtype=np.float64)
    return a.mean(axis=0) if a.ndim == 2 else a


def baseline(llm, emb_llm, settings: AuditSettings, records) -> float:
    """Seconds for the plain loop over the same trials."""
    fmt = TaskFormat.for_task(settings.task.value)
    canary = make_canary(settings.canary, settings.task.value, records, settings.seed, labels=fmt.labels)
    query = build_query(settings.task.value, settings.query, canary, fmt.labels, settings.template_index)
    game = _Game(ModelOracle.__new__(ModelOracle), records, settings, canary, query)
    t0 = time.perf_counter()
    for i in range(settings.trials):
        z = bool(_rng(settings.seed, 2, i).random() < 0.5)
        prompt = fmt.prompt(game.dataset(z, None), query.text)
        outs = []
        for q in range(settings.queries_per_trial):
            if settings.task.value == "classify":
                r = llm.create_completion(prompt, max_tokens=1, temperature=settings.temperature, seed=i * 1000 + q)
                outs.append(r["choices"][0]["text"].strip())
            else:
                r = llm.create_completion(prompt, max_tokens=settings.max_new_tokens, temperature=settings.temperature,
                                          seed=i * 1000 + q, stop=["\n"])
                outs.append(r["choices"][0]["text"].strip())
        if settings.task.value == "generate":
            np.mean([_pooled(emb_llm.embed(o or "None")) for o in outs], axis=0)
        else:
            [o == canary.label for o in outs]
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--queries", type=int, default=64, help="queries per trial (classification; the audit default)")
    ap.add_argument("--gen-trials", type=int, default=4)
    ap.add_argument("--gen-queries", type=int, default=6)
    ap.add_argument("--shots", type=int, default=8)
    args = ap.parse_args()

    import llama_cpp

    from ctxlite.models import resolve_model

    path = str(resolve_model(None))
    cfg = EngineConfig(n_threads=args.threads, kv_slots=4)
    print(f"model {path}\nthreads {args.threads}, shots {args.shots}")
    eng = Engine(None, cfg)
    emb = Engine(None, EngineConfig(n_threads=args.threads), embeddings=True)
    llm = llama_cpp.Llama(model_path=path, logits_all=False, verbose=False, n_ctx=2048, n_threads=args.threads)
    emb_llm = llama_cpp.Llama(model_path=path, embedding=True, verbose=False, n_ctx=2048, n_threads=args.threads)

    for task, trials, queries, data in (
        ("classify", args.trials, args.queries, "ctxlite/data/classify_sample.jsonl"),
        ("generate", args.gen_trials, args.gen_queries, "ctxlite/data/dialogue_sample.jsonl"),
    ):
        records = load_records(data, task)
        s = AuditSettings(task=task, mechanism="none", trials=trials, queries_per_trial=queries, shots=args.shots,
                          reference_runs=2, utility_queries=0, max_new_tokens=16, seed=0)
        t0 = time.perf_counter()
        run_audit(eng, records, s, embedder=emb if task == "generate" else None)
        ours = time.perf_counter() - t0
        n_ours = trials + 2 * s.reference_runs  # ctxlite also runs the detector's reference runs
        base = baseline(llm, emb_llm, s, records)
        r_ours, r_base = n_ours / ours, trials / base
        print(f"{task}: {trials} trials x {queries} queries (+{2 * s.reference_runs} reference runs for ctxlite)")
        print(f"  ctxlite   {ours:8.2f} s  {r_ours:9.2f} trials/s")
        print(f"  llama_cpp {base:8.2f} s  {r_base:9.2f} trials/s")
        print(f"  ratio     {r_ours / r_base:8.1f}x  (target: {'>= 100x' if task == 'classify' else '>= 10x'})")


if __name__ == "__main__":
    main()
