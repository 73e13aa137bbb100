"""``--backend openai`` against a real OpenAI-compatible server: llama-cpp-python's own
(``python -m llama_cpp.server``, its ``server`` extra) serving the default model on loopback,
started once per session (a second one for the kill-and-resume test), torn down after.

The failure cases go through a tiny loopback proxy in front of the real server (``Proxy``) that
answers completions with 429s, slowly, or with malformed JSON, and counts what it forwards.

Cost: llama-cpp-python's server sorts the whole 262,144-token vocabulary in Python for every
echoed prompt token (~0.3 s a token here), so every input is a few dozen tokens.
"""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.errors import InvalidParameter, ServerError
from ctxlite.runtime.openai_server import NoPromptLogprobs, OpenAIServer, ServedModel, ServerConfig, connect
from ctxlite.runtime.server_dialects import LlamaCppPython
from tests.audit_data import tiny_audit
from tests.backends import Restricted
from tests.servers import MODEL_NAME, LlamaServer, LoopbackHTTP, Proxy

pytestmark = pytest.mark.model

SECRET = "sk-ctxlite-test-0123456789abcdef"
TOL_LOGPROB = 1e-2
"""Per-token |Δ log p| allowed between the server and the local engine on the same tokens. Both run the
same llama.cpp on the same GGUF and differ only by rounding with batch shape and cache layout (the
server's one-sequence cache of 512 cells against the engine's unified multi-sequence one, and the
server re-decoding the last token of a prompt whose prefix it cached in a batch of its own):
measured ≤ 2.4e-7 nats on most tokens, and at most 5.1e-3 (the note's prompt), on the portable
build ``make`` installs and on an AVX2-native build alike (an AVX-512 build measured 2.3e-3). The
tolerance is twice the largest measured spread; an error of the kind the tests look for (a result
mapped to another ablation or token, a scaled log-probability) moves values by far more (see
``_distinct_ablations``)."""

NOTE = "Dana takes 10 mg lisinopril."
QUERY = "What?"
RESPONSE = "lisinopril"
TEMPLATE = "{context} Q: {query} A:"
"""A template whose every ablated sequence is the tokenization of its own text: llama-cpp-python's server
takes text prompts only, so the backend refuses a sequence that is not (the built-in ``qa`` template's
``Document: `` + context boundary is one; vLLM and llama.cpp's server take token ids). (A shorter one,
``{context} {query}`` with ``Drug:``, put one ablation 0.19 nat from the local engine's once: the
server's rounding depends on what its one-sequence cache held, and ``TOL_LOGPROB`` was measured on
these prompts.)"""


@pytest.fixture(scope="session")
def remote(llama_server):
    with OpenAIServer(ServerConfig(llama_server.url, MODEL_NAME, concurrency=2)) as backend:
        yield backend


def _args(url: str, *more: str) -> list[str]:
    return ["--backend", "openai", "--base-url", url, "--model-name", MODEL_NAME, *more]


def _score_args(url: str, out: Path, *more: str) -> list[str]:
    base = ["score", "--context", str(out.parent / "note.txt"), "-q", QUERY, "-r", RESPONSE, "--template", TEMPLATE]
    return [*base, "--ngram", "4"] + _args(url, "-T", "1", "--out", str(out), "--json", *more)


# ----- the same numbers as the local engine -------------------------------------------------------
def test_the_servers_tokens_are_the_local_engines(remote, engine):
    for text in (NOTE, " lisinopril", "Über 10 µg, naïve café ☕.", "Question: x\nAnswer:"):
        assert remote.tokenize(text) == engine.tokenize(text), text
        assert remote.tokenize(text, add_bos=True) == engine.tokenize(text, add_bos=True), text
        toks = engine.tokenize(text)
        assert remote.char_spans(toks) == engine.char_spans(toks), text
        assert remote.char_cover(toks) == engine.char_cover(toks), text
        assert remote.detokenize(toks) == engine.detokenize(toks), text
    assert remote.bos_id == engine.bos_id
    assert remote.describe()["tokenizer"] == "llama-cpp-python"


