"""Benchmark ctxlite's InfluenceScorer against the public reference algorithm (not a test).

Same model, same examples (the first --examples of ctxlite/data/score_sample.jsonl,
"qa" template), same fixed response per example: --response-tokens greedy tokens
(EOG banned, generated once), given to both sides. λ = 1, T = 0.8, disjoint
--ngram windows.

  ctxlite:   ``InfluenceScorer.score`` with null_ablations=0 (like for like with the
             reference, which measures no noise floor) and with the default null
             ablations; median of --repeats runs per example.
  reference: a re-implementation of the public reference's cost model, written
             here: for the full context, the empty context slot and each ablated
             context, for each response token t one forward pass from scratch over
             prompt + y<t (``engine.logits_rows`` on a fresh cache, only the row
             predicting y_t flagged, copied out), then log-softmax in numpy float64.
             (The n-gram is removed in token space as in ctxlite, not by the
             reference's text round-trip, so that both score the same ablations.
             ``logits_rows`` also decodes y_t itself, unflagged: +1 token per pass.)
             Its cost is the same for every ablation of an example, so by default it
             runs on --ref-ablations evenly spread windows per example and the rest
             is extrapolated (measured and extrapolated numbers are both printed).

Reported: time ratio (target >= 20x at |y| = 32), ablations per second, where
ctxlite's time goes (llama_decode vs Python vs kernels, by wrapping
Engine.decode and llama_cpp.llama_decode inside this process only) and the
agreement of the two influence estimates against ctxlite's measured noise floor.

    python bench/bench_score.py [--examples 3] [--ngram 8] [--response-tokens 32]
                                [--ref-ablations 2] [--repeats 2] [--threads 1]
"""

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
import ctxlite.runtime.engine as engine_mod  # noqa: E402
from ctxlite.influence.cid import generate  # noqa: E402
from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings, ngram_starts  # noqa: E402
from ctxlite.runtime.engine import Engine, EngineConfig  # noqa: E402
from ctxlite.runtime.sampling import SamplingSettings  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "ctxlite" / "data" / "score_sample.jsonl"
T = 0.8  # ctxlite's default temperature (SamplingSettings), also the reference default


def load_avg() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


# --------------------------------------------------------------------------
# instrumentation (this process only)


class Probe:
    """Accumulates seconds spent in llama_decode, in Engine.decode, in the row
    callbacks it hands logits to, and in KV sequence copies/removals."""

    def __init__(self):
        self.t = defaultdict(float)
        self.calls = defaultdict(int)
        self._saved = {}

    def install(self):
        llama = engine_mod._llama
        orig_decode = engine_mod.Engine.decode
        probe = self

        def timed_c(name, fn):
            def wrapper(*a, **k):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    probe.t[name] += time.perf_counter() - t0
                    probe.calls[name] += 1

            return wrapper

        def decode(self_, tokens, pos, seqs, want, on_rows, first_chunk=None):
            cb = None
            if on_rows is not None:

                def cb(view, first):
                    t0 = time.perf_counter()
                    try:
                        on_rows(view, first)
                    finally:
                        probe.t["callbacks"] += time.perf_counter() - t0

            t0 = time.perf_counter()
            try:
                return orig_decode(self_, tokens, pos, seqs, want, cb, first_chunk)
            finally:
                probe.t["Engine.decode"] += time.perf_counter() - t0
                probe.calls["Engine.decode"] += 1

        self._saved = {
            "decode": orig_decode,
            "llama_decode": llama.llama_decode,
            "seq_cp": llama.llama_memory_seq_cp,
            "seq_rm": llama.llama_memory_seq_rm,
        }
        engine_mod.Engine.decode = decode
        llama.llama_decode = timed_c("llama_decode", self._saved["llama_decode"])
        llama.llama_memory_seq_cp = timed_c("kv seq_cp/seq_rm", self._saved["seq_cp"])
        llama.llama_memory_seq_rm = timed_c("kv seq_cp/seq_rm", self._saved["seq_rm"])

    def uninstall(self):
        llama = engine_mod._llama
        engine_mod.Engine.decode = self._saved["decode"]
        llama.llama_decode = self._saved["llama_decode"]
        llama.llama_memory_seq_cp = self._saved["seq_cp"]
        llama.llama_memory_seq_rm = self._saved["seq_rm"]

    def snapshot(self) -> dict:
        return dict(self.t)


