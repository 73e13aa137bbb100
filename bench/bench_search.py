"""Benchmark adaptive against exhaustive n-gram ablation search (not a test).

Data: the first --samples bundled score samples (ctxlite/data/score_sample.jsonl), and long
contexts made here for --lengths L: consecutive samples concatenated and cut to exactly L context
tokens, with the query (and reference response, when it has one) of the sample in the middle.
Each example's response is fixed once (its bundled response, else CID at λ = 1 with --seed) and
held fixed for both searches. Both searches run on the same engine, one after the other, at the
default settings (λ = 1, T = 0.8, disjoint --ngram windows, default null ablations).

Per example: decoded tokens of the ablations (ctxlite's own count, ``search.tokens_decoded``) and
wall time of the whole ``score`` call for both searches, whether adaptive's top-1 n-gram equals
exhaustive's, and |top-3 ∩ top-3| / 3. Adaptive's n-grams are checked bit for bit against
exhaustive's. Then the scaling table (tokens and seconds against L), the null ablations' share
of each bundled run (tokens), and, with several --ratios or --top, the trade-off across the
refinement ratio ρ and the number K of n-grams searched for (the top-3 comparison stays at 3: a
search for K > 3 reports its own 3 best).

Its last line, over the examples with L >= 512 (F = Σ adaptive tokens / Σ exhaustive tokens, at
the first K of --top and the first ρ of --ratios):

    tokens_fraction=F top1_agreement=A top3_overlap=O

    python bench/bench_search.py [--samples 30] [--lengths 512,1024,2048] [--per-length 2]
                                 [--ratios 1,1.5,2] [--top 3,5] [--threads 1] [--svg FILE]
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
from ctxlite.influence.cid import generate  # noqa: E402
from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings  # noqa: E402
from ctxlite.runtime.engine import Engine, EngineConfig  # noqa: E402
from ctxlite.runtime.sampling import SamplingSettings  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "ctxlite" / "data" / "score_sample.jsonl"


def long_examples(engine, samples: list[dict], lengths: list[int], per_length: int) -> list[Example]:
    """Contexts of exactly L tokens: samples concatenated from offset j, cut to L tokens; the query
    is about the sample in the middle of the cut."""
    out = []
    for L in lengths:
        for j in range(per_length):
            parts, ids, owners = [], [], []
            k = j
            while len(ids) < L:
                s = samples[k % len(samples)]
                piece = ("\n\n" if parts else "") + s["context"]
                toks = engine.tokenize(piece)
                ids += toks
                owners += [k % len(samples)] * len(toks)
                parts.append(piece)
                k += 1
            about = samples[owners[L // 2]]
            context = engine.detokenize(ids[:L])
            if len(engine.tokenize(context)) != L:  # a token boundary that re-tokenizes differently
                context = engine.detokenize(ids[: L - 1])
            out.append(
                Example(
                    context=context, query=about["query"], response=about.get("response"), id=f"L{L}-{j}-{about['id']}"
                )
            )
    return out


def fixed_response(engine, scorer, ex: Example, seed: int) -> Example:
    if ex.response is not None:
        return ex
    enc = scorer.encode(ex)
    gen = generate(engine, enc.with_context, enc.without_context, 1.0, SamplingSettings(seed=seed), None)
    return Example(context=ex.context, query=ex.query, response=engine.detokenize(gen.token_ids), id=ex.id)


def run(engine, ex: Example, settings: InfluenceSettings):
    scorer = InfluenceScorer(engine, "qa", settings)
    t0, tok0 = time.perf_counter(), engine.tokens_decoded
    r = scorer.score(ex).results[0]
    return r, time.perf_counter() - t0, engine.tokens_decoded - tok0


def scaling(rows: list[dict]) -> list[tuple]:
    """(L, examples, mean tokens ex, mean tokens ad, mean seconds ex, mean seconds ad) per L."""
    out = []
    for L in sorted({r["L"] for r in rows}):
        at = [r for r in rows if r["L"] == L]
        means = [statistics.mean(r[k][i] for r in at) for k in ("tok", "sec") for i in (0, 1)]
        out.append((L, len(at), *means))
    return out


def scaling_plot(curve: list[tuple]) -> str:
    """The scaling curve as an SVG (ctxlite's report plots): decoded tokens against L, both searches."""
    from ctxlite.reporting.svg import line_plot

    xs = [c[0] for c in curve]
    series = [("exhaustive", xs, [c[2] for c in curve]), ("adaptive", xs, [c[3] for c in curve])]
    return line_plot("Decoded tokens against context length", series, "context tokens L", "decoded tokens")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=30, help="bundled samples scored as they are (0 = none)")
    p.add_argument("--lengths", default="512,1024,2048", help="long-context lengths in tokens ('' = none)")
    p.add_argument("--per-length", type=int, default=2, help="long contexts per length")
    p.add_argument(
        "--ratios",
        default=f"{InfluenceSettings().refine_ratio:g}",
        help="refinement ratios ρ; the first is the headline",
    )
    p.add_argument("--top", default="3", help="K, the n-grams adaptive search looks for; the first is the headline")
    p.add_argument(
        "--top-blocks",
        type=int,
        default=InfluenceSettings().top_blocks,
        help="most blocks of the first pass (smaller blocks see more, cost more)",
    )
    p.add_argument("--ngram", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="llama.cpp threads (1: steadier wall times on shared cores)")
    p.add_argument("--model", default=None)
    p.add_argument("--svg", default=None, help="also write the scaling curve (tokens against L) to this SVG file")
    args = p.parse_args()
    ratios = [float(x) for x in args.ratios.split(",")]
    tops = [int(x) for x in args.top.split(",")]
    sweep = [(k, rho) for k in tops for rho in ratios]
    lengths = [int(x) for x in args.lengths.split(",") if x]

    engine = Engine(args.model, EngineConfig(n_ctx=max(lengths + [512]) + 256, n_threads=args.threads))
    print(
        f"adaptive vs exhaustive search, {args.ngram}-grams, K={args.top}, top blocks {args.top_blocks}, load average {os.getloadavg()[0]:.2f}"
    )
    samples = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    plain = InfluenceScorer(engine, "qa", InfluenceSettings(lambdas=(1.0,), ngram=args.ngram))
    examples = [
        Example(context=s["context"], query=s["query"], response=s.get("response"), id=s["id"])
        for s in samples[: args.samples]
    ]
    # longest first: the wall-time ratio that matters most is measured while the machine is freshest
    long = sorted(long_examples(engine, samples, lengths, args.per_length), key=lambda ex: -len(ex.context))
    examples = [fixed_response(engine, plain, ex, args.seed) for ex in long + examples]

    print(
        f"{'example':<22}{'L':>5}{'W':>5}{'K':>3} {'ρ':>5}{'abl ex':>7}{'abl ad':>7}{'tok ex':>8}{'tok ad':>8}{'F':>6}"
        f"{'s ex':>7}{'s ad':>7}{'top1':>5}{'top3':>5}{'null%':>6}"
    )
    rows = []
    for ex in examples:
        common = dict(lambdas=(1.0,), ngram=args.ngram)
        full, t_ex, all_ex = run(engine, ex, InfluenceSettings(search="exhaustive", top_spans=tops[0], **common))
        best = [g.start for g in full.top_spans(3)]
        exact = {g.start: g.influence for g in full.ngrams}
        null_share = full.search.null_tokens / all_ex
        for k, rho in sweep:
            ad, t_ad, _ = run(
                engine,
                ex,
                InfluenceSettings(
                    search="adaptive", refine_ratio=rho, top_spans=k, top_blocks=args.top_blocks, **common
                ),
            )
            if any(exact[g.start] != g.influence for g in ad.ngrams):
                raise SystemExit(f"{ex.id}: an adaptive n-gram differs from exhaustive search's value")
            found = [g.start for g in ad.top_spans(3)]
            row = {
                "id": ex.id,
                "L": full.context_tokens,
                "W": full.search.windows,
                "rho": rho,
                "K": k,
                "abl": (full.search.ablations, ad.search.ablations),
                "tok": (full.search.tokens_decoded, ad.search.tokens_decoded),
                "counted": ad.search.exhaustive_tokens,
                "sec": (t_ex, t_ad),
                "top1": found[:1] == best[:1],
                "top3": len(set(found) & set(best)) / max(1, min(3, len(best))),
                "null": null_share,
            }
            rows.append(row)
            if row["counted"] != row["tok"][0]:
                raise SystemExit(f"{ex.id}: the dry-run count of exhaustive tokens differs from the real one")
            print(
                f"{ex.id[:21]:<22}{row['L']:>5}{row['W']:>5}{k:>3} {rho:>5.2f}{row['abl'][0]:>7}{row['abl'][1]:>7}"
                f"{row['tok'][0]:>8}{row['tok'][1]:>8}{row['tok'][1] / row['tok'][0]:>6.2f}{t_ex:>7.1f}{t_ad:>7.1f}"
                f"{'yes' if row['top1'] else 'NO':>5}{row['top3']:>5.2f}{100 * null_share:>6.1f}",
                flush=True,
            )

    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    print("\nscaling (first K and ρ): tokens and seconds against L")
    print(f"{'L':>6}{'examples':>9}{'tok ex':>10}{'tok ad':>10}{'s ex':>8}{'s ad':>8}{'time ×':>8}")
    first = [r for r in rows if (r["K"], r["rho"]) == sweep[0]]
    curve = scaling(first)
    for L, n, tex, tad, sex, sad in curve:
        print(f"{L:>6}{n:>9}{tex:>10.0f}{tad:>10.0f}{sex:>8.1f}{sad:>8.1f}{sex / sad:>8.2f}")
    if args.svg:
        Path(args.svg).write_text(scaling_plot(curve), encoding="utf-8")
        print(f"scaling plot written to {args.svg}")
    bundled = [r for r in first if r["L"] < 512]
    if bundled:
        shares = [r["null"] for r in bundled]
        print(
            f"\nnull ablations' share of the decoded tokens (exhaustive, defaults, L < 512): "
            f"mean {100 * statistics.mean(shares):.1f} %, max {100 * max(shares):.1f} %"
        )
    if len(sweep) > 1:
        print("\ntrade-off across K and ρ (L >= 512): F, top-1 agreement, top-3 overlap")
        for k, rho in sweep:
            at = [r for r in rows if (r["K"], r["rho"]) == (k, rho) and r["L"] >= 512]
            if at:
                f = sum(r["tok"][1] for r in at) / sum(r["tok"][0] for r in at)
                print(
                    f"  K={k} ρ={rho:<5g} F={f:.3f} A={statistics.mean(r['top1'] for r in at):.3f} "
                    f"O={statistics.mean(r['top3'] for r in at):.3f}"
                )
    long = [r for r in first if r["L"] >= 512]
    if long:
        f = sum(r["tok"][1] for r in long) / sum(r["tok"][0] for r in long)
        a = statistics.mean(r["top1"] for r in long)
        o = statistics.mean(r["top3"] for r in long)
        print(f"tokens_fraction={f:.3f} top1_agreement={a:.3f} top3_overlap={o:.3f}")


if __name__ == "__main__":
    main()
