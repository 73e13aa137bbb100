"""Scoring through a real vLLM: token-id prompts, the reference's numbers, the local engine's ranking,
the cost the server reports.

The served weights are the GGUF's quantized values de-quantized to float32 (tools/vllm_convert.py),
so vLLM's log-probabilities are compared with an independent computation on the same weights
(transformers float32, one forward pass per token: tests/vllm/hf_reference.py), not with llama.cpp,
which computes with quantized kernels (its values differ by up to ~0.25 nats a token here).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.errors import InvalidParameter
from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings
from ctxlite.runtime.openai_server import OpenAIServer, ServerConfig
from ctxlite.runtime.sampling import SamplingSettings
from tests.servers import Proxy
from tests.vllm.common import STATS, TOL_REFERENCE, reported_is_sent

NOTE = "Dana takes 10 mg lisinopril daily for her blood pressure."
QUERY = "What was prescribed?"
RESPONSE = " Lisinopril, 10 mg."
LAMBDA_1 = InfluenceSettings(lambdas=(1.0,), ngram=4, sampling=SamplingSettings(temperature=1.0))


def _server_args(url: str, model: str, *more: str) -> list[str]:
    return ["--backend", "openai", "--base-url", url, "--model-name", model, "-T", "1", *more]


def _equal_scores(a: dict, b: dict, tol: float) -> None:
    """Two λ = 1 results of one example: the same tokens and n-grams, every log-probability within
    ``tol`` and every sum of them (an influence) within ``tol`` per response token."""
    assert a["response_ids"] == b["response_ids"]
    n = len(a["response_ids"])
    for key in ("token_logprob", "token_logprob_without"):
        assert np.max(np.abs(np.subtract(a[key], b[key]))) <= tol, key
    assert abs(a["document_influence"] - b["document_influence"]) <= 2 * tol * n
    spans = lambda r: [(g["start"], g["n"], g["text"]) for g in r["ngrams"]]  # noqa: E731
    assert spans(a) == spans(b)
    for g, h in zip(a["ngrams"], b["ngrams"]):
        assert np.max(np.abs(np.subtract(g["per_token"], h["per_token"]))) <= 2 * tol, (g, h)
        assert abs(g["influence"] - h["influence"]) <= 2 * tol * n, (g, h)


# ----- the server and its tokens ------------------------------------------------------------------
def test_the_probe_finds_vllm_with_prompt_logprobs_and_its_context_window(served, local):
    about = served.describe()
    assert about["tokenizer"] == "vllm" and about["prompt_logprobs"] is True
    assert about["n_ctx"] == 1024  # --max-model-len, read from /v1/models
    assert about["server_version"].split(".")[0].isdigit()  # /version
    assert about["tokenizer_checked_against"] == local.model_path.name
    assert served.identity()["server"]["dialect"] == "vllm"


def test_the_servers_tokens_are_the_local_models(served, local):
    """Beyond the parity texts checked at connection: pieces, character spans and texts that cut
    characters across tokens, and no BOS on either side (SmolLM2 adds none)."""
    assert served.bos_id is None and local.bos_id is None
    for text in (NOTE, "Über 10 µg, naïve café ☕.", "Question: x\nAnswer:", "東京 — 1,234.5 %"):
        toks = local.tokenize(text)
        assert served.tokenize(text) == toks, text
        assert served.char_spans(toks) == local.char_spans(toks), text
        assert served.detokenize(toks) == local.detokenize(toks) == text


def test_a_tokenizer_that_is_not_the_local_models_is_refused_at_connection(vllm_server, engine, tmp_path):
    """The default model (Gemma 3, another vocabulary) named as the served model's local copy: the
    connection is refused before anything is scored, in Python (InvalidParameter) and on the command
    line (exit 2, one line); the served model's own GGUF is accepted."""
    config = ServerConfig(vllm_server.url, vllm_server.served_name)
    with pytest.raises(InvalidParameter, match="does not tokenize as gemma"):
        OpenAIServer(config, tokenizer=engine, tokenizer_name=engine.model_path.name)
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    base = ["score", "--context", str(tmp_path / "note.txt"), "-q", QUERY, "-r", RESPONSE, "--doc", "--json"]
    base += _server_args(vllm_server.url, vllm_server.served_name)
    res = CliRunner().invoke(main, base + ["--model", "gemma-3-270m"])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "does not tokenize as gemma-3-270m-q4_k_m.gguf" in res.output, res.output
    res = CliRunner().invoke(main, base + ["-m", vllm_server.served_name])
    assert res.exit_code == 0, res.output


