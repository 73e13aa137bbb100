"""The tests against a real vLLM (``make test-vllm``; issue 28): one vLLM server for the whole run,
started on a free loopback port by the first test that needs it and stopped after the last, serving
the registry's SmolLM2-135M-Instruct converted to a float32 Hugging Face folder (``make vllm``), and
an independent reference on the same weights (transformers float32, tests/vllm/hf_reference.py).

Where things are comes from the environment ``make test-vllm`` sets: ``CTXLITE_VLLM_PYTHON`` (the
vLLM environment's python), ``CTXLITE_VLLM_MODELS`` (the converted folders, one per GGUF sha256) and
``CTXLITE_VLLM_MODEL`` (the registry name). Without them the tests fail, not skip: ``--vllm`` asks
for them. The server's start time and memory are printed at the end of the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from ctxlite.errors import InvalidParameter
from ctxlite.runtime.backend import sequential_logprobs
from tests.servers import Proxy, VllmServer, converted_model
from tests.vllm.common import STATS, reported_is_sent

HERE = Path(__file__).resolve().parent
LAST = "test_vllm_restart.py"
"""The module whose test kills the shared server and starts it again: run after every other."""


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name == LAST)  # stable: every other test keeps its order


def pytest_terminal_summary(terminalreporter):
    if STATS:
        shown = ", ".join(f"{k} {v:.3g}" for k, v in STATS.items())
        terminalreporter.write_line(f"vLLM server: {shown}")


def _setting(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run the vLLM tests with `make test-vllm` (it builds and names the server)")
    return value


@pytest.fixture(scope="session")
def served_model() -> str:
    """The registry name of the served model (also its name on the server)."""
    return _setting("CTXLITE_VLLM_MODEL")


@pytest.fixture(scope="session")
def model_dir(served_model) -> Path:
    """The converted folder of the registry model's GGUF (``make vllm``: named by its sha256)."""
    try:
        return converted_model(Path(_setting("CTXLITE_VLLM_MODELS")), served_model)
    except RuntimeError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory, served_model, model_dir):
    """The one vLLM server of the run (tests/servers.py VllmServer)."""
    server = VllmServer(_setting("CTXLITE_VLLM_PYTHON"), model_dir, served_model, tmp_path_factory.mktemp("vllm"))
    try:
        server.start()
        STATS["s to healthy"] = server.started_in
        STATS["GB resident"] = server.rss_bytes() / 1e9
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def local(served_model):
    """The served model's GGUF in llama.cpp (the local engine)."""
    from ctxlite.runtime.engine import Engine

    with Engine(served_model) as engine:
        yield engine


@pytest.fixture(scope="session")
def metered(vllm_server):
    """A proxy in front of the server for the whole run (tests/servers.py ``Proxy``), which ``served``
    and the tests without a proxy of their own go through: once the last of them is done, every
    completion it passed on must have cost the server exactly the tokens sent (``usage.prompt_tokens``,
    the cost model of docs/servers.md), as the tests with their own proxy check for theirs."""
    with Proxy(vllm_server.url, limit=10**6) as proxy:
        yield proxy
    STATS["completions metered"] = len(proxy.exchanges)
    assert reported_is_sent(proxy) == [], "vLLM reported processing other prompt tokens than were sent"


@pytest.fixture(scope="session")
def served(metered, vllm_server, local):
    """ctxlite's backend on the server (through ``metered``), connected with the local model's
    tokenizer checked (parity)."""
    from ctxlite.runtime.openai_server import OpenAIServer, ServerConfig

    config = ServerConfig(metered.url, vllm_server.served_name, concurrency=4)
    with OpenAIServer(config, tokenizer=local, tokenizer_name=local.model_path.name) as backend:
        yield backend


class Reference:
    """tests/vllm/hf_reference.py in the vLLM environment, asked one request at a time."""

    def __init__(self, python: str, model_dir: Path):
        cmd = [python, str(HERE / "hf_reference.py"), str(model_dir)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.lock = threading.Lock()
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}

    def ask(self, request: dict) -> dict:
        with self.lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            return json.loads(self.proc.stdout.readline())

    def logprobs(self, tokens, targets_from: int) -> np.ndarray:
        return np.asarray(self.ask({"tokens": [int(t) for t in tokens], "targets_from": int(targets_from)})["logprobs"])

    def greedy(self, tokens, n: int) -> tuple[list[int], list[float]]:
        """The argmax path of ``n`` tokens after ``tokens``, and by how much each argmax led (logits)."""
        answer = self.ask({"greedy": [int(t) for t in tokens], "n": n})
        return answer["tokens"], answer["margins"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="session")
def reference(model_dir):
    ref = Reference(_setting("CTXLITE_VLLM_PYTHON"), model_dir)
    yield ref
    ref.close()


class ReferenceBackend:
    """A teacher-forcing-only backend whose log-probabilities are the reference's and whose tokens are
    the local model's (the server's too: parity is checked at connection), for running ctxlite's
    scorer and oracle on the reference exactly as on the server."""

    def __init__(self, reference: Reference, local):
        self.reference, self.local = reference, local

    def tokenize(self, text, *, add_bos=False, special=False):
        return self.local.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens):
        return self.local.detokenize(tokens)

    def token_bytes(self, token):
        return self.local.token_bytes(token)

    def char_spans(self, tokens):
        return self.local.char_spans(tokens)

    def char_cover(self, tokens):
        return self.local.char_cover(tokens)

    @property
    def bos_id(self):
        return self.local.bos_id

    def check_fits(self, n_tokens, what="prompt + response"):
        pass

    def logprobs(self, tokens, targets_from, temperature=1.0):
        if temperature != 1.0:
            raise InvalidParameter("the reference computes temperature 1 only")
        return self.reference.logprobs(tokens, targets_from)

    def logprobs_many(self, requests, temperature=1.0, on_done=None):
        return sequential_logprobs(self, requests, temperature, on_done)

    def describe(self):
        return {"backend": "transformers reference"}

    def identity(self):
        return {"reference": "transformers float32"}


@pytest.fixture(scope="session")
def reference_backend(reference, local):
    return ReferenceBackend(reference, local)
