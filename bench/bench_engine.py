"""Benchmark KV-cache prefix reuse against from-scratch decoding of n-gram ablations (not a test).

One process, one engine, same inputs for both paths: a private-looking context
of exactly --context-tokens tokens (records from ctxlite/data/score_sample.jsonl
joined and cut in token space), the "qa" template, and a fixed response of
--response-tokens tokens (greedy continuation, EOG banned, generated once).
For every disjoint n-gram window i (start s_i in the prompt) the variant is the
prompt with that n-gram removed, followed by the response.

  reuse: ``engine.load_base(full)`` once, then ``score_variant(..., exact=False)``
         in decreasing s_i: keeps the cache cells [0, s_i), decodes only the suffix.
  exact: ``score_variant(..., exact=True)`` decodes the whole variant from scratch.

Both compute the response log-probs with ``kernels.logprob_gather`` inside the
callback. Reported: totals (median over --repeats, paths alternated in order),
speedup, the token-count bound L*k / sum(L - s_i), the fraction of it achieved
(target >= 85%), peak RSS (target <= 1 GiB) and how closely the two paths agree.

    python bench/bench_engine.py [--context-tokens 512] [--response-tokens 32] [--ngram 8]
                                 [--threads N] [--limit-variants K] [--repeats 3]
"""

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
from ctxlite.influence.cid import generate  # noqa: E402
from ctxlite.influence.scorer import ngram_starts  # noqa: E402
from ctxlite.runtime import kernels  # noqa: E402
from ctxlite.runtime.engine import Engine, EngineConfig  # noqa: E402
from ctxlite.runtime.sampling import SamplingSettings  # noqa: E402
from ctxlite.runtime.templates import get_template  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "ctxlite" / "data" / "score_sample.jsonl"


