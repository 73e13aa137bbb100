"""Trials per second of ``ctxlite`` audits vs a plain llama-cpp-python loop.

Same model, same private set, canary, query and trial count, one run each,
side by side. The baseline is the obvious implementation: for every query of
every trial at every ε, call the high-level ``llama_cpp.Llama.create_completion``
(its own prefix cache included: a repeated prompt costs one sampled token) and,
for generation, embed each output with a second ``Llama(embedding=True)``. Both
sides use the same thread count for single tokens and for batches
(``Llama`` otherwise takes every core for prompt batches).

ctxlite reads the exact label distribution from one forward pass per distinct
prompt (classification); generation walks a memo of next-token distributions
(``continuations.ContinuationTree``: each distinct (prompt, path) node is
decoded once; the KV cells a node shares with the last decoded one are kept),
and a trial replayed at the other ε of a sweep (common random numbers) walks
memoised nodes only. ctxlite's
count includes the detector's reference runs, which the baseline skips.

Cases (``--cases``): ``classify`` (no defense, 64 queries per trial, the
default), ``classify-256`` (256 queries per trial, where the test suite's
no-defense audit reaches accuracy >= 0.8), ``rnm-sweep`` (RNM, 10 ensembles x 2 shots, ε ∈ {1, 8, inf}), ``generate`` (no
defense, 4 queries per trial), ``esa-sweep`` (ESA, 4 ensembles x 2 shots,
ε ∈ {1, 8, inf}); ``breakdown`` times one decode step of 1 and 4 streams and
an embedding with and without logits, and measures how much a row moves when
part of its prompt is decoded as a separate batch. This is a measurement, not a test.

    python bench/bench_audit.py [--threads 1] [--cases classify,generate,...]
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np

from ctxlite.audit.canaries import make_canary
from ctxlite.audit.dataset import load_records
from ctxlite.audit.formats import AuditFormat
from ctxlite.audit.game import AuditGame, run_audit, seeded_rng
from ctxlite.audit.mechanisms import partition
from ctxlite.audit.oracle import ModelOracle
from ctxlite.audit.settings import AuditSettings
from ctxlite.runtime.engine import Engine, EngineConfig

CLASSIFY = "ctxlite/data/classify_sample.jsonl"
DIALOGUE = "ctxlite/data/dialogue_sample.jsonl"


@dataclass(frozen=True)
class Case:
    name: str
    data: str
    settings: AuditSettings
    target: str


def cases(args) -> list[Case]:
    common = dict(reference_runs=2, utility_queries=0, max_new_tokens=16, seed=0)
    return [
        Case(
            "classify",
            CLASSIFY,
            AuditSettings(
                task="classify", mechanism="none", trials=args.trials, queries_per_trial=64, shots=args.shots, **common
            ),
            ">= 100x",
        ),
        Case(
            "classify-256",
            CLASSIFY,
            AuditSettings(
                task="classify", mechanism="none", trials=args.trials, queries_per_trial=256, shots=args.shots, **common
            ),
            ">= 100x",
        ),
        Case(
            "rnm-sweep",
            CLASSIFY,
            AuditSettings(
                task="classify",
                mechanism="rnm",
                epsilons=(1, 8, math.inf),
                trials=args.sweep_trials,
                shots=2,
                ensembles=10,
                **common,
            ),
            "-",
        ),
        Case(
            "generate",
            DIALOGUE,
            AuditSettings(
                task="generate",
                mechanism="none",
                trials=args.gen_trials,
                queries_per_trial=4,
                shots=args.shots,
                **common,
            ),
            ">= 10x",
        ),
        Case(
            "esa-sweep",
            DIALOGUE,
            AuditSettings(
                task="generate",
                mechanism="esa",
                epsilons=(1, 8, math.inf),
                trials=args.gen_trials,
                shots=2,
                ensembles=4,
                zero_shot_candidates=4,
                **common,
            ),
            "-",
        ),
    ]


def _pooled(v) -> np.ndarray:
    """Mean-pool llama_cpp's per-token embeddings (it returns one row per token without pooling)."""
    a = np.asarray(v, dtype=np.float64)
    return a.mean(axis=0) if a.ndim == 2 else a


def baseline(llm, emb_llm, s: AuditSettings, records) -> float:
    """Seconds for the plain loop over the same trials (every ε, every query, every ensemble)."""
    task = s.task.value
    fmt = AuditFormat.builtin(task)
    canary = make_canary(s.canary, fmt, records, s.seed)
    game = AuditGame(ModelOracle.__new__(ModelOracle), records, s, canary, fmt)
    query = game.query
    t0 = time.perf_counter()
    for _eps in s.epsilons:
        for i in range(s.trials):
            rng = seeded_rng(s.seed, 2, i)
            z = bool(rng.random() < 0.5)
            recs = game.dataset(z, None)
            for q in range(s.queries_per_trial):
                groups = partition(len(recs), s.ensembles, s.shots, rng) if s.mechanism.is_dp else [range(len(recs))]
                outs = []
                for g in groups:
                    prompt = fmt.prompt([recs[j] for j in g], query.text)
                    r = llm.create_completion(
                        prompt,
                        max_tokens=1 if task == "classify" else s.max_new_tokens,
                        temperature=s.temperature,
                        seed=i * 1000 + q,
                        stop=["\n"],
                    )
                    outs.append(r["choices"][0]["text"].strip())
                if task == "generate":
                    np.mean([_pooled(emb_llm.embed(o or "None")) for o in outs], axis=0)
    return time.perf_counter() - t0