def test_teacher_forced_logprobs_match_the_local_engine(remote, engine):
    toks = engine.tokenize(NOTE + " She takes lisinopril.", add_bos=True)
    local, served = engine.logprobs(toks, 2), remote.logprobs(toks, 2)
    assert served.shape == local.shape
    assert np.max(np.abs(served - local)) <= TOL_LOGPROB, np.max(np.abs(served - local))


def test_llama_cpp_pythons_own_echo_is_shifted_by_one_and_the_dialect_is_not(remote, engine, instruct):
    """llama-cpp-python's own ``create_completion(echo=True, logprobs=1)`` scores token j with the
    logits row *after* token j: on a model that adds no BOS (SmolLM2) every prompt entry j ≥ 1 is
    log softmax(row after token j)[token j], not log p(token j | tokens before it). With a BOS
    (Gemma) it leaves the BOS out of its echo, which puts each entry back beside its token (and loses
    the first token's value). The dialect sends BOS-led prompts only (refusing others) and reads entry
    j as token j + 1: its values are the local engine's, far from the shifted pairing."""
    import llama_cpp
    from scipy.special import log_softmax

    text = "Dana takes 10 mg lisinopril daily."
    toks = instruct.tokenize(text)
    assert instruct.bos_id is None and toks[0] != engine.bos_id
    llm = llama_cpp.Llama(str(instruct.model_path), n_ctx=128, logits_all=True, verbose=False, n_threads=1)
    try:
        answer = llm.create_completion(text, max_tokens=1, echo=True, logprobs=1, temperature=0)
    finally:
        llm.close()
    upstream = np.asarray(answer["choices"][0]["logprobs"]["token_logprobs"][1 : len(toks)], dtype=float)

    def shifted(eng, tokens):  # entry j: the row after token j, read at token j
        return np.array(
            [log_softmax(eng.next_logits(tokens[: j + 1], exact=True))[tokens[j]] for j in range(1, len(tokens))]
        )

    assert np.max(np.abs(upstream - shifted(instruct, toks))) <= TOL_LOGPROB
    assert np.max(np.abs(upstream - instruct.logprobs(toks, 1))) > 1.0

    led = engine.tokenize(text, add_bos=True)
    served = remote.logprobs(led, 2)  # the first token after BOS has no value there
    assert np.max(np.abs(served - engine.logprobs(led, 2))) <= TOL_LOGPROB
    assert np.max(np.abs(served - shifted(engine, led)[1:])) > 1.0


def test_an_exact_label_distribution_matches_the_local_engine(remote, engine):
    """Labels of one and two tokens, two sharing their first token: the teacher-forced distribution
    (server) against the full-row one (engine)."""
    from ctxlite.audit.oracle import ModelOracle

    labels = [" billing", " account access", " account closure"]
    prompt = "Queue: account access\nQueue:"
    local = ModelOracle(engine, labels).label_distribution(prompt)
    served = ModelOracle(remote, labels).label_distribution(prompt)
    assert local.sum() == pytest.approx(1) and local.min() > 0
    assert np.max(np.abs(np.log(served) - np.log(local))) <= 3 * TOL_LOGPROB, (served, local)


def test_the_teacher_forced_label_distribution_is_the_row_one(engine):
    """The oracle's path for a backend without logit rows, on the local engine (no server): the same
    distribution as the full-row path, with labels of several tokens that share prefixes."""
    from ctxlite.audit.oracle import ModelOracle

    labels = [" account", " account access", " account closure", " billing", " technical issue"]
    for prompt in ("Queue: account access\nQueue:", "Ticket: refund me\nQueue: billing\n\nTicket: crash\nQueue:"):
        rows = ModelOracle(engine, labels).label_distribution(prompt)
        forced = ModelOracle(Restricted(engine), labels).label_distribution(prompt)  # no rows to use
        assert np.max(np.abs(forced - rows)) <= 1e-5, (forced, rows)
        assert rows[1] > 0 and rows[0] > 0


