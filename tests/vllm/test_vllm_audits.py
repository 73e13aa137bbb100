"""Audits through a real vLLM: exact label distributions by teacher forcing (against the reference on
the same weights), answers sampled by the server when it gives no log-probabilities, and the texts
of a generation audit sampled by the server."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from scipy.stats import chisquare

from ctxlite.audit.game import run_audit
from ctxlite.audit.oracle import ModelOracle
from ctxlite.audit.settings import AuditSettings
from ctxlite.cli import main
from ctxlite.runtime.openai_server import ServerConfig, connect
from tests.audit_data import tiny_audit
from tests.servers import Proxy
from tests.vllm.common import TOL_REFERENCE, reported_is_sent

LABELS = [" billing", " account access", " account closure"]
"""Labels of one and two tokens, two sharing their first token."""
QUEUE = "Ticket: I was charged twice\nQueue: billing\n\nTicket: I cannot log in\nQueue:"


def _audit_args(url: str, model: str, data: Path, fmt: Path, out: Path, *more: str) -> list[str]:
    args = ["audit", "--data", str(data), "--format", str(fmt), "--shots", "1", "--reference-runs", "2"]
    args += ["--canary", "semantic", "--utility-queries", "0", "--queries-per-trial", "8"]
    return args + ["--backend", "openai", "--base-url", url, "--model-name", model, "--out", str(out), "--json", *more]


def _logged(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()[1:]]


# ----- exact label distributions ------------------------------------------------------------------
def test_an_exact_label_distribution_equals_the_reference(served, reference_backend):
    """P(label) = Π_t p(label token t | prompt, label tokens < t), teacher-forced on vLLM and on the
    reference: within the per-token tolerance times the longest label's tokens."""
    exact = ModelOracle(served, LABELS).label_distribution(QUEUE)
    expected = ModelOracle(reference_backend, LABELS).label_distribution(QUEUE)
    assert exact.sum() <= 1 + 1e-6 and np.min(exact) > 0
    assert np.max(np.abs(np.log(exact) - np.log(expected))) <= 2 * TOL_REFERENCE, (exact, expected)


def test_a_classification_audit_on_vllm_is_the_audit_on_the_reference(served, reference_backend, tmp_path):
    """The same report-noisy-max audit (two ensembles, ε = 1 and ∞, one seed) on vLLM and on the
    reference: the label distributions agree to the tolerance, so every trial's votes and the
    mechanism's noise draw the same answers: the same counts behind every bound (so the same
    lower bounds), and every number read from the distributions themselves within rounding."""
    data, fmt = tiny_audit(tmp_path)
    records = [json.loads(line) for line in data.read_text().splitlines()]
    settings = AuditSettings(trials=4, shots=1, reference_runs=2, canary="semantic", utility_queries=0)
    settings = replace(settings, queries_per_trial=8, mechanism="rnm", ensembles=2, epsilons=(1.0, math.inf))
    served_rows = run_audit(served, records, settings, fmt=str(fmt)).to_dict()["rows"]
    reference_rows = run_audit(reference_backend, records, settings, fmt=str(fmt)).to_dict()["rows"]
    assert len(served_rows) == 2
    _same_to_rounding(served_rows, reference_rows)
    for got, want in zip(served_rows, reference_rows):
        assert got["lower_bound_counts"] == want["lower_bound_counts"]
        assert got["epsilon_lower_bound"] == want["epsilon_lower_bound"]