def load_avg() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def build_context(engine: Engine, n_tokens: int) -> list[int]:
    """Records of the sample file, one per line, repeated with varied order until long
    enough, tokenized once and cut to exactly ``n_tokens`` tokens (no re-tokenization)."""
    records = [json.loads(line)["context"] for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    rng = np.random.default_rng(0)
    lines: list[str] = []
    tokens: list[int] = []
    while len(tokens) < n_tokens:
        lines += [records[i] for i in rng.permutation(len(records))]
        tokens = engine.tokenize("\n".join(lines))
    return tokens[:n_tokens]


def greedy_response(engine: Engine, prompt_with: list[int], prompt_without: list[int], n: int) -> list[int]:
    """n greedy tokens (top_k=1, EOG banned for all n steps), generated once."""
    gen = generate(
        engine,
        prompt_with,
        prompt_without,
        1.0,
        SamplingSettings(temperature=1.0, top_k=1, min_new_tokens=n, max_new_tokens=n),
    )
    assert len(gen.token_ids) == n, (len(gen.token_ids), gen.stop_reason)
    return gen.token_ids


class Gather:
    """Callback: response log-probs via kernels.logprob_gather, chunk by chunk."""

    def __init__(self, targets: np.ndarray, T: float):
        self.targets, self.T = targets, T
        self.out = np.full(len(targets), np.nan)

    def __call__(self, view, first):
        self.out[first : first + len(view)] = kernels.logprob_gather(
            view, self.targets[first : first + len(view)], self.T
        )


def time_block(engine, full, n_prompt, block, targets, T, exact: bool):
    """Seconds and response log-probs of each variant in ``block`` on one path
    (the reuse path needs ``load_base`` to have run)."""
    times, lps = [], []
    for toks, shared, tf in reversed(block):  # decreasing split points, as InfluenceScorer does
        g = Gather(targets, T)
        t0 = time.perf_counter()
        engine.score_variant(toks, shared, tf, g, exact=exact)
        times.append(time.perf_counter() - t0)
        lps.append(g.out)
    return times[::-1], lps[::-1]


def one_repeat(engine, full, n_prompt, variants, targets, T, block_size: int, first: str):
    """Both paths over all variants, interleaved in blocks so that both see the same
    machine load: per block, load_base + reuse and exact, in alternating order."""
    per_block = {}
    base_t, base_lp = [], None
    for j, lo in reversed(list(enumerate(range(0, len(variants), block_size)))):
        block = variants[lo : lo + block_size]
        order = ("reuse", "exact") if (j % 2 == 0) == (first == "reuse") else ("exact", "reuse")
        for path in order:
            if path == "reuse":
                g = Gather(targets, T)
                t0 = time.perf_counter()
                engine.load_base(full, n_prompt, g)
                base_t.append(time.perf_counter() - t0)
                base_lp = g.out
            per_block[(j, path)] = time_block(engine, full, n_prompt, block, targets, T, exact=(path == "exact"))
    out = {"reuse": ([], []), "exact": ([], [])}
    for j, path in sorted(per_block):
        out[path][0].extend(per_block[(j, path)][0])
        out[path][1].extend(per_block[(j, path)][1])
    g = Gather(targets, T)
    engine.score_tokens(full, n_prompt, g)  # from-scratch base for the exact path's influences
    return out, float(np.median(base_t)), base_lp, g.out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--context-tokens", type=int, default=512)
    p.add_argument("--response-tokens", type=int, default=32)
    p.add_argument("--ngram", type=int, default=8)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="llama.cpp threads (default 1: on shared cores, 2 spinning threads make wall times swing "
        "several-fold for the same decode; use --threads 2 on an idle machine)",
    )
    p.add_argument("--limit-variants", type=int, default=None, help="time only the first K n-gram variants")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats of both paths (median reported)")
    p.add_argument("--time-budget", type=float, default=450.0, help="skip further repeats past this many seconds")
    p.add_argument("--block", type=int, default=8, help="variants per interleaving block (reuse and exact alternate)")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--template", default="qa")
    p.add_argument("--model", default=None, help="GGUF path or model name (default: ctxlite's default model)")
    args = p.parse_args()

    t_bench = time.perf_counter()
    print(f"ctxlite engine bench: prefix reuse vs exact ({load_avg()} at start)")
    engine = Engine(args.model, EngineConfig(n_threads=args.threads))
    if args.threads < (os.cpu_count() or 1):
        print(
            f"  note: {args.threads} llama.cpp thread(s) of {os.cpu_count()} CPUs (ctxlite's own default is all CPUs); "
            "ratios, not absolute times, are the result"
        )
    info = engine.describe()
    print(
        f"  {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, llama.cpp threads={engine.config.threads}, "
        f"llama-cpp-python {info['llama_cpp_python']}, n_batch={engine.config.n_batch}, flash_attn={engine.config.flash_attn}"
    )
    print(f"  model {engine.model_path.name} (V={engine.n_vocab})")

    tpl = get_template(args.template)
    query = "What is the phone number of the patient?"
    prefix_text, suffix_text = tpl.parts(query)
    prefix = ([engine.bos_id] if engine.bos_id is not None else []) + engine.tokenize(prefix_text)
    ctx = build_context(engine, args.context_tokens)
    suffix = engine.tokenize(suffix_text)
    prompt = prefix + ctx + suffix
    y = greedy_response(engine, prompt, prefix + suffix, args.response_tokens)
    full = prompt + y
    n_prompt, n = len(prompt), args.ngram
    targets = np.asarray(y, dtype=np.int32)

    starts = ngram_starts(len(ctx), n, n)
    if args.limit_variants:
        starts = starts[: args.limit_variants]
    p_len = len(prefix)
    variants = [(full[: p_len + c] + full[p_len + c + n :], p_len + c, n_prompt - n) for c in starts]
    k = len(variants)
    L_var = len(full) - n  # tokens one exact variant decode processes
    L_full = len(full)  # tokens of the unablated prompt + response
    shared = np.array([v[1] for v in variants])
    bound_var = L_var * k / float(np.sum(L_var - shared))
    bound_full = L_full * k / float(np.sum(L_full - shared))

    print(
        f"  template {args.template!r}: prefix {len(prefix)} tok (BOS incl.), context {len(ctx)} tok, suffix {len(suffix)} tok, "
        f"response {len(y)} tok (greedy, fixed), T={args.temperature}"
    )
    print(f"  response: {engine.detokenize(y)!r}")
    print(
        f"  disjoint {n}-grams: k={k} variants{' (limited by --limit-variants)' if args.limit_variants else ''}, "
        f"shared prefix s_i from {shared.min()} to {shared.max()}; repeats<={args.repeats}, interleaved in blocks of {args.block}"
    )

    # warm-up (page faults, thread pool, graph allocation) on both paths
    one_repeat(engine, full, n_prompt, variants[:2], targets, args.temperature, 1, "reuse")

    t_start = time.perf_counter()
    tot_reuse, tot_exact, base_times, per_reuse, per_exact = [], [], [], [], []
    for r in range(args.repeats):
        elapsed = time.perf_counter() - t_start
        if r and elapsed / r * (r + 1) > args.time_budget:
            print(f"  stopping after {r} repeat(s): another would pass --time-budget {args.time_budget:.0f} s")
            break
        res, tb, lp_base_reuse, lp_base_exact = one_repeat(
            engine, full, n_prompt, variants, targets, args.temperature, args.block, "reuse" if r % 2 == 0 else "exact"
        )
        (ts_r, lp_reuse), (ts_e, lp_exact) = res["reuse"], res["exact"]
        tot_reuse.append(sum(ts_r))
        tot_exact.append(sum(ts_e))
        base_times.append(tb)
        per_reuse.append(ts_r)
        per_exact.append(ts_e)
        print(
            f"  repeat {r + 1}: reuse {tot_reuse[-1]:7.2f} s   exact {tot_exact[-1]:7.2f} s   "
            f"ratio {tot_exact[-1] / tot_reuse[-1]:.2f}x   ({load_avg()})"
        )

    n_rep = len(tot_reuse)
    med_r, med_e = statistics.median(tot_reuse), statistics.median(tot_exact)
    med_base = statistics.median(base_times)
    speed = med_e / med_r
    speed_incl = med_e / (med_r + med_base)
    pv_r = np.median(np.array(per_reuse), axis=0)
    pv_e = np.median(np.array(per_exact), axis=0)

    print(f"\nTiming (median over {n_rep} repeat(s); variant decodes only, base decode listed separately)")
    print(f"  exact path total      {med_e:8.2f} s   ({med_e / k * 1e3:7.1f} ms/variant)")
    print(
        f"  reuse path total      {med_r:8.2f} s   ({med_r / k * 1e3:7.1f} ms/variant)   + load_base once {med_base:.2f} s"
    )
    print(
        f"  measured speedup      {speed:8.2f}x   (incl. one load_base: {speed_incl:.2f}x; "
        f"per repeat: {', '.join(f'{e / r:.2f}x' for e, r in zip(tot_exact, tot_reuse))})"
    )
    print(
        f"  token-count bound     {bound_var:8.2f}x   = L*k / sum(L - s_i) with L = {L_var} = tokens of one ablated variant "
        f"(prefix+context-n+suffix+response = {len(prefix)}+{len(ctx) - n}+{len(suffix)}+{len(y)}):"
    )
    print("                                  the exact path decodes L tokens per variant, the reuse path L - s_i")
    print(f"  fraction of bound     {speed / bound_var * 100:7.1f} %   (target >= 85%)")
    print(
        f"  [alt. bound with L = {L_full} = unablated prompt+response tokens: {bound_full:.2f}x -> fraction "
        f"{speed / bound_full * 100:.1f} %]"
    )
    # robust to load drifting between blocks: each block's speedup against its own bound
    B = args.block
    fr = [
        (pv_e[i : i + B].sum() / pv_r[i : i + B].sum())
        / (L_var * len(shared[i : i + B]) / float(np.sum(L_var - shared[i : i + B])))
        for i in range(0, k, B)
    ]
    print(
        f"  per-block fraction of its own bound (blocks of {B}, paths timed back to back): median "
        f"{np.median(fr) * 100:.1f} %, range {min(fr) * 100:.0f}-{max(fr) * 100:.0f} %"
    )
    # where reuse falls short: a fixed per-variant cost (32 logits rows over V, seq_rm, callback) vs suffix length
    suf = (L_var - shared).astype(float)
    A = np.vstack([suf, np.ones_like(suf)]).T
    (a_r, b_r), *_ = np.linalg.lstsq(A, pv_r, rcond=None)
    print(
        f"  reuse per-variant least-squares fit: {a_r * 1e3:.3f} ms per decoded token + {b_r * 1e3:.1f} ms fixed "
        f"(exact: {pv_e.mean() / L_var * 1e3:.3f} ms per token averaged over its {L_var} tokens)"
    )
    q = max(1, -(-k // 4))
    print(
        "  ms/variant by shared-prefix quarter (reuse vs exact): "
        + "; ".join(
            f"s={shared[i]}-{shared[min(i + q, k) - 1]}: {pv_r[i : i + q].mean() * 1e3:.0f} vs {pv_e[i : i + q].mean() * 1e3:.0f}"
            for i in range(0, k, q)
        )
    )

    rss = peak_rss_mib()
    print(f"\nPeak RSS {rss:.0f} MiB (ru_maxrss; target <= 1024 MiB)")

    # agreement of the two paths (last repeat of each)
    R, E = np.array(lp_reuse), np.array(lp_exact)
    d = np.abs(R - E)
    infl_r = np.abs(lp_base_reuse[None, :] - R).sum(axis=1)
    infl_e = np.abs(lp_base_exact[None, :] - E).sum(axis=1)
    corr = float(np.corrcoef(infl_r, infl_e)[0, 1]) if k > 2 else float("nan")
    print("\nAgreement reuse vs exact (log p of the response tokens, T=%.2f)" % args.temperature)
    print(f"  base log-probs: load_base vs from-scratch max |diff| = {np.abs(lp_base_reuse - lp_base_exact).max():.3g}")
    print(f"  mean |d log p| per token          {d.mean():.4f} nats   (max {d.max():.3f})")
    print(f"  max summed |d log p| per variant  {d.sum(axis=1).max():.3f} nats   (mean {d.sum(axis=1).mean():.3f})")
    print(
        f"  influence sums S_t |lp_base - lp_variant|: reuse mean {infl_r.mean():.3f}, exact mean {infl_e.mean():.3f}, "
        f"mean |diff| {np.abs(infl_r - infl_e).mean():.3f}"
    )
    print(f"  correlation of per-variant influence (reuse vs exact): {corr:.4f}")
    print(f"\nbench wall time {time.perf_counter() - t_bench:.0f} s   ({load_avg()} at end)")
    engine.close()


if __name__ == "__main__":
    main()