# ----- what a server cannot do is refused by name ------------------------------------------------
def test_what_needs_logit_rows_is_refused(remote):
    from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings

    with pytest.raises(InvalidParameter, match="full next-token logit rows.*openai"):
        InfluenceScorer(remote, "qa", InfluenceSettings(lambdas=(0.5, 1.0)))
    with pytest.raises(InvalidParameter, match="temperature 0.8.*-T/--temperature 1"):
        InfluenceScorer(remote, "qa", InfluenceSettings()).score(Example(NOTE, QUERY, RESPONSE))
    with pytest.raises(InvalidParameter, match="generating a response needs"):
        InfluenceScorer(remote, "qa", InfluenceSettings()).score(Example(NOTE, QUERY))


# ----- the CLI, end to end ------------------------------------------------------------------------
def test_a_lambda_1_score_on_the_server_matches_local_with_requests_in_flight_together(
    llama_server, engine, tmp_path, monkeypatch
):
    """``ctxlite score --backend openai --concurrency 3`` end to end, with an API key in the environment,
    through a proxy that holds every other completion so that requests end out of order: an example's
    ablations (and its with/without-context pair) were in flight together -- at the proxy, and by the
    backend's own count -- and every result is still mapped to its own ablation: the λ = 1 result equals
    the local engine's within the tolerance. The key reached the server but not the log or the output,
    and the log is refused to a local run. (``--concurrency 1`` going one request at a time is
    tests/server/test_concurrency.py's.)"""
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    monkeypatch.setenv("CTXLITE_API_KEY", SECRET)
    out = tmp_path / "run.jsonl"
    backends, init = [], ServedModel.__init__

    def kept(self, *a, **kw):
        init(self, *a, **kw)
        backends.append(self)

    monkeypatch.setattr(ServedModel, "__init__", kept)
    with Proxy(llama_server.url, stagger=0.5) as proxy:
        res = CliRunner().invoke(main, _score_args(proxy.url, out, "--concurrency", "3"))
        assert res.exit_code == 0, res.output
        assert f"Bearer {SECRET}" in proxy.auth  # the key was sent
    stats = [b.request_stats() for b in backends]
    assert proxy.max_in_flight > 1 and max(s.max_in_flight for s in stats) > 1, stats
    header = json.loads(out.read_text().splitlines()[0])
    assert header["identity"]["server"]["base_url"] == proxy.url
    assert header["identity"]["server"]["model_name"] == MODEL_NAME
    assert SECRET not in out.read_text() and SECRET not in res.output
    local = _score_served(engine)
    _distinct_ablations(local)
    _equal_to_the_local_engines(json.loads(res.stdout)["result"]["results"][0], local)

    # the same log is never reused by a local run (another identity: exit 4)
    local_args = [a for a in _score_args("x", out) if a not in _args("x")]
    res = CliRunner().invoke(main, local_args)
    assert res.exit_code == 4 and "server" in res.output, res.output


def _audit_args(url, data, fmt, out, *more, queries: int = 8) -> list[str]:
    base = ["audit", "--data", str(data), "--format", str(fmt), "--shots", "1", "--reference-runs", "2"]
    return [*base, "--canary", "semantic"] + _args(
        url, "--utility-queries", "0", "--queries-per-trial", str(queries), "--out", str(out), "--json", *more
    )


def test_a_classification_audit_on_the_server_equals_the_local_one(llama_server, tmp_path):
    """The same audit (same seed) on the server and locally: the label distributions agree to ~1e-6,
    so every trial and reference run draws the same answers (equal signals, not just equal in
    distribution). A fixed private set has two prompts (Z = 0, 1): four teacher-forced requests."""
    data, fmt = tiny_audit(tmp_path)
    runs = {}
    for name, url in (("served", llama_server.url), ("local", None)):
        out = tmp_path / f"{name}.jsonl"
        args = _audit_args(url or "x", data, fmt, out, "--trials", "8", queries=4)
        res = CliRunner().invoke(main, args if url else [a for a in args if a not in _args("x")])
        assert res.exit_code == 0, res.output
        runs[name] = {l["key"]: l for l in map(json.loads, out.read_text().splitlines()[1:]) if "key" in l}
    served, local = runs["served"], runs["local"]
    assert set(served) == set(local) and sum(k.startswith("eps=inf/trial=") for k in served) == 8
    assert all(local[k]["z"] == served[k]["z"] and local[k]["signal"] == served[k]["signal"] for k in local)


