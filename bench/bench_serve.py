"""Benchmark: the privacy-utility curve and the throughput of ``ctxlite serve``'s decoding (issue 29).

For each bundled score sample that carries a reference answer (ctxlite/data/score_sample.jsonl:
``answer``), the server's completion prompt is built as ``ctxlite serve`` builds it (the sample's
context, a blank line, ``Question: {query}\\nAnswer:``; without the context: the question alone),
and an answer of --max-tokens tokens is sampled with the server's own token loop
(``ctxlite.serve.decoding.steps``: two KV-cached streams, ε-bounded λ_t*, exact sampling over the
whole vocabulary) at each ε of --epsilons (``inf``: λ = 1, no bound: ordinary decoding with the
context) and at λ = 0 (no context: the floor). Reported per ε: ROUGE-L F of the answers against
the references (mean and 95 % percentile-bootstrap interval over the examples), the mean realised
per-token ε, and the guarantee per answer (n·ε against the empty context).

Each finite ε is run with both λ_t* rules side by side (issue 46): the tight one the server samples
with (``tight``: the largest λ' ≤ λ whose log-ratio to the empty context is within ε,
:func:`ctxlite.influence.cid.tight_step`) and the sufficient SPEC rule ``ctxlite score`` keeps
(``spec``: min(λ, ε / (2·max|pmi|)), the same loop with :func:`ctxlite.influence.cid.bounded_step`).
``λ ratio``: the median over the tight run's steps of its λ_t* over the SPEC rule's λ on the same
rows (where the SPEC rule binds). ``ref logp``: the mean log-probability per token of the reference
answer (its first --max-tokens tokens) under each setting's distribution, by teacher forcing on the
same rows for every setting -- a utility measure without the sampling noise of ROUGE-L.

Throughput: tokens/s of the ε-bounded loop against plain llama.cpp decoding of the same prompt
(``ctxlite.runtime.sampling.sample_streams``, one stream, the context in the prompt), both
including the prompt's decode from an empty cache, measured side by side per example; the ratio is the cost of the
second forward pass and the max|pmi| kernel (goal: ≤ 2.2x). The engine is called directly (no
HTTP): the server adds its JSON and one lock per request.

    python bench/bench_serve.py [--examples 30] [--max-tokens 48] [--epsilons 0.5 1 2 4 inf]
        [--temperature 0.8] [--model gemma-3-270m] [--threads 2] [--rules tight spec] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from ctxlite.influence.analysis import bootstrap_ci  # noqa: E402
from ctxlite.influence.cid import bounded_lambda, bounded_step, tight_step  # noqa: E402
from ctxlite.influence.regurgitation import rouge_l  # noqa: E402
from ctxlite.runtime.engine import Engine, EngineConfig  # noqa: E402
from ctxlite.runtime.sampling import SamplingSettings, sample_streams, sample_token  # noqa: E402
from ctxlite.serve.decoding import Step, TextStream, steps  # noqa: E402
from ctxlite.serve.service import SEPARATOR  # noqa: E402

DATA = REPO / "ctxlite" / "data" / "score_sample.jsonl"


def spec_steps(engine, with_, without, lam, eps, T, n, seed):
    """The server's token loop (:func:`ctxlite.serve.decoding.steps`) with the SPEC rule's λ_t* =
    min(λ, ε / (2·max|pmi|)) instead of the tight one: the rule before issue 46."""
    settings = SamplingSettings(temperature=T, min_new_tokens=0, max_new_tokens=n)
    rng = np.random.default_rng(seed)
    streams = engine.streams([list(with_), list(without)])
    for t in range(n):
        rows = streams.last_logits
        logp, lam_t, m = bounded_step(rows[0], rows[1], lam, eps, T)
        token = sample_token(logp, settings, rng, full_vocabulary=True)
        eog = bool(engine.is_eog(token))
        yield Step(token, lam_t, m, eog)
        if eog:
            return
        if t + 1 < n:
            streams.step([token, token])


def answer(engine, with_, without, lam, eps, T, n, seed, rule="tight") -> tuple[str, list[Step], float]:
    """(text, steps, seconds) of one answer from the server's token loop (``rule`` spec: the SPEC
    rule's λ_t*)."""
    text, taken, began = TextStream(engine), [], time.perf_counter()
    parts = []
    loop = steps if rule == "tight" or eps is None else spec_steps
    for s in loop(engine, with_, without, lam, eps, T, n, seed):
        taken.append(s)
        if s.eog:
            break
        parts.append(text.add(s.token))
    parts.append(text.flush())
    return "".join(parts), taken, time.perf_counter() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=30)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--epsilons", nargs="+", default=["0.5", "1", "2", "4", "inf"])
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rules", nargs="+", default=["tight", "spec"], choices=["tight", "spec"])
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args()
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if r.get("answer")][: args.examples]
    settings = [
        (1.0, eps, f"eps={e}" + ("" if eps is None else f" {rule}"), rule)
        for e in args.epsilons
        for eps in [None if e == "inf" else float(e)]
        for rule in (["tight"] if eps is None else args.rules)
    ] + [(0.0, None, "no context", "tight")]
    out = {s[2]: {"rouge": [], "eps": [], "ratio": [], "ref": [], "tokens": 0, "seconds": 0.0} for s in settings}
    plain = {"tokens": 0, "seconds": 0.0}
    T, n = args.temperature, args.max_tokens
    with Engine(args.model, EngineConfig(n_threads=args.threads)) as engine:
        for i, r in enumerate(rows):
            prompt = f"Question: {r['query']}\nAnswer:"
            without = engine.tokenize(prompt, add_bos=True, special=True)
            with_ = engine.tokenize(r["context"] + SEPARATOR + prompt, add_bos=True, special=True)
            engine.clear()  # every measured answer decodes its prompt from an empty cache
            began = time.perf_counter()
            toks = sample_streams(engine, [with_], SamplingSettings(T, 0, 1.0, n, n, i), np.random.default_rng(i))
            plain["seconds"] += time.perf_counter() - began
            plain["tokens"] += len(toks[0])
            answer_ids = engine.tokenize(" " + r["answer"], add_bos=False, special=False)[:n]
            rows_with = engine.logits_rows(with_ + answer_ids, len(with_))
            rows_without = engine.logits_rows(without + answer_ids, len(without))
            for lam, eps, label, rule in settings:
                step = (
                    (lambda a, b: tight_step(a, b, lam, eps, T)[0])
                    if rule == "tight"
                    else (lambda a, b: bounded_step(a, b, lam, eps, T)[0])
                )
                out[label]["ref"] += [float(step(a, b)[y]) for a, b, y in zip(rows_with, rows_without, answer_ids)]
                engine.clear()
                text, taken, seconds = answer(engine, with_, without, lam, eps, T, n, i, rule)
                o = out[label]
                o["rouge"].append(rouge_l(r["answer"], text)["f"])
                o["eps"] += [s.epsilon for s in taken]
                if eps is not None and rule == "tight":  # the tight λ_t* over the SPEC rule's on the same rows
                    spec = [bounded_lambda(lam, eps, s.max_abs_pmi) for s in taken]
                    o["ratio"] += [s.lam / b for s, b in zip(taken, spec) if b < lam]
                o["tokens"] += len(taken)
                o["seconds"] += seconds
            print(f"{i + 1}/{len(rows)} {r['id']}", file=sys.stderr)
    plain_rate = plain["tokens"] / plain["seconds"]
    print(
        f"{'setting':<16} {'ROUGE-L F':>9} {'95% CI':>15} {'ref logp':>8} {'mean eps_t':>10} {'λ ratio':>7} "
        f"{'tok/s':>7} {'s/token vs plain':>16}"
    )
    result = {"plain_tokens_per_s": plain_rate, "rows": []}
    for _, eps, label, rule in settings:
        o = out[label]
        lo, hi = bootstrap_ci(o["rouge"])
        rate = o["tokens"] / o["seconds"]
        mean_eps = float(np.mean(o["eps"])) if o["eps"] else math.nan
        ratio = float(np.median(o["ratio"])) if o["ratio"] else math.nan
        ref = float(np.mean(o["ref"]))
        print(
            f"{label:<16} {np.mean(o['rouge']):9.3f} [{lo:6.3f}, {hi:6.3f}] {ref:8.3f} {mean_eps:10.3f} {ratio:7.2f} "
            f"{rate:7.1f} {plain_rate / rate:7.2f}"
        )
        result["rows"].append(
            {"setting": label, "epsilon": eps, "rule": rule, "rouge_l_f": float(np.mean(o["rouge"])), "ci": [lo, hi],
             "reference_logprob_per_token": ref, "mean_realised_epsilon": mean_eps, "median_lambda_ratio": ratio,
             "tokens_per_s": rate,
             "time_per_token_vs_plain": plain_rate / rate}
        )  # fmt: skip
    print(f"plain llama.cpp decoding: {plain_rate:.1f} tokens/s ({len(rows)} examples, {n} tokens, T = {T:g})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
