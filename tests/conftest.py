"""Shared fixtures. Model tests run the real registry models (Gemma-3-270M Q4_K_M, the default,
and SmolLM2-135M-Instruct) through real llama.cpp; both are provisioned offline from PyPI packages."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

import pytest

VLLM_TESTS = Path(__file__).resolve().parent / "vllm"


def pytest_addoption(parser):
    parser.addoption(
        "--vllm",
        action="store_true",
        help="run only the tests against a real vLLM server (tests/vllm: `make test-vllm`); else they are left out",
    )


def pytest_collection_modifyitems(config, items):
    """The tests under tests/vllm carry the ``vllm`` marker and run only with ``--vllm`` (they start a
    vLLM server from the environment ``make vllm`` builds); with ``--vllm`` nothing else runs."""
    wanted = config.getoption("--vllm")
    keep, drop = [], []
    for item in items:
        if VLLM_TESTS in item.path.parents:
            item.add_marker(pytest.mark.vllm)
        (keep if (item.get_closest_marker("vllm") is not None) == wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_configure(config):
    """``make test`` runs one pytest-xdist worker per CPU; each worker is pinned to its own share of
    the CPUs, so the llama.cpp threads of two workers never compete (an engine's default thread
    count is its process's affinity), and a model test runs as fast as it would alone."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    n = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = cpus[int(worker.removeprefix("gw")) :: n]
    if share:
        os.sched_setaffinity(0, share)


@pytest.fixture(scope="session")
def engine():
    from ctxlite.runtime.engine import Engine

    eng = Engine()
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def instruct():
    """The second registry model: instruction-tuned SmolLM2-135M with a ChatML template."""
    from ctxlite.runtime.engine import Engine

    with Engine("smollm2-135m-instruct") as eng:
        yield eng


@pytest.fixture(scope="session")
def score_examples() -> list[dict]:
    text = resources.files("ctxlite").joinpath("data", "score_sample.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def with_response(score_examples) -> list[dict]:
    """Sample examples that carry a fixed response (deterministic scoring)."""
    return [d for d in score_examples if d.get("response")]


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """llama-cpp-python's server on loopback serving the default model (tests/servers.py), shared by the
    session; skipped where its ``server`` extra is not installed."""
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's server extra is not installed")
    from tests.servers import LlamaServer

    server = LlamaServer(tmp_path_factory.mktemp("server")).start()
    yield server
    server.stop()