def test_a_report_noisy_max_audit_on_the_server_equals_the_local_one(llama_server, tmp_path):
    """Report-noisy-max over two ensembles at ε = 1 and ∞, on the server and locally with one seed:
    each ensemble's vote is drawn from its label distribution, which the server gives to ~1e-6, so
    every trial's signal is the local one (the mechanism's noise included)."""
    data, fmt = tiny_audit(tmp_path)
    runs = {}
    for name, url in (("served", llama_server.url), ("local", None)):
        out = tmp_path / f"rnm-{name}.jsonl"
        args = _audit_args(url or "x", data, fmt, out, "--trials", "4", "--mechanism", "rnm", queries=2)
        args += ["--ensembles", "2", "--epsilon", "1,inf"]
        res = CliRunner().invoke(main, args if url else [a for a in args if a not in _args("x")])
        assert res.exit_code == 0, res.output
        runs[name] = {l["key"]: l for l in map(json.loads, out.read_text().splitlines()[1:]) if "key" in l}
    served, local = runs["served"], runs["local"]
    assert set(served) == set(local) and sum("/trial=" in k for k in served) == 8
    assert all(local[k]["z"] == served[k]["z"] and local[k]["signal"] == served[k]["signal"] for k in local)


def test_a_server_killed_mid_run_loses_nothing_and_a_rerun_completes(tmp_path, monkeypatch):
    """Two examples scored on a server that is killed once the first is done: exit 9 with the first
    in the log; after a restart on the same port the same command reuses it and scores the second.

    (On score rather than an audit: a fixed-set classification audit reads all its label distributions
    before its first record, and a --resample-data one costs ~30 s a trial on this server.)"""
    examples = [{"id": "a", "context": NOTE, "query": QUERY, "response": RESPONSE}]
    examples.append({"id": "b", "context": "Lee takes insulin.", "query": QUERY, "response": "insulin"})
    data = tmp_path / "two.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in examples), encoding="utf-8")
    server = LlamaServer(tmp_path).start()
    out = tmp_path / "scores.jsonl"
    args = ["score", "--data", str(data), "--doc", "--template", TEMPLATE]
    # one request at a time: "the third call" is then example b's first (with examples in flight
    # together it could be a's; tests/server/test_concurrency.py kills a server under --concurrency 8)
    args += _args(server.url, "-T", "1", "--out", str(out), "--json", "--retries", "1", "--concurrency", "1")
    real, calls = OpenAIServer.logprobs, []

    def killing(self, *a, **kw):
        calls.append(1)
        if len(calls) == 3:  # after example a's two passes (with and without its context; the probe is no call)
            server.stop()
        return real(self, *a, **kw)

    try:
        monkeypatch.setattr(OpenAIServer, "logprobs", killing)
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 9, res.output
        assert "stopped sending requests" in res.output and "--resume" in res.output
        lines = [json.loads(l) for l in out.read_text().splitlines()]
        assert [l["key"] for l in lines[1:]] == ["a"]
        monkeypatch.setattr(OpenAIServer, "logprobs", real)
        server.start()
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, res.output
    finally:
        server.stop()
    report = json.loads(res.stdout)
    assert report["reused"] == ["a"] and report["scored"] == ["b"]
    lines = [json.loads(l) for l in out.read_text().splitlines()]
    assert [l.get("key") for l in lines[1:-1]] == ["a", "b"] and "end" in lines[-1]


# ----- concurrent requests and their progress ------------------------------------------------------
def _score_served(backend) -> dict:
    """λ = 1, T = 1 scores of the note's 4-grams (``TEMPLATE``) on ``backend``."""
    from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings
    from ctxlite.runtime.sampling import SamplingSettings

    settings = InfluenceSettings(lambdas=(1.0,), ngram=4, sampling=SamplingSettings(temperature=1.0))
    return InfluenceScorer(backend, TEMPLATE, settings).score(Example(NOTE, QUERY, RESPONSE)).to_dict()["results"][0]


