"""The tests' independent reference for vLLM: transformers in float32 on the same converted folder,
one obviously right forward pass per scored token (no KV cache, no batching, nothing shared).

Run by the vLLM environment's python (it has torch and transformers; ctxlite does not need them):

    python tests/vllm/hf_reference.py MODEL_DIR

It prints ``{"ready": true}``, then answers each JSON line on stdin with one line on stdout:

* ``{"tokens": [...], "targets_from": k}`` -> ``{"logprobs": [...]}``: for every t >= k,
  log p(tokens[t] | tokens[:t]) = log_softmax(logits of the model run on tokens[:t] alone)[tokens[t]],
  the softmax in float64 over the float32 logits;
* ``{"greedy": [...], "n": k}`` -> ``{"tokens": [...], "margins": [...]}``: k tokens, each the argmax
  of the logits of the prompt plus the tokens chosen before it, run alone, and by how much each
  argmax led the runner-up (logits).
"""

from __future__ import annotations

import json
import sys

import torch
from transformers import AutoModelForCausalLM


@torch.no_grad()
def last_logits(model, tokens: list[int]) -> torch.Tensor:
    """The float32 logits of the next token after ``tokens``, from one forward pass of them alone."""
    return model(torch.tensor([tokens]), use_cache=False).logits[0, -1]


def logprobs(model, tokens: list[int], targets_from: int) -> list[float]:
    out = []
    for t in range(targets_from, len(tokens)):
        out.append(float(torch.log_softmax(last_logits(model, tokens[:t]).double(), -1)[tokens[t]]))
    return out


def greedy(model, tokens: list[int], n: int) -> dict:
    chosen: list[int] = []
    margins: list[float] = []
    for _ in range(n):
        top = torch.topk(last_logits(model, tokens + chosen), 2)
        chosen.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
    return {"tokens": chosen, "margins": margins}


def main(model_dir: str) -> None:
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        if "greedy" in ask:
            answer = greedy(model, ask["greedy"], ask["n"])
        else:
            answer = {"logprobs": logprobs(model, ask["tokens"], ask["targets_from"])}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