# ----- the numbers: the reference on the same weights ---------------------------------------------
def test_teacher_forced_logprobs_equal_the_reference(served, local, reference):
    """Every position of a sentence, and the last tokens of a long prompt, alone and four at once
    (vLLM batches concurrent requests): within TOL_REFERENCE of transformers on the same weights."""
    with open("ctxlite/data/score_sample.jsonl", encoding="utf-8") as f:
        doc = json.loads(f.readline())
    long = local.tokenize(f"Document: {doc['context']}\nQuestion: {doc['query']}\nAnswer: {doc['response']}")
    requests = [(local.tokenize(NOTE), 1), (long, len(long) - 12)]
    expected = [reference.logprobs(t, k) for t, k in requests]
    alone = [served.logprobs(t, k) for t, k in requests]
    together = served.logprobs_many(requests * 2)
    gaps = [np.max(np.abs(got - expected[i % 2])) for i, got in enumerate((*alone, *together))]
    STATS["max |Δ log p| to the reference"] = max(gaps)
    assert max(gaps) <= TOL_REFERENCE, gaps


def test_a_template_with_text_before_the_context_scores_through_token_ids(reference_backend, vllm_server, tmp_path):
    """The built-in ``qa`` template puts "Document: " before the context, which llama-cpp-python's
    server cannot take (its text prompts re-tokenize the boundary otherwise; tests/vllm/
    test_vllm_probe.py); through vLLM every sequence goes as token ids, and the λ = 1 result of
    ``ctxlite score`` equals the scorer's on the reference, token for token and n-gram for n-gram."""
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    args = ["score", "--context", str(tmp_path / "note.txt"), "-q", QUERY, "-r", RESPONSE, "--template", "qa"]
    args += ["--ngram", "4", "--json"]
    with Proxy(vllm_server.url) as proxy:
        res = CliRunner().invoke(main, args + _server_args(proxy.url, vllm_server.served_name))
        assert res.exit_code == 0, res.output
    prompts = [p["prompt"] for p in proxy.payloads]
    assert all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompts)
    assert reported_is_sent(proxy) == []
    served_result = json.loads(res.stdout)["result"]["results"][0]
    expected = InfluenceScorer(reference_backend, "qa", LAMBDA_1).score(Example(NOTE, QUERY, RESPONSE))
    expected = expected.to_dict()["results"][0]
    assert len(served_result["ngrams"]) >= 3
    _equal_scores(served_result, expected, TOL_REFERENCE)


def test_document_qa_ranks_the_same_top_ngrams_as_the_local_engine(served, local, score_examples):
    """The first sample clinical note with a response (clin-001: the qa template, 8-grams, λ = 1): vLLM
    on the de-quantized weights and llama.cpp on the quantized GGUF rank the same three n-grams first,
    in order, and the same five on top. Their log-probabilities differ by up to a few tenths of a
    nat a token, and their influences by up to 0.6 nats here; the ranks asserted are those further
    apart than that (measured: 27.5-27.9, 20.8-21.4 and 14.3-14.7 for the first three, the fourth and fifth
    at 10.6-11.3, the sixth at most 3.0; the order of the fourth and fifth, 0.4 apart, is not asserted)."""
    doc = next(d for d in score_examples if d.get("response"))
    example = Example(doc["context"], doc["query"], doc["response"], id=doc["id"])
    settings = InfluenceSettings(lambdas=(1.0,), ngram=8, sampling=SamplingSettings(temperature=1.0))
    ranked = {}
    for name, backend in (("served", served), ("local", local)):
        result = InfluenceScorer(backend, "qa", settings).score(example).to_dict()["results"][0]
        ranked[name] = [g["start"] for g in sorted(result["ngrams"], key=lambda g: -g["influence"])]
    assert ranked["served"][:3] == ranked["local"][:3], ranked
    assert set(ranked["served"][:5]) == set(ranked["local"][:5]), ranked


INLINE = "Document: {context}. Question: {query}. Answer:"
"""Issue 28's own template: text before the context, which llama-cpp-python's server refuses."""
PEOPLE = [("Dana", "lisinopril"), ("Emeka", "warfarin"), ("Fatima", "metformin"), ("Goran", "insulin")]
PEOPLE += [("Hana", "aspirin"), ("Ivo", "atorvastatin")]


