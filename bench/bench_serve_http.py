"""Benchmark: ``ctxlite serve`` over HTTP, one request at a time against many at once (issue 29).

The server holds one engine and answers one request at a time, in arrival order (requests queue on
its engine lock; none is batched with another). This measures what that means for a client: a real
``ctxlite serve`` subprocess on loopback (the first bundled score sample's context, ε-bounded
CID), asked the same --requests completions (the samples' questions, --max-tokens tokens each,
T = 0.8, seed i for request i, replayed: the server holds a --replay-secret-file, and the in-process
loop seeds its generator as the server does, ``ctxlite.serve.service.replay_seed``)

* in-process, with the server's own token loop (``ctxlite.serve.decoding.steps``: no HTTP, no JSON);
* over HTTP, one after another;
* over HTTP, all sent at once from --requests client threads.

Reported side by side in one run: tokens/s, mean and largest latency per request, and whether every
answer over HTTP is token for token the in-process one of the same seed (queued requests do not
disturb one another). The three phases run one after another, never together.

    python bench/bench_serve_http.py [--requests 8] [--max-tokens 16] [--epsilon 1]
        [--model gemma-3-270m] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from bench_serve import DATA  # noqa: E402

from ctxlite.runtime.engine import Engine, EngineConfig  # noqa: E402
from ctxlite.serve.decoding import steps  # noqa: E402
from ctxlite.serve.service import SEPARATOR, replay_seed  # noqa: E402

TEMPERATURE = 0.8
SECRET = b"bench-replay-secret-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(context_file: Path, log: Path, args, port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "ctxlite", "serve", "--context", str(context_file), "--log", str(log)]
    command += ["--epsilon", str(args.epsilon), "--model", args.model, "--port", str(port)]
    command += ["--max-tokens-cap", str(args.max_tokens)] + (["-t", str(args.threads)] if args.threads else [])
    (log.parent / "replay.secret").write_bytes(SECRET)
    command += ["--replay-secret-file", str(log.parent / "replay.secret")]
    env = {k: v for k, v in os.environ.items() if k not in ("CTXLITE_API_KEYS",)}
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO)
    began = time.monotonic()
    while time.monotonic() < began + 180:
        if proc.poll() is not None:
            sys.exit(f"ctxlite serve exited: {proc.stderr.read().decode(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    sys.exit("ctxlite serve did not become ready within 180 s")


def ask(port: int, prompt: str, n: int, seed: int) -> tuple[list[int], float]:
    """(token ids, seconds) of one completion."""
    began = time.perf_counter()
    body = {"prompt": prompt, "max_tokens": n, "temperature": TEMPERATURE, "seed": seed}
    r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=600)
    r.raise_for_status()
    return r.json()["usage"]["ctxlite"]["token_ids"], time.perf_counter() - began


def summary(name: str, answers: list[tuple[list[int], float]], wall: float) -> dict:
    tokens = sum(len(t) for t, _ in answers)
    lat = [s for _, s in answers]
    row = {"phase": name, "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall}
    row |= {"latency_mean_s": sum(lat) / len(lat), "latency_max_s": max(lat)}
    print(
        f"{name:<26} {tokens:7} {wall:8.2f} {row['tokens_per_s']:8.1f} {row['latency_mean_s']:10.2f} "
        f"{row['latency_max_s']:9.2f}",
        flush=True,
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args()
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    context = rows[0]["context"]
    prompts = [f"Question: {rows[i % len(rows)]['query']}\nAnswer:" for i in range(args.requests)]
    n = args.max_tokens

    with Engine(args.model, EngineConfig(n_threads=args.threads)) as engine:

        def direct_answer(prompt: str, n: int, seed: int) -> tuple[list[int], float]:
            """As the server answers: its token loop on one engine whose cache the requests share."""
            t0, tokens = time.perf_counter(), []
            without = engine.tokenize(prompt, add_bos=True, special=True)
            with_ = engine.tokenize(context + SEPARATOR, add_bos=True, special=True) + without[1:]
            stream = replay_seed(SECRET, "completions", without, TEMPERATURE, n, seed)
            for step in steps(engine, with_, without, 1.0, args.epsilon, TEMPERATURE, n, stream):
                tokens.append(step.token)  # as the server's usage.ctxlite.token_ids: an end-of-text too
                if step.eog:
                    break
            return tokens, time.perf_counter() - t0

        direct_answer(prompts[0], 1, 0)  # warm-up, as the server's below
        began = time.perf_counter()
        direct = [direct_answer(p, n, i) for i, p in enumerate(prompts)]
        direct_wall = time.perf_counter() - began

    print(
        f"# {args.requests} requests of {n} tokens, eps {args.epsilon:g}, {args.model}, load {os.getloadavg()[0]:.2f}"
    )
    print(f"{'phase':<26} {'tokens':>7} {'wall s':>8} {'tok/s':>8} {'latency s':>10} {'max lat s':>9}")
    out = [summary("in-process token loop", direct, direct_wall)]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "context.txt").write_text(context, encoding="utf-8")
        port = free_port()
        proc = start_server(Path(tmp) / "context.txt", Path(tmp) / "serve.jsonl", args, port)
        try:
            ask(port, prompts[0], 1, 0)  # warm-up: the first request pages the weights in
            began = time.perf_counter()
            one_by_one = [ask(port, p, n, i) for i, p in enumerate(prompts)]
            out.append(summary("HTTP, one at a time", one_by_one, time.perf_counter() - began))
            together: list = [None] * len(prompts)
            threads = [
                threading.Thread(target=lambda i=i, p=p: together.__setitem__(i, ask(port, p, n, i)))
                for i, p in enumerate(prompts)
            ]
            began = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            out.append(summary(f"HTTP, {len(prompts)} at once", together, time.perf_counter() - began))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    same = [a[0] == b[0] == c[0] for a, b, c in zip(direct, one_by_one, together)]
    print(f"answers token for token the in-process ones of the same seed: {sum(same)}/{len(same)}")
    for i, (a, b, c) in enumerate(zip(direct, one_by_one, together)):
        if not a[0] == b[0] == c[0]:
            print(f"  request {i}: in-process {a[0]}\n  one at a time {b[0]}\n  at once {c[0]}")
    print(f"HTTP one at a time / in-process: {out[1]['tokens_per_s'] / out[0]['tokens_per_s']:.2f}x tokens/s; "
          f"{len(prompts)} at once / one at a time: {out[2]['tokens_per_s'] / out[1]['tokens_per_s']:.2f}x")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": out, "same_tokens": sum(same)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
