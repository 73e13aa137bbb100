"""Benchmark: scoring over HTTP, side by side in one run (not a test; issue 28).

The local engine, llama-cpp-python's server and vLLM (CPU) score the same examples with the same
model (--model, Gemma 3 270M by default: vLLM serves the float32 folder ``make vllm`` converted from
its GGUF, llama-cpp-python's server the GGUF itself), λ = 1, T = 1, exhaustive disjoint --ngram
windows, no noise-floor probes (a server run measures none), each example's own response given.
Each server is started by the bench (tests/servers.py, the tests' own server processes: vLLM as
tests/vllm run it, llama-cpp-python's with --threads, as the local engine), warmed up with one request, measured
at each --concurrency (one connection each: ``OpenAIServer`` with that many requests in flight,
scored through ``ctxlite.runs.run_score`` as ``ctxlite score`` does: on a server up to
--concurrency examples in flight together, an example's with- and without-context passes first,
then its ablations), and stopped before the next starts. The local engine has no concurrency (one
row).

Two workloads:

  samples  the bundled examples that carry a response (ctxlite/data/score_sample.jsonl, the first
           --examples), the built-in ``qa`` template. llama-cpp-python's server cannot take it:
           it takes text prompts, and ``Document: `` + context does not re-tokenize to the same
           ids; the bench records its refusal.
  short    tests/server/test_openai_server.py's note ("Dana takes 10 mg lisinopril.", 4-grams, template
           ``{context} Q: {query} A:``): an example whose every ablated sequence is the tokenization
           of its own text, which llama-cpp-python's server needs (on the samples, even with that
           template, some ablation cuts a word or a number and is refused), and small enough for a
           server that spends ~0.5 s a prompt token here sorting the 262,144-token vocabulary in
           Python.

Reported per row: the examples, ablations and requests done, the prompt tokens of the requests by
the cost model ((L + |y|) + (L∅ + |y|) + Σ_i (L − n_i + |y|) per example, docs/servers.md) and
whether the server's ``usage.prompt_tokens`` equals it, seconds, ablations/s, prompt tokens/s and
the ratio to the same server's concurrency-1 rate on the same workload (ablations/s; tokens are
proportional). The local engine's tokens are the same count: what it delivers log-probabilities
for (it computes fewer: it reuses the shared prefix). Also the load average before each row (2
cores shared with other work here: only ratios measured side by side in one run mean anything),
each server's start time and resident memory.

    python bench/bench_server.py --vllm-python VENV/bin/python --vllm-models DIR
        [--backends local llama vllm] [--concurrency 1 4 16] [--examples 11] [--ngram 8]
        [--workloads samples short] [--model gemma-3-270m] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout; tests/servers.py is the tests' server code
from ctxlite.errors import CtxliteError  # noqa: E402
from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings  # noqa: E402
from ctxlite.runs import run_score  # noqa: E402
from ctxlite.runtime.engine import Engine, EngineConfig  # noqa: E402
from ctxlite.runtime.openai_server import OpenAIServer, ServerConfig  # noqa: E402
from ctxlite.runtime.sampling import SamplingSettings  # noqa: E402
from tests.servers import LlamaServer, VllmServer, converted_model  # noqa: E402

DATA = REPO / "ctxlite" / "data" / "score_sample.jsonl"
SHORT = Example("Dana takes 10 mg lisinopril.", "What?", "lisinopril", id="note")
SHORT_TEMPLATE, SHORT_NGRAM = "{context} Q: {query} A:", 4


def load_avg() -> str:
    return "%.1f" % os.getloadavg()[0]


@dataclass
class Workload:
    name: str
    template: str
    examples: list[Example]
    settings: InfluenceSettings


def workloads(args) -> list[Workload]:
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    with_response = [r for r in rows if r.get("response")][: args.examples]
    samples = [Example(r["context"], r["query"], r["response"], id=r["id"]) for r in with_response]

    def settings(ngram: int) -> InfluenceSettings:
        temperature_1 = SamplingSettings(temperature=1.0)
        return InfluenceSettings(ngram=ngram, null_ablations=0, search="exhaustive", sampling=temperature_1)

    every = {
        "samples": Workload("samples", "qa", samples, settings(args.ngram)),
        "short": Workload("short", SHORT_TEMPLATE, [SHORT], settings(SHORT_NGRAM)),
    }
    return [every[w] for w in args.workloads]


@dataclass
class Cell:
    examples: int = 0
    ablations: int = 0
    requests: int = 0
    tokens: int = 0  # the cost model's prompt tokens
    reported: int | None = None  # the server's usage.prompt_tokens, summed
    in_flight: int | None = None  # the most requests in flight at once
    seconds: float = 0.0
    refused: str | None = None

    @property
    def rate(self) -> float:
        return self.ablations / self.seconds

    @property
    def token_rate(self) -> float:
        return self.tokens / self.seconds


def cost_model_tokens(scorer: InfluenceScorer, example: Example, result: dict) -> int:
    """(L + |y|) + (L∅ + |y|) + Σ_i (L − n_i + |y|) for one scored example (docs/servers.md)."""
    enc = scorer.encode(example)
    full, empty, y = len(enc.with_context), len(enc.without_context), len(result["response_ids"])
    return (full + y) + (empty + y) + sum(full - g["n"] + y for g in result["ngrams"])


def measure(backend, counter: InfluenceScorer, work: Workload) -> Cell:
    """Score every example of ``work`` on ``backend`` through the run layer, as ``ctxlite score`` does
    (timed; on a server several examples in flight together, their requests sharing the backend's
    ``--concurrency`` slots), the tokens counted by ``counter`` (the local engine's scorer: the same
    tokens, checked at connection)."""
    stats = getattr(backend, "request_stats", None)
    before = stats() if stats else None
    cell = Cell()
    began = time.perf_counter()
    try:
        run = run_score(backend, work.examples, work.settings, template=work.template)
    except CtxliteError as e:
        cell.refused = str(e).splitlines()[0]
        return cell
    cell.seconds = time.perf_counter() - began
    results = [(example, r.to_dict()["results"][0]) for example, r in zip(work.examples, run.results)]
    for example, result in results:
        cell.examples += 1
        cell.ablations += len(result["ngrams"])
        cell.requests += 2 + len(result["ngrams"])
        cell.tokens += cost_model_tokens(counter, example, result)
    if before is not None:
        after = stats()
        cell.in_flight = after.max_in_flight
        if after.prompt_tokens is not None:
            cell.reported = after.prompt_tokens - (before.prompt_tokens or 0)
    return cell


HEADER = (
    "| workload | backend | concurrency (most in flight) | load | examples | ablations | requests | prompt tokens "
    "| server reported = cost model | seconds | ablations/s | prompt tokens/s | × own concurrency 1 |"
)


def row(work: Workload, name: str, c, load: str, cell: Cell, base: Cell | None) -> str:
    if cell.refused:
        return f"| {work.name} | {name} | {c} | {load} | refused: {cell.refused} |" + " — |" * 8
    same = "—" if cell.reported is None and name == "local engine" else str(cell.reported == cell.tokens).lower()
    ratio = f"{cell.rate / base.rate:.2f}" if base and not base.refused else "—"
    c = f"{c} ({cell.in_flight})" if cell.in_flight is not None else c
    return (
        f"| {work.name} | {name} | {c} | {load} | {cell.examples} | {cell.ablations} | {cell.requests} | "
        f"{cell.tokens} | {same} | {cell.seconds:.1f} | {cell.rate:.2f} | {cell.token_rate:.0f} | {ratio} |"
    )


def run_server(server, name, model, local, counter, works, args, notes) -> list[str]:
    lines = []
    try:
        server.start()
        notes.append(f"{name}: healthy after {server.started_in:.0f} s")
        for work in works:
            base = None
            for c in args.concurrency:
                load = load_avg()
                config = ServerConfig(server.url, model, concurrency=c, timeout=args.request_timeout)
                with OpenAIServer(config, tokenizer=local, tokenizer_name=local.model_path.name) as backend:
                    if c == args.concurrency[0]:  # warm-up, not timed
                        warm = local.tokenize("Warm up the server.", add_bos=local.bos_id is not None)
                        backend.logprobs(warm, len(warm) - 1)
                    cell = measure(backend, counter[work.name], work)
                base = base or cell
                lines.append(row(work, name, c, load, cell, base))
                print(lines[-1], flush=True)
                if cell.refused:  # the same requests at any concurrency
                    break
        notes.append(f"{name}: {server.rss_bytes() / 1e9:.2f} GB resident after the run (its process group)")
    finally:
        server.stop()
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", nargs="+", default=["local", "llama", "vllm"], choices=["local", "llama", "vllm"])
    ap.add_argument("--workloads", nargs="+", default=["samples", "short"], choices=["samples", "short"])
    ap.add_argument("--concurrency", nargs="+", type=int, default=[1, 4, 16])
    ap.add_argument("--examples", type=int, default=11, help="bundled examples with a response (11 at most)")
    ap.add_argument("--ngram", type=int, default=8)
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--vllm-python", default=os.environ.get("CTXLITE_VLLM_PYTHON"), help="make vllm's python")
    ap.add_argument("--vllm-models", default=os.environ.get("CTXLITE_VLLM_MODELS"), help="make vllm's models")
    ap.add_argument("--threads", type=int, default=1, help="the local engine's and llama-cpp-python's server's")
    ap.add_argument("--request-timeout", type=float, default=600.0)
    args = ap.parse_args()
    if "vllm" in args.backends and not (args.vllm_python and args.vllm_models):
        ap.error("vllm needs --vllm-python and --vllm-models (`make vllm` builds them)")

    works = workloads(args)
    print(f"# bench_server: {args.model}, λ = 1, T = 1, samples {args.ngram}-grams, short {SHORT_NGRAM}-grams")
    print(
        f"# {os.cpu_count()} cores, load average {load_avg()}; local engine and llama-cpp-python: {args.threads} thread(s)"
    )
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    notes: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench_server-"))
    with Engine(args.model, EngineConfig(n_threads=args.threads)) as local:
        counter = {w.name: InfluenceScorer(local, w.template, w.settings) for w in works}
        for backend in args.backends:
            if backend == "local":
                for work in works:
                    load = load_avg()
                    print(row(work, "local engine", "—", load, measure(local, counter[work.name], work), None))
            elif backend == "llama":
                server = LlamaServer(tmp, model=args.model, threads=args.threads)
                run_server(server, "llama-cpp-python", args.model, local, counter, works, args, notes)
            else:
                folder = converted_model(Path(args.vllm_models), args.model)
                server = VllmServer(args.vllm_python, folder, args.model, tmp)
                run_server(server, "vLLM", args.model, local, counter, works, args, notes)
    for note in notes:
        print(f"# {note}")
    print(f"# load average at the end: {load_avg()}")


if __name__ == "__main__":
    main()