def _distinct_ablations(result: dict) -> None:
    """Every two n-grams' per-token influences differ by far more than rounding: a result taken for
    the wrong ablation cannot go unseen."""
    rows = [np.asarray(g["per_token"]) for g in result["ngrams"]]
    assert len(rows) >= 3
    assert min(np.max(np.abs(a - b)) for i, a in enumerate(rows) for b in rows[i + 1 :]) > 10 * TOL_LOGPROB


def _equal_to_the_local_engines(served: dict, local: dict) -> None:
    """A served λ = 1 result is the local engine's on the same tokens: per-token log-probabilities within
    ``TOL_LOGPROB``, sums over the response within that per token, the same n-grams."""
    assert served["response_ids"] == local["response_ids"]
    for key in ("token_logprob", "token_logprob_without"):
        assert np.max(np.abs(np.subtract(served[key], local[key]))) <= TOL_LOGPROB, key
    n = len(served["response_ids"])
    assert abs(served["document_influence"] - local["document_influence"]) <= 2 * TOL_LOGPROB * n
    assert [g["start"] for g in served["ngrams"]] == [g["start"] for g in local["ngrams"]]
    for a, b in zip(served["ngrams"], local["ngrams"]):
        assert abs(a["influence"] - b["influence"]) <= 2 * TOL_LOGPROB * n, (a, b)
        assert np.max(np.abs(np.subtract(a["per_token"], b["per_token"]))) <= 2 * TOL_LOGPROB, (a, b)


def test_the_progress_line_shows_the_servers_requests_on_a_terminal(llama_server, tmp_path):
    """``--backend openai`` on a terminal: the line shows requests in flight and the observed request
    and prompt-token rates (that a pipe gets no line at all, whatever the backend, is
    tests/model/test_progress.py's)."""
    from tests.model.test_progress import _run

    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    args = ["score", "--context", str(tmp_path / "note.txt"), "-q", QUERY, "-r", RESPONSE, "--template", TEMPLATE]
    args += ["--doc", *_args(llama_server.url, "-T", "1")]
    code, err = _run(args, tty=True)
    assert code == 0, err
    assert re.search(r"\| requests \d in flight [0-9.e+-]+/s [0-9.e+-]+ prompt tok/s", err), err


# ----- generation audits: the server samples the texts --------------------------------------------
DIALOGUE = "Anna: Are you coming tonight?\nTom: Yes, but I'll be late, the bus is stuck.\nSummary:"


def test_served_texts_are_the_local_greedy_texts_at_temperature_0(remote, engine):
    """At T = 0 both samplers are greedy: on prompts whose greedy path leads every runner-up by more
    than a logit (llama.cpp rounds a row by up to about one logit with its decode history, see
    docs/design.md), the server's completions, cut as the local walks are, are the local texts."""
    from ctxlite.audit.oracle import ModelOracle

    prompts, n = ["One, two, three, four,", "Monday, Tuesday, Wednesday,"], 5
    for p in prompts:  # the precondition, on fresh decodes
        path = engine.tokenize(p, add_bos=True)
        for _ in range(n):
            row = np.sort(engine.next_logits(path, exact=True))
            assert row[-1] - row[-2] > 1.0, p
            path.append(int(np.argmax(engine.next_logits(path, exact=True))))
    texts = {}
    for name, backend in (("served", remote), ("local", engine)):
        oracle = ModelOracle(backend, temperature=0.0, max_new_tokens=n)
        texts[name] = oracle.sample_texts(prompts, np.random.default_rng(0), stop="\n")
    assert texts["served"] == texts["local"] == ["five, six, seven", "Thursday, Friday, Saturday"], texts