def _same_to_rounding(a, b, path="rows") -> None:
    """``a`` and ``b`` have the same structure, the same whole numbers, texts and flags, and floats
    equal to a relative 1e-3 (distributions equal to 2·TOL_REFERENCE move what is computed from
    them by about as much)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _same_to_rounding(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same_to_rounding(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-9), (path, a, b)
    else:
        assert a == b, (path, a, b)


def test_a_classification_audit_runs_on_vllm_from_the_command_line(vllm_server, local, tmp_path):
    """``ctxlite audit --backend openai`` on vLLM: exact distributions (no sampled answers), an exact
    ε for the audited pair, the same log at ``--concurrency 1`` and 4 (each answer is its request's).
    Its cost is the cost model's (docs/servers.md): one teacher-forcing request per label per
    distinct prompt P (two: Z = 0 and 1, whatever the trial count), of P + |label| prompt tokens, each
    reported by the server as sent."""
    data, fmt = tiny_audit(tmp_path)
    labels = {tuple(local.tokenize(f" {label}")) for label in ("good", "bad")}
    logs = {}
    for concurrency in ("1", "4"):
        out = tmp_path / f"c{concurrency}.jsonl"
        args = _audit_args(vllm_server.url, vllm_server.served_name, data, fmt, out, "--trials", "8")
        with Proxy(vllm_server.url, limit=5000) as proxy:
            args[args.index("--base-url") + 1] = proxy.url
            res = CliRunner().invoke(main, args + ["--concurrency", concurrency])
            assert res.exit_code == 0, res.output
        report = json.loads(res.stdout)
        assert not any(n.startswith("answers: sampled") for n in report["notes"]), report["notes"]
        assert report["rows"][0]["epsilon_upper_bound"] is not None, report["rows"][0]
        logs[concurrency] = [{k: v for k, v in l.items() if k != "chain"} for l in _logged(out) if "key" in l]
        # after the connection's probe and its alignment check
        forced = [p["prompt"] for p, _ in proxy.exchanges[2:] if p.get("echo")]
        asked: dict[tuple, list] = {}
        for prompt in forced:
            [label] = [l for l in labels if tuple(prompt[-len(l) :]) == l]
            asked.setdefault(tuple(prompt[: -len(label)]), []).append(label)
        assert len(asked) == 2 and all(sorted(got) == sorted(labels) for got in asked.values()), asked.values()
        assert len(forced) == len(labels) * len(asked) and reported_is_sent(proxy) == []
    assert logs["1"] == logs["4"] and sum(l.get("type") == "trial" for l in logs["1"]) == 8


# ----- a server without log-probabilities: sampled answers ----------------------------------------
def test_sampled_answers_follow_the_exact_distribution(served, vllm_server):
    """Through a proxy that nulls the log-probabilities, each answer is one completion sampled by vLLM
    (its own seed, its filters off): 150 of them agree with the exact distribution read on the same
    server (chi-square), and the same seed gives the same answer again."""
    prompt = "great fun: good\nawful: bad\nloved it: good\nso-so:"
    labels = [" good", " bad"]
    exact = ModelOracle(served, labels).label_distribution(prompt)
    assert np.sort(exact)[-2] > 0.1, exact  # no outcome near certain: a broken sampler shows
    with Proxy(vllm_server.url, no_logprobs=True, limit=2000) as proxy:
        with connect(ServerConfig(proxy.url, vllm_server.served_name, concurrency=4)) as backend:
            assert not backend.prompt_logprobs
            oracle = ModelOracle(backend, labels)
            counts = oracle.sample_answers(prompt, 150, np.random.default_rng(5))
            again = oracle.sample_answers(prompt, 150, np.random.default_rng(5))
    assert counts.sum() == 150 and np.array_equal(counts, again)  # vLLM's seeded sampling repeats
    assert reported_is_sent(proxy) == []
    observed, expected = counts.astype(float), exact * 150
    small, top = expected < 5, int(np.argmax(expected))  # unlikely outcomes join the likeliest
    observed[top] += observed[small].sum()
    expected[top] += expected[small].sum()
    assert chisquare(observed[~small], expected[~small]).pvalue > 1e-3, (counts, exact)
    sampled = [p for p in proxy.payloads if not p.get("echo")]
    assert len(sampled) == 300 and len({p["seed"] for p in sampled}) == 150
    assert all(p["top_k"] == -1 and p["min_p"] == 0.0 and p["repetition_penalty"] == 1.0 for p in sampled)


def test_a_classification_audit_on_vllm_without_logprobs_samples_its_answers(vllm_server, tmp_path):
    """The tiny audit through the proxy that nulls log-probabilities: one sampled completion per
    answer, said on stderr and in the notes, no exact ε (and why)."""
    data, fmt = tiny_audit(tmp_path)
    out = tmp_path / "sampled.jsonl"
    with Proxy(vllm_server.url, no_logprobs=True, limit=2000) as proxy:
        res = CliRunner().invoke(main, _audit_args(proxy.url, vllm_server.served_name, data, fmt, out, "--trials", "4"))
        assert res.exit_code == 0, res.output
    assert "ctxlite: note: answers: sampled by the server" in res.stderr
    row = json.loads(res.stdout)["rows"][0]
    assert row["epsilon_upper_bound"] is None and "not known" in row["reasons"]["epsilon_upper_bound"], row
    trials = [t for t in _logged(out) if t.get("type") == "trial"]
    assert len(trials) == 4 and all(float(8 * v).is_integer() for t in trials for v in t["signal"])
    assert len([p for p in proxy.payloads if not p.get("echo")]) >= 4 * 8
    assert reported_is_sent(proxy) == []


# ----- generation audits: texts sampled by the server ---------------------------------------------
def test_greedy_texts_are_the_references_greedy_continuations(served, local, reference):
    """At temperature 0 vLLM's completion is the argmax path of the same weights: the reference's
    greedy tokens, decoded (where every argmax leads by far more than the two differ: 1e-3 logits)."""
    for prompt in ("One, two, three, four,", "Monday, Tuesday, Wednesday,", "The capital of France is"):
        tokens = local.tokenize(prompt)
        path, margins = reference.greedy(tokens, 5)
        assert min(margins) > 1e-3, (prompt, margins)
        [text] = served.sample_texts([(tokens, 0)], 0.0, 5)
        assert text == local.detokenize(path), (prompt, text)


def test_a_generation_audit_runs_on_vllm_with_its_sampled_texts(vllm_server, tmp_path):
    """``audit --task generate`` on vLLM: every text is one completion with the audit's temperature
    and token budget, a seed of its own and vLLM's own filters off (top-k -1, min-p 0, no repetition
    penalty), embedded locally; the report says the server sampled them."""
    out = tmp_path / "gen.jsonl"
    args = ["audit", "--data", "ctxlite/data/dialogue_sample.jsonl", "--task", "generate", "--shots", "1"]
    args += ["--trials", "4", "--queries-per-trial", "2", "--reference-runs", "1", "--max-new-tokens", "6"]
    args += ["--utility-queries", "0", "--out", str(out), "--json", "--backend", "openai"]
    with Proxy(vllm_server.url, limit=2000) as proxy:
        res = CliRunner().invoke(main, args + ["--base-url", proxy.url, "--model-name", vllm_server.served_name])
        assert res.exit_code == 0, res.output
    sampled = [p for p in proxy.payloads if not p.get("echo")]
    assert len(sampled) >= 4 * 2 and len({(json.dumps(p["prompt"]), p["seed"]) for p in sampled}) == len(sampled)
    assert reported_is_sent(proxy) == []
    for p in sampled:
        assert p["temperature"] == AuditSettings().temperature and p["max_tokens"] == 6 and p["top_p"] == 1.0
        assert p["top_k"] == -1 and p["min_p"] == 0.0 and p["repetition_penalty"] == 1.0 and p["n"] == 1
    assert len([t for t in _logged(out) if t.get("type") == "trial"]) == 4
    report = json.loads(res.stdout)
    assert any(n.startswith("texts: sampled by the server") for n in report["notes"]), report["notes"]