def test_examples_in_flight_together_score_as_one_by_one_through_the_issues_template(vllm_server, tmp_path):
    """Six examples scored with the inline template ``INLINE`` (``--doc``: two requests an example) at
    ``--concurrency 1`` and ``8`` through a proxy: with 8, more than two requests were in flight at
    once (so several examples' together), never more than 8; the two logs hold the same examples in
    the same order with every log-probability within TOL_REFERENCE (vLLM's float32 rounding moves with
    batch shape, so not byte for byte); every prompt went as token ids and the server reports
    processing exactly the tokens sent."""
    data = tmp_path / "data.jsonl"
    rows = [
        {"id": name.lower(), "context": f"{name} takes {5 * (i + 1)} mg {drug} daily.", "query": "What does she take?",
         "response": f" {drug}"}
        for i, (name, drug) in enumerate(PEOPLE)
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    logs, in_flight = {}, {}
    for c in (1, 8):
        out = tmp_path / f"c{c}.jsonl"
        args = ["score", "--data", str(data), "--template", INLINE, "--doc", "--out", str(out), "--json"]
        with Proxy(vllm_server.url) as proxy:
            res = CliRunner().invoke(
                main, args + _server_args(proxy.url, vllm_server.served_name, "--concurrency", str(c))
            )
            assert res.exit_code == 0, res.output
        assert all(isinstance(p["prompt"], list) for p in proxy.payloads)
        assert reported_is_sent(proxy) == []
        lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        logs[c] = [(line["key"], line["result"]["results"][0]) for line in lines if line.get("type") == "example"]
        in_flight[c] = proxy.max_in_flight
    assert in_flight[1] == 1 and 2 < in_flight[8] <= 8, in_flight
    assert [k for k, _ in logs[8]] == [k for k, _ in logs[1]] == [r["id"] for r in rows]
    for (_, a), (_, b) in zip(logs[1], logs[8]):
        assert a["response_ids"] == b["response_ids"]
        for key in ("token_logprob", "token_logprob_without"):
            assert np.max(np.abs(np.subtract(a[key], b[key]))) <= TOL_REFERENCE, (key, a, b)


# ----- the cost model: what the server reports processing -----------------------------------------
def _usage(exchanges) -> list[tuple[int, int, int]]:
    """(tokens sent, usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens) of each request."""
    return [(len(p["prompt"]), u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"]) for p, u in exchanges]


def test_a_scored_examples_prompt_tokens_are_the_cost_models(local, vllm_server, tmp_path):
    """A λ = 1 score of one example (``qa``, 4-grams), one request at a time: the server reports
    processing exactly the tokens sent, 2 + k requests (with and without the context, one per
    ablation) of (L + |y|) + (L∅ + |y|) + Σ_i (L − n_i + |y|) prompt tokens (an ablation drops its
    n_i tokens), and none of them from its prefix cache: vLLM 0.32 never reads that cache for a
    request that asks for prompt log-probabilities (``SamplingParams.skip_reading_prefix_cache``)."""
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    args = ["score", "--context", str(tmp_path / "note.txt"), "-q", QUERY, "-r", RESPONSE, "--template", "qa"]
    args += ["--ngram", "4", "--json", "--concurrency", "1"]
    with Proxy(vllm_server.url) as proxy:
        res = CliRunner().invoke(main, args + _server_args(proxy.url, vllm_server.served_name))
        assert res.exit_code == 0, res.output
    result = json.loads(res.stdout)["result"]["results"][0]
    encoded = InfluenceScorer(local, "qa", LAMBDA_1).encode(Example(NOTE, QUERY, RESPONSE))
    full, empty, y = len(encoded.with_context), len(encoded.without_context), len(result["response_ids"])
    ngrams = [g["n"] for g in result["ngrams"]]
    usage = _usage(proxy.exchanges[2:])  # after the connection's probe and the alignment check
    assert len(usage) == 2 + len(ngrams)
    assert all(sent == reported and cached == 0 for sent, reported, cached in usage), usage
    assert sum(reported for _, reported, _ in usage) == (full + y) + (empty + y) + sum(full - n + y for n in ngrams)


def test_a_label_distribution_costs_one_request_per_label_and_sampled_completions_hit_the_cache(vllm_server, local):
    """A classification prompt's exact distribution: one request per label of P + |label| tokens,
    none from the cache (prompt log-probabilities again). Sampled completions do read it: the same
    long prompt sampled twice is computed again only past its last whole cache block (128 tokens on
    the CPU)."""
    from ctxlite.audit.oracle import ModelOracle

    labels = [" billing", " account access", " account closure"]
    prompt = "Ticket: I was charged twice\nQueue: billing\n\nTicket: I cannot log in\nQueue:"
    long = local.tokenize(" ".join(f"item {i}," for i in range(100)))
    with Proxy(vllm_server.url) as proxy:
        with OpenAIServer(ServerConfig(proxy.url, vllm_server.served_name, concurrency=1)) as backend:
            ModelOracle(backend, labels).label_distribution(prompt)
            forced = _usage(proxy.exchanges[2:])  # after the probe and the alignment check
            backend.sample_texts([(long, 1), (long, 2)], 1.0, 1)
            sampled = _usage(proxy.exchanges[2 + len(forced) :])
    p = len(local.tokenize(prompt))
    assert sorted(forced) == sorted((p + len(local.tokenize(l)), p + len(local.tokenize(l)), 0) for l in labels)
    assert len(long) > 256 and sampled[0] == (len(long), len(long), 0)
    assert sampled[1] == (len(long), len(long), 128 * ((len(long) - 1) // 128)), sampled