# --------------------------------------------------------------------------
# the reference algorithm (cost model of the public code, defects fixed)


def logsoftmax_at(row: np.ndarray, y: int, temperature: float) -> float:
    z = row.astype(np.float64) / temperature
    m = z.max()
    return float(z[y] - (m + np.log(np.exp(z - m).sum())))


def ref_logprobs(engine: Engine, prompt: list[int], y: list[int], temperature: float) -> np.ndarray:
    """log p_T(y_t | prompt, y<t): one from-scratch forward pass per response token."""
    out = np.empty(len(y))
    for t in range(len(y)):
        toks = prompt + y[: t + 1]
        row = engine.logits_rows(toks, len(toks) - 1)  # fresh cache; one flagged row, predicting y_t
        out[t] = logsoftmax_at(row[0], y[t], temperature)
    return out


# --------------------------------------------------------------------------


def fixed_response(engine: Engine, scorer: InfluenceScorer, ex: Example, n: int) -> tuple[str, list[int]]:
    """n greedy tokens (EOG banned) whose text re-tokenizes to exactly those ids."""
    enc = scorer.encode(ex)
    gen = generate(
        engine,
        enc.with_context,
        enc.without_context,
        1.0,
        SamplingSettings(temperature=1.0, top_k=1, min_new_tokens=n + 8, max_new_tokens=n + 8),
    )
    ids = gen.token_ids
    for cut in range(n, len(ids) + 1):  # a cut that survives detokenize -> encode_response
        text = engine.detokenize(ids[:cut])
        y = scorer.encode_response(enc, text)
        if len(y) == n:
            return text, y
    raise SystemExit(f"{ex.id}: no {n}-token cut of the greedy response re-tokenizes to {n} tokens")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=3)
    p.add_argument("--ngram", type=int, default=8)
    p.add_argument("--response-tokens", type=int, default=32)
    p.add_argument(
        "--ref-ablations",
        type=int,
        default=2,
        help="reference ablations run per example, evenly spread (0 = all; the rest is extrapolated)",
    )
    p.add_argument("--repeats", type=int, default=2, help="ctxlite runs per example and setting (median)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="llama.cpp threads (default 1: on shared cores, 2 spinning threads make wall times swing "
        "several-fold; use --threads 2 on an idle machine)",
    )
    p.add_argument("--template", default="qa")
    p.add_argument("--model", default=None)
    args = p.parse_args()

    t_bench = time.perf_counter()
    print(f"ctxlite score bench: InfluenceScorer vs the reference's per-token forward passes ({load_avg()} at start)")
    engine = Engine(args.model, EngineConfig(n_threads=args.threads))
    info = engine.describe()
    print(
        f"  {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, llama.cpp threads={engine.config.threads}"
        f"{' (ctxlite default: all CPUs; ratios are the result)' if args.threads < (os.cpu_count() or 1) else ''}, "
        f"llama-cpp-python {info['llama_cpp_python']}, model {engine.model_path.name} (V={engine.n_vocab})"
    )
    default_nulls = InfluenceSettings().null_ablations
    s0 = InfluenceSettings(lambdas=(1.0,), ngram=args.ngram, null_ablations=0)
    sd = InfluenceSettings(lambdas=(1.0,), ngram=args.ngram)
    sc0, scd = InfluenceScorer(engine, args.template, s0), InfluenceScorer(engine, args.template, sd)
    print(
        f"  template {args.template!r}, lambda=1, T={T}, disjoint {args.ngram}-grams, |y|={args.response_tokens} "
        f"(greedy, fixed), ctxlite repeats={args.repeats} (median), null ablations 0 and {default_nulls} (default)"
    )
    _ = engine.eog_ids  # one-off 262k-entry scan, cached on the engine: keep it out of the timings

    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()][: args.examples]
    probe = Probe()
    probe.install()
    per_ex = []
    try:
        for r in rows:
            base_ex = Example(context=r["context"], query=r["query"], source=r.get("source"), id=r["id"])
            text, y = fixed_response(engine, sc0, base_ex, args.response_tokens)
            ex = Example(context=r["context"], query=r["query"], response=text, source=r.get("source"), id=r["id"])
            enc = sc0.encode(ex)
            starts = ngram_starts(len(enc.context), args.ngram, args.ngram)
            k = len(starts)
            if args.ref_ablations and args.ref_ablations < k:
                picks = sorted(set(np.linspace(0, k - 1, args.ref_ablations).round().astype(int).tolist()))
            else:
                picks = list(range(k))
            print(
                f"\n[{ex.id}] context {len(enc.context)} tok, prompt {len(enc.with_context)} tok (empty slot "
                f"{len(enc.without_context)}), {k} windows; y = {text!r}"
            )

            ctx_t = {"0": [], "d": []}
            prof = {"0": defaultdict(float)}
            res = {}

            def ctxlite_round():
                for key, sc in (("0", sc0), ("d", scd)):
                    before = probe.snapshot()
                    t0 = time.perf_counter()
                    out = sc.score(ex)
                    dt = time.perf_counter() - t0
                    ctx_t[key].append(dt)
                    res[key] = out.results[0]
                    if key == "0":
                        after = probe.snapshot()
                        for name in after:
                            prof["0"][name] += after[name] - before.get(name, 0.0)
                        prof["0"]["total"] += dt

            ref = {}
            ref_t = {}
            rounds_left = args.repeats
            # interleave ctxlite rounds with the reference's pieces so both see similar load
            ctxlite_round()
            rounds_left -= 1
            for name, prompt in (("full", enc.with_context), ("empty", enc.without_context)):
                t0 = time.perf_counter()
                ref[name] = ref_logprobs(engine, prompt, y, T)
                ref_t[name] = time.perf_counter() - t0
            if rounds_left > 1:
                ctxlite_round()
                rounds_left -= 1
            pl = len(enc.prefix)
            abl_t = []
            for j in picks:
                c = starts[j]
                prompt = enc.with_context[: pl + c] + enc.with_context[pl + c + args.ngram :]
                t0 = time.perf_counter()
                ref[("abl", j)] = ref_logprobs(engine, prompt, y, T)
                abl_t.append(time.perf_counter() - t0)
            while rounds_left > 0:
                ctxlite_round()
                rounds_left -= 1

            r0, rd = res["0"], res["d"]
            ref_tau = np.array([np.abs(ref["full"] - ref[("abl", j)]).sum() for j in picks])
            ref_tau_tok = np.array([np.abs(ref["full"] - ref[("abl", j)]) for j in picks])
            ctx_tau = np.array([r0.ngrams[j].influence for j in picks])
            ctx_tau_tok = np.array([r0.ngrams[j].per_token for j in picks])
            ctx_all = np.array([g.influence for g in r0.ngrams])
            ref_doc = np.abs(ref["full"] - ref["empty"])
            ref_measured = ref_t["full"] + ref_t["empty"] + sum(abl_t)
            ref_extrap = ref_t["full"] + ref_t["empty"] + float(np.mean(abl_t)) * k
            m0, md = statistics.median(ctx_t["0"]), statistics.median(ctx_t["d"])
            floor = rd.noise_floor
            e = dict(
                id=ex.id,
                k=k,
                n_ref=len(picks),
                m0=m0,
                md=md,
                ref_full=ref_t["full"],
                ref_empty=ref_t["empty"],
                ref_abl=abl_t,
                ref_measured=ref_measured,
                ref_extrap=ref_extrap,
                ref_tau=ref_tau,
                ctx_tau=ctx_tau,
                ref_tau_tok=ref_tau_tok,
                ctx_tau_tok=ctx_tau_tok,
                ctx_all=ctx_all,
                prof=prof["0"],
                base_diff=np.abs(ref["full"] - np.array(r0.token_logprob)),
                doc_ref=float(ref_doc.sum()),
                doc_ctx=float(r0.document_influence),
                floor_max=floor.max,
                floor_mean=floor.mean,
                floor_sums=floor.sums,
                dt0=ctx_t["0"],
                dtd=ctx_t["d"],
            )
            per_ex.append(e)
            print(
                f"  ctxlite  null=0: {m0:6.2f} s (runs {', '.join(f'{x:.2f}' for x in ctx_t['0'])})   "
                f"null={default_nulls}: {md:6.2f} s (runs {', '.join(f'{x:.2f}' for x in ctx_t['d'])})"
            )
            print(
                f"  reference: full {ref_t['full']:.1f} s, empty slot {ref_t['empty']:.1f} s, "
                f"{len(picks)} of {k} ablations {sum(abl_t):.1f} s ({np.mean(abl_t):.1f} s each, windows {picks}); "
                f"measured {ref_measured:.1f} s, extrapolated to all {k}: {ref_extrap:.1f} s"
            )
            print(
                f"  influence of the reference's windows: reference {np.round(ref_tau, 3).tolist()}, "
                f"ctxlite {np.round(ctx_tau, 3).tolist()}; noise floor (null sums) {np.round(floor.sums, 3).tolist()}"
            )
            print(f"  ({load_avg()})")
    finally:
        probe.uninstall()

    # ----- summary -------------------------------------------------------
    K = sum(e["k"] for e in per_ex)
    n_ref = sum(e["n_ref"] for e in per_ex)
    c0 = sum(e["m0"] for e in per_ex)
    cd = sum(e["md"] for e in per_ex)
    rm = sum(e["ref_measured"] for e in per_ex)
    rx = sum(e["ref_extrap"] for e in per_ex)
    abl_each = [t for e in per_ex for t in e["ref_abl"]]
    extrap = n_ref < K
    print(f"\nSummary over {len(per_ex)} example(s), {K} n-gram ablations in all (|y| = {args.response_tokens})")
    print(f"  ctxlite, null_ablations=0           {c0:8.2f} s   {K / c0:7.2f} ablations/s")
    print(f"  ctxlite, null_ablations={default_nulls} (default) {cd:8.2f} s   {K / cd:7.2f} ablations/s")
    print(f"  reference, MEASURED ({n_ref} of {K} ablations + full + empty per example): {rm:8.1f} s")
    if extrap:
        print(
            f"  reference, EXTRAPOLATED to all {K} ablations (full + empty measured, + k x mean measured ablation "
            f"time; per-ablation times ranged {min(abl_each):.1f}-{max(abl_each):.1f} s): {rx:8.1f} s   {K / rx:7.3f} ablations/s"
        )
    else:
        print(f"  reference ran every ablation: {K / rm:.3f} ablations/s")
    label = "EXTRAPOLATED reference" if extrap else "measured reference"
    print(f"  ratio {label} / ctxlite (null=0):        {rx / c0:7.1f}x   (target >= 20x)")
    print(f"  ratio {label} / ctxlite (null={default_nulls}, default): {rx / cd:7.1f}x")
    # a like-for-like ratio on the measured part only: the same windows' per-ablation cost
    ref_per_abl = float(np.mean(abl_each))
    ctx_marg = sum(e["m0"] for e in per_ex) / K
    print(
        f"  per ablation: reference {ref_per_abl:.2f} s (measured mean) vs ctxlite {ctx_marg * 1e3:.0f} ms "
        f"(all of ctxlite's time / ablations, incl. base, empty slot and bookkeeping)"
    )

    prof = defaultdict(float)
    for e in per_ex:
        for kk, v in e["prof"].items():
            prof[kk] += v
    tot = prof["total"]
    dec, c_dec, cbs, kv = prof["Engine.decode"], prof["llama_decode"], prof["callbacks"], prof["kv seq_cp/seq_rm"]
    print(
        f"\nWhere ctxlite's time goes (null_ablations=0, all {args.repeats} runs x {len(per_ex)} examples, {tot:.1f} s):"
    )
    print(f"  llama_decode (model forward, C)                 {c_dec:7.2f} s  {c_dec / tot * 100:5.1f} %")
    print(f"  row callbacks (kernels.mixed_logprob, row copy) {cbs:7.2f} s  {cbs / tot * 100:5.1f} %")
    print(
        f"  Engine.decode Python (batch fill, chunking)    {dec - c_dec - cbs:7.2f} s  {(dec - c_dec - cbs) / tot * 100:5.1f} %"
    )
    print(f"  KV seq_cp / seq_rm                              {kv:7.2f} s  {kv / tot * 100:5.1f} %")
    rest = tot - dec - kv
    print(f"  everything else (tokenize, spans, regurgitation, results) {rest:7.2f} s  {rest / tot * 100:5.1f} %")

    ref_tau = np.concatenate([e["ref_tau"] for e in per_ex])
    ctx_tau = np.concatenate([e["ctx_tau"] for e in per_ex])
    rt = np.concatenate([e["ref_tau_tok"].ravel() for e in per_ex])
    ct = np.concatenate([e["ctx_tau_tok"].ravel() for e in per_ex])
    base_diff = np.concatenate([e["base_diff"] for e in per_ex])
    d_tau = np.abs(ref_tau - ctx_tau)
    floors = np.concatenate([np.repeat(e["floor_max"], e["n_ref"]) for e in per_ex])
    within = int(np.sum(d_tau <= floors))
    all_ctx = np.concatenate([e["ctx_all"] for e in per_ex])
    print(f"\nAgreement on the {n_ref} windows the reference scored (lambda=1, T={T})")
    print(
        f"  per n-gram influence tau_i: correlation {np.corrcoef(ref_tau, ctx_tau)[0, 1]:.4f}; mean |diff| "
        f"{d_tau.mean():.3f}, max |diff| {d_tau.max():.3f} nats (tau_i means: reference {ref_tau.mean():.3f}, "
        f"ctxlite {ctx_tau.mean():.3f}; ctxlite over all {K} windows {all_ctx.mean():.3f})"
    )
    print(
        f"  per-token tau_t,i ({len(rt)} values): correlation {np.corrcoef(rt, ct)[0, 1]:.4f}, mean |diff| {np.abs(rt - ct).mean():.4f}"
    )
    print(
        f"  noise floor (ctxlite null ablations, summed |d log p| per split): mean "
        f"{np.mean([e['floor_mean'] for e in per_ex]):.3f}, max {max(e['floor_max'] for e in per_ex):.3f} nats; "
        f"|tau_ref - tau_ctxlite| <= that example's floor max for {within} of {n_ref} windows"
    )
    print(
        f"  unablated log p: reference per-token passes vs ctxlite teacher forcing: mean |diff| {base_diff.mean():.2e}, "
        f"max {base_diff.max():.2e}"
    )
    print(
        f"  document-level influence: reference {[round(e['doc_ref'], 3) for e in per_ex]}, "
        f"ctxlite {[round(e['doc_ctx'], 3) for e in per_ex]}"
    )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nPeak RSS {rss:.0f} MiB; bench wall time {time.perf_counter() - t_bench:.0f} s   ({load_avg()} at end)")
    engine.close()


if __name__ == "__main__":
    main()