def test_a_generation_audit_runs_on_the_server_with_its_sampled_texts(llama_server, tmp_path):
    """``audit --task generate`` end to end on the server: every text is one sampled completion with
    the audit's temperature and token budget, a seed of its own and the server's own filters off; the
    texts are embedded locally; the report says the server sampled them."""
    from ctxlite.audit.settings import AuditSettings

    out = tmp_path / "gen.jsonl"
    args = ["audit", "--data", "ctxlite/data/dialogue_sample.jsonl", "--task", "generate", "--shots", "1"]
    args += ["--trials", "4", "--queries-per-trial", "2", "--reference-runs", "1", "--max-new-tokens", "6"]
    with Proxy(llama_server.url, limit=2000) as proxy:
        res = CliRunner().invoke(main, args + _args(proxy.url, "--utility-queries", "0", "--out", str(out), "--json"))
        assert res.exit_code == 0, res.output
    sampled = [p for p in proxy.payloads if not p.get("echo")]
    trials = [json.loads(line) for line in out.read_text().splitlines()[1:] if '"trial"' in line]
    assert len([t for t in trials if t.get("type") == "trial"]) == 4
    assert len(sampled) >= 4 * 2  # one completion per text: the trials' two queries each (and the references')
    for p in sampled:
        assert p["temperature"] == AuditSettings().temperature and p["max_tokens"] == 6 and p["top_p"] == 1.0
        assert p["top_k"] == 0 and p["min_p"] == 0.0 and p["repeat_penalty"] == 1.0 and p["n"] == 1
    # a seed of its own per text (a paired reference run asks both of its prompts with the same seeds)
    assert len({(json.dumps(p["prompt"]), p["seed"]) for p in sampled}) == len(sampled)
    report = json.loads(res.stdout)
    assert any(n.startswith("texts: sampled by the server") for n in report["notes"]), report["notes"]


def test_an_embedding_space_aggregation_audit_runs_on_the_server(llama_server, tmp_path):
    """ESA over two ensembles at ε = 8 on the server: every candidate and ensemble text is one sampled
    completion (the server's filters off), embedded locally and aggregated; the ε row is reported and
    the notes say the server sampled the texts."""
    out = tmp_path / "esa.jsonl"
    args = ["audit", "--data", "ctxlite/data/dialogue_sample.jsonl", "--task", "generate", "--mechanism", "esa"]
    args += ["--ensembles", "2", "--epsilon", "8", "--trials", "4", "--queries-per-trial", "1"]
    args += ["--reference-runs", "1", "--max-new-tokens", "6", "--shots", "1"]  # short prompts: 22 s, not 31
    with Proxy(llama_server.url, limit=4000) as proxy:
        res = CliRunner().invoke(main, args + _args(proxy.url, "--utility-queries", "0", "--out", str(out), "--json"))
        assert res.exit_code == 0, res.output
    sampled = [p for p in proxy.payloads if not p.get("echo")]
    assert len(sampled) >= 4 * 1 * 2  # at least the ensembles' texts: trials × queries × m
    assert all(p["top_k"] == 0 and p["min_p"] == 0.0 and p["repeat_penalty"] == 1.0 for p in sampled)
    trials = [json.loads(line) for line in out.read_text().splitlines()[1:] if '"trial"' in line]
    assert len([t for t in trials if t.get("type") == "trial"]) == 4
    report = json.loads(res.stdout)
    assert [row["epsilon"] for row in report["rows"]] == [8.0], report["rows"]
    assert any(n.startswith("texts: sampled by the server") for n in report["notes"]), report["notes"]


# ----- a server without log-probabilities: scoring refused, answers sampled ------------------------
def test_scoring_on_a_server_without_logprobs_is_refused_by_name(llama_server, tmp_path):
    """Completions without ``logprobs`` (the proxy sets them null): ``score`` is refused in one line
    naming the missing capability (exit 2) after the connection probe, before a log is written."""
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    with Proxy(llama_server.url, no_logprobs=True) as proxy:
        res = CliRunner().invoke(main, _score_args(proxy.url, tmp_path / "s.jsonl"))
        assert proxy.completions == 2  # the probes: as an OpenAIServer (refused), then as a ServedModel
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and "scoring needs log-probabilities of given tokens" in res.output
    assert not (tmp_path / "s.jsonl").exists()


