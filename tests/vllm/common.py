"""What the vLLM tests share besides fixtures (imported as ``tests.vllm.common``, once)."""

from __future__ import annotations

TOL_REFERENCE = 3e-4
"""Per-token |Δ log p| (nats) allowed between vLLM and the transformers reference on the same float32
weights. Measured: at most 3.3e-5 (mean 6e-6 to 1.2e-5) over the prompts of these tests, one request
at a time and batched with others (vLLM 0.32.0 on the CPU: float32 rounding that moves with batch
shape); the tolerance is about ten times that. Whatever the tests look for moves values by far more:
an ablation or a token taken for another, or llama.cpp's quantized kernels (0.03-0.1 nats a token
on average here, up to 0.25)."""

STATS: dict[str, float] = {}
"""The server's start times and memory, printed at the end of the run (tests/vllm/conftest.py)."""


def reported_is_sent(proxy) -> list[tuple[int, int]]:
    """The completions passed on by a tests/servers.py ``Proxy`` whose ``usage.prompt_tokens`` is not
    the number of token ids sent, as (sent, reported): every one of them is the cost model's
    count (docs/servers.md) only if this is empty."""
    out = [(len(p["prompt"]), (u or {}).get("prompt_tokens")) for p, u in proxy.exchanges]
    assert out, "no completion went through the proxy"
    return [(sent, reported) for sent, reported in out if sent != reported]
