"""What ctxlite finds when it connects: which server it is (its tokenizer dialect) and whether its
completions carry prompt log-probabilities; and what each can be sent."""

from __future__ import annotations

from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.runtime.openai_server import OpenAIServer, ServerConfig, connect
from tests.fake_server import MODEL as FAKE_MODEL
from tests.fake_server import FakeServer
from tests.servers import MODEL_NAME


def _found(backend: OpenAIServer) -> tuple:
    about = backend.describe()
    return about["tokenizer"], about["prompt_logprobs"], about["server_version"] != "not reported"


def test_the_probe_tells_vllm_llama_cpp_pythons_server_and_one_without_logprobs_apart(served, llama_server):
    """vLLM (``/tokenize`` answering ``max_model_len``, a ``/version``), llama-cpp-python's server
    (``/extras/tokenize``, no version) and a server whose completions carry ``"logprobs": null``
    (the fake server, in llama.cpp's dialect): three dialects, and prompt log-probabilities on the
    first two only."""
    with OpenAIServer(ServerConfig(llama_server.url, MODEL_NAME)) as llama_cpp_python:
        found = {"vllm": _found(served), "llama-cpp-python": _found(llama_cpp_python)}
    with FakeServer("no_logprobs") as fake, connect(ServerConfig(fake.url, FAKE_MODEL)) as none:
        found["none"] = _found(none)
    assert found == {
        "vllm": ("vllm", True, True),
        "llama-cpp-python": ("llama-cpp-python", True, False),
        "none": ("llama.cpp", False, True),
    }


def test_a_template_with_text_before_the_context_is_refused_by_llama_cpp_python_and_scored_by_vllm(
    metered, vllm_server, llama_server, tmp_path
):
    """The built-in ``qa`` template, ``Document: {context}...``: llama-cpp-python's server takes text
    prompts only, and the context's first token, cut from the text before it, is not how that text
    tokenizes (exit 2, naming vLLM, which takes token ids); vLLM scores it."""
    (tmp_path / "note.txt").write_text("Dana takes 10 mg lisinopril.", encoding="utf-8")
    args = ["score", "--context", str(tmp_path / "note.txt"), "-q", "What?", "-r", "lisinopril", "--template", "qa"]
    args += ["--doc", "--json", "--backend", "openai", "-T", "1"]
    res = CliRunner().invoke(main, args + ["--base-url", llama_server.url, "--model-name", MODEL_NAME])
    assert res.exit_code == 2 and "tokenizes to other tokens" in res.output and "use vLLM" in res.output, res.output
    assert "llama.cpp" not in res.output  # llama.cpp's llama-server returns no prompt log-probabilities
    res = CliRunner().invoke(main, args + ["--base-url", metered.url, "--model-name", vllm_server.served_name])
    assert res.exit_code == 0, res.output
