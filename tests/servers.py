"""A real OpenAI-compatible server for the tests: llama-cpp-python's own (``python -m llama_cpp.server``,
its ``server`` extra) serving the default model on a free loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx

MODEL_NAME = "gemma-3-270m"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """``python -m llama_cpp.server`` on 127.0.0.1 serving the default model (1 thread, small context)."""

    def __init__(self, tmp: Path, port: int | None = None):
        self.port = port or _free_port()
        self.log = tmp / f"llama-server-{self.port}.log"
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 180.0) -> LlamaServer:
        from ctxlite.runtime.models import resolve_model

        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(resolve_model(None))]
        cmd += ["--model_alias", MODEL_NAME, "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--n_ctx", "512", "--n_threads", "1", "--n_threads_batch", "1", "--logits_all", "true"]
        env = {k: v for k, v in os.environ.items() if k not in ("CTXLITE_API_KEY", "OPENAI_API_KEY")}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {self.log.read_text(errors='replace')[-2000:]}")
            try:
                if httpx.get(f"{self.url}/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("llama_cpp.server did not become ready")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


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