def test_sampled_answers_follow_the_exact_distribution(llama_server, engine):
    """On a server without log-probabilities each answer is one sampled completion: 150 of them agree
    with the exact distribution (chi-square), read on the local engine (the server's teacher-forced
    one equals it within rounding: ``test_an_exact_label_distribution_matches_the_local_engine``;
    reading it here again cost 18 s of echoed tokens)."""
    from scipy.stats import chisquare

    from ctxlite.audit.oracle import ModelOracle

    labels, prompt = [" good", " bad"], "great fun: good\nawful: bad\nloved it: good\nso-so:"
    exact = ModelOracle(engine, labels).label_distribution(prompt)
    assert np.sort(exact)[-2] > 0.1, exact  # no outcome near certain: a broken sampler shows
    with Proxy(llama_server.url, no_logprobs=True, limit=2000) as proxy:
        with pytest.raises(NoPromptLogprobs, match="returns no log-probabilities for completions"):
            OpenAIServer(ServerConfig(proxy.url, MODEL_NAME))
        with connect(ServerConfig(proxy.url, MODEL_NAME, concurrency=4)) as backend:
            assert type(backend) is ServedModel and not backend.prompt_logprobs
            oracle = ModelOracle(backend, labels)
            counts = oracle.sample_answers(prompt, 150, np.random.default_rng(5))
            assert oracle.served_completions == 150
    assert counts.sum() == 150
    observed, expected = counts.astype(float), exact * 150
    small, top = expected < 5, int(np.argmax(expected))  # unlikely outcomes join the likeliest
    observed[top] += observed[small].sum()
    expected[top] += expected[small].sum()
    observed, expected = observed[~small], expected[~small]
    assert chisquare(observed, expected).pvalue > 1e-3, (counts, exact)
    sampled = [p for p in proxy.payloads if not p.get("echo")]
    assert len(sampled) == 150 and len({p["seed"] for p in sampled}) == 150
    assert all(p["max_tokens"] == 1 and p["temperature"] == 1.0 for p in sampled)


def test_a_classification_audit_on_a_server_without_logprobs_samples_its_answers(llama_server, tmp_path):
    """The tiny audit through a proxy that strips log-probabilities: it runs on sampled answers, one
    completion per answer, says so on stderr and in the report's notes, computes no pair's ε (and says
    why), and its log is refused to the same audit on a server that reads distributions exactly."""
    data, fmt = tiny_audit(tmp_path)
    out = tmp_path / "a.jsonl"
    args = _audit_args("URL", data, fmt, out, "--trials", "4")
    with Proxy(llama_server.url, no_logprobs=True, limit=2000) as proxy:
        res = CliRunner().invoke(main, [proxy.url if a == "URL" else a for a in args])
        assert res.exit_code == 0, res.output
    sampled = [p for p in proxy.payloads if not p.get("echo")]
    assert len(sampled) >= 4 * 8 and len(sampled) % 8 == 0  # 8 answers a trial (and a reference run)
    assert "ctxlite: note: answers: sampled by the server" in res.stderr
    report = json.loads(res.stdout)
    assert any(n.startswith("answers: sampled by the server") for n in report["notes"]), report["notes"]
    row = report["rows"][0]
    assert row["epsilon_upper_bound"] is None and "not known" in row["reasons"]["epsilon_upper_bound"], row
    trials = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    trials = [t for t in trials if t.get("type") == "trial"]
    assert len(trials) == 4 and all(abs(sum(t["signal"]) - 1) < 1e-9 for t in trials)
    assert all(float(8 * v).is_integer() for t in trials for v in t["signal"])
    res = CliRunner().invoke(main, [llama_server.url if a == "URL" else a for a in args] + ["--resume"])
    assert res.exit_code == 4 and "prompt_logprobs" in res.output, res.output


# ----- failures: retried, timed out, malformed, breaker ------------------------------------------
def test_429_then_success_is_retried(llama_server, engine):
    with Proxy(llama_server.url, fail=2) as proxy:
        with OpenAIServer(ServerConfig(proxy.url, MODEL_NAME, backoff=0.01)) as backend:
            toks = engine.tokenize("Hi there.", add_bos=True)
            assert backend.logprobs(toks, 2).shape == (len(toks) - 2,)
            # the probe met the 429s; then the alignment check (one more) and the request
            assert backend.describe()["retried"] == 2 and proxy.completions == 5


