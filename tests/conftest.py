"""Shared fixtures. Model tests run the real registry models (Gemma-3-270M Q4_K_M, the default,
and SmolLM2-135M-Instruct) through real llama.cpp; both are provisioned offline from PyPI packages."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import settings

from tests.logschema import sweep

settings.register_profile("ctxlite", deadline=None)
settings.load_profile("ctxlite")
"""No hypothesis deadline anywhere: its default 200 ms per example is a wall-clock threshold, which a
shared or slow machine crosses without any fault in the code."""


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


_SWEPT: set = set()
"""The ``tmp_path`` of every test that has run: checked after it (or exempt), left out of the final sweep."""


@pytest.fixture(autouse=True)
def _logs_follow_the_schema(request):
    """After each test, every result log it wrote in its ``tmp_path`` follows the log format's schema
    (tests/logschema.py), unless the test writes hand-made logs (``@pytest.mark.hand_made_logs``)."""
    yield
    tmp = request.node.funcargs.get("tmp_path")
    if tmp is None:
        return
    _SWEPT.add(tmp)
    if request.node.get_closest_marker("hand_made_logs"):
        return
    found = sweep(tmp)
    assert not found, "a log written by this test does not follow ctxlite/data/log.schema.json:\n" + "\n".join(found)


@pytest.fixture(scope="session", autouse=True)
def _fixture_logs_follow_the_schema(tmp_path_factory):
    """The logs of module and session fixtures (``tmp_path_factory``) are swept once, when the session's
    fixtures are torn down: a log that does not follow the schema is an error of the session's last
    test, which fails ``pytest`` in a pytest-xdist worker too (a worker's own exit status does not
    reach the controller's)."""
    yield
    found = sweep(tmp_path_factory.getbasetemp(), skip=_SWEPT)
    assert not found, "logs that do not follow ctxlite/data/log.schema.json:\n" + "\n".join(found[:20])


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