def cost_breakdown(eng: Engine, emb: Engine, repeats: int = 16) -> None:
    """What one unit of generation work costs on this machine (median ms), both tools' floor."""
    import statistics

    prompt = eng.tokenize(
        AuditFormat.builtin("generate").prompt(load_records(DIALOGUE, "generate")[:8], ""), add_bos=True
    )
    text = "Ana tells Ben the meeting moved to Friday at noon."
    toks = emb.tokenize(text, add_bos=True)

    def median_ms(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    for k in (1, 4):
        streams = eng.streams([prompt] * k)
        ms = median_ms(lambda: streams.step(np.full(k, 236743, np.int32)))
        print(f"  one step of {k} stream(s) (one logits row each, {len(prompt)}-token prompt): {ms:7.1f} ms")
    print(
        f"  embed a {len(toks)}-token text (embedding mode, logits for every token): "
        f"{median_ms(lambda: emb.embed(text)):7.1f} ms"
    )
    n = len(toks)

    def no_logits():
        eng.clear()
        eng.decode(
            np.asarray(toks, np.int32), np.arange(n, dtype=np.int32), np.zeros(n, np.int32), np.zeros(n, np.int8), None
        )

    print(f"  the same {n} tokens decoded without logits: {median_ms(no_logits):7.1f} ms")
    fresh = eng.next_logits(prompt, exact=True).copy()
    worst = 0.0
    for k in (1, 8, 64):  # the prompt again, its last k tokens decoded as a separate batch
        eng.next_logits(prompt[:-k], exact=True)
        worst = max(worst, float(np.abs(eng.next_logits(prompt) - fresh).max()))
    print(
        f"  rounding: the prompt's row, suffix of 1/8/64 tokens decoded separately vs one batch: "
        f"max |logit difference| {worst:.3f}"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--trials", type=int, default=200, help="classification trials (the audit default)")
    ap.add_argument("--sweep-trials", type=int, default=20, help="RNM sweep trials per epsilon")
    ap.add_argument("--gen-trials", type=int, default=24, help="generation trials per epsilon")
    ap.add_argument("--shots", type=int, default=8, help="shots of the no-defense prompts")
    ap.add_argument("--cases", default="breakdown,classify,classify-256,rnm-sweep,generate,esa-sweep")
    args = ap.parse_args()

    import llama_cpp

    from ctxlite.runtime.models import resolve_model

    path = str(resolve_model(None))
    print(f"model {path}\nthreads {args.threads} (tokens and batches, both sides)")
    eng = Engine(None, EngineConfig(n_threads=args.threads))
    emb = Engine(None, EngineConfig(n_threads=args.threads), embeddings=True)
    kw = dict(verbose=False, n_ctx=2048, n_threads=args.threads, n_threads_batch=args.threads)
    llm = llama_cpp.Llama(model_path=path, logits_all=False, **kw)
    emb_llm = llama_cpp.Llama(model_path=path, embedding=True, **kw)

    wanted = args.cases.split(",")
    if "breakdown" in wanted:
        print("breakdown: where generation time goes (the same for ctxlite and the baseline)")
        cost_breakdown(eng, emb)
    for case in cases(args):
        if case.name not in wanted:
            continue
        s = case.settings
        records = load_records(case.data, s.task)
        t0 = time.perf_counter()
        report = run_audit(eng, records, s, embedder=emb if s.task.value == "generate" else None)
        ours = time.perf_counter() - t0
        base = baseline(llm, emb_llm, s, records)
        n_eps = len(s.epsilons)
        n_ours = n_eps * (s.trials + 2 * s.reference_runs)
        r_ours, r_base = n_ours / ours, n_eps * s.trials / base
        print(
            f"{case.name}: {s.mechanism.value}, {n_eps} epsilon(s) x {s.trials} trials x {s.queries_per_trial} "
            f"queries, {s.ensembles} ensemble(s) x {s.shots} shots "
            f"(+{2 * s.reference_runs} reference runs per epsilon for ctxlite)"
        )
        print(f"  ctxlite   {ours:8.2f} s  {r_ours:9.2f} trials/s  ({report.forward_passes} next-token rows decoded)")
        print(f"  llama_cpp {base:8.2f} s  {r_base:9.2f} trials/s")
        print(f"  ratio     {r_ours / r_base:8.1f}x  (issue target: {case.target})", flush=True)


if __name__ == "__main__":
    main()