def test_a_slow_server_times_out_with_exit_9(llama_server, tmp_path):
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    with Proxy(llama_server.url, delay=3.0) as proxy:
        with pytest.raises(ServerError, match=r"no answer within 0.5 s"):
            OpenAIServer(ServerConfig(proxy.url, MODEL_NAME, timeout=0.5, retries=1, backoff=0.01))
        res = CliRunner().invoke(
            main, _score_args(proxy.url, tmp_path / "s.jsonl", "--request-timeout", "0.5", "--retries", "0")
        )
        assert res.exit_code == 9, res.output
        assert res.output.count("\n") == 1 and "no answer within 0.5 s" in res.output


def test_malformed_json_is_a_clear_error(llama_server, tmp_path):
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    with Proxy(llama_server.url, garbage=True) as proxy:
        res = CliRunner().invoke(main, _score_args(proxy.url, tmp_path / "s.jsonl"))
        assert res.exit_code == 9, res.output
        assert "malformed JSON" in res.output and res.output.count("\n") == 1


def test_the_breaker_stops_requests_after_a_request_exhausts_its_retries(llama_server, engine):
    with Proxy(llama_server.url) as proxy:
        backend = OpenAIServer(ServerConfig(proxy.url, MODEL_NAME, retries=2, backoff=0.01))
        toks = engine.tokenize("Hi there.", add_bos=True)
        proxy.fail = proxy.completions + 100  # every completion from now on is a 429
        with pytest.raises(ServerError, match="failed 3 attempt"):
            backend.logprobs(toks, 2)
        seen = proxy.seen
        with pytest.raises(ServerError, match="failed 3 attempt"):
            backend.logprobs(toks, 2)
        assert proxy.seen == seen  # the second call sent nothing
        backend.close()


def test_a_server_without_a_tokenizer_is_refused():
    """A server that answers 404 everywhere has no tokenize endpoint: refused, not guessed."""

    class NotFound(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        do_GET = do_POST

    server = LoopbackHTTP()
    server.serve(NotFound)
    with server, pytest.raises(InvalidParameter, match="no tokenize endpoint"):
        OpenAIServer(ServerConfig(server.url, "m"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--base-url", "http://127.0.0.1:1/v1"], "--base-url: no effect without --backend openai"),
        (["--backend", "openai", "--model-name", "m"], "needs --base-url and --model-name"),
        (["--backend", "openai", "--base-url", "http://127.0.0.1:1/v1", "--model-name", "m", "-c", "512"], "-n-ctx"),
    ],
)
def test_server_options_without_effect_are_usage_errors(tmp_path, args, message):
    (tmp_path / "note.txt").write_text(NOTE, encoding="utf-8")
    res = CliRunner().invoke(
        main, ["score", "--context", str(tmp_path / "note.txt"), "-q", QUERY, "-r", RESPONSE, *args]
    )
    assert res.exit_code == 2 and message in res.output, res.output


def test_a_bos_less_prompt_is_refused_without_recommending_a_server_that_cannot_score(monkeypatch):
    """llama.cpp's llama-server answers echo + logprobs with "Only no echo is supported": it cannot
    teacher-force, so no message may send a user there to score."""

    def probe(self):
        self.dialect, self.prompt_logprobs, self.n_ctx = LlamaCppPython(self.config, self._http, 2), True, None

    monkeypatch.setattr(OpenAIServer, "_probe", probe)
    server = OpenAIServer(ServerConfig("http://127.0.0.1:9/v1", "m"))
    try:
        with pytest.raises(InvalidParameter, match="use vLLM") as err:
            server.logprobs([5, 6, 7], 1)  # no BOS first: llama-cpp-python's echo would be misaligned
    finally:
        server.close()
    assert not re.search(r"use [^()]*llama\.cpp", str(err.value)) and "cannot score" in str(err.value)
    backend_help = CliRunner().invoke(main, ["score", "--help"]).output
    assert "llama-serverreturnsnopromptlog-probabilities" in "".join(backend_help.split())  # wrapped anywhere
