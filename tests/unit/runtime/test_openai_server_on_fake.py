"""The OpenAI-compatible server backend (ctxlite/runtime/openai_server.py) against the fake server of
``tests/fake_server.py`` (loopback, no model) in each dialect: a plausible lie -- every value finite
and ≤ 0, the right count, the tokens as sent, but each value beside the wrong token -- is refused
(exit 9), not scored; an honest server is read exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.errors import ServerError
from ctxlite.runtime.openai_server import OpenAIServer, ServerConfig, check_logprobs, connect
from tests.fake_server import DIALECTS, MODEL, FakeServer, encode, logprob

TEMPLATE = "{context} Q: {query} A:"
CLASSIFY = "ctxlite/data/classify_sample.jsonl"
LIES = {  # the lies of each dialect this module shows refused, and by which check
    "vllm": ("shifted", "row_after", "shifted_null"),
    "llama.cpp": ("shifted", "row_after", "shifted_null"),
    "llama-cpp-python": ("shifted", "row_after"),
}
CASES = [(d, lie) for d in DIALECTS for lie in LIES[d]]


def _connect(url: str) -> OpenAIServer:
    return OpenAIServer(ServerConfig(url, MODEL, backoff=0.0, retries=0))


def _score(tmp_path: Path, url: str):
    (tmp_path / "note.txt").write_text("Dana takes 10 mg lisinopril.", encoding="utf-8")
    args = ["score", "--context", str(tmp_path / "note.txt"), "-q", "What?", "-r", " lisinopril"]
    args += ["--template", TEMPLATE, "-T", "1", "--doc", "--json", "--out", str(tmp_path / "run.jsonl")]
    return CliRunner().invoke(main, [*args, "--backend", "openai", "--base-url", url, "--model-name", MODEL])


def _audit(tmp_path: Path, url: str):
    args = ["audit", "--data", CLASSIFY, "--trials", "4", "--reference-runs", "1", "--queries-per-trial", "2"]
    args += ["--mechanism", "none", "--shots", "1", "--utility-queries", "0", "--json"]
    args += ["--out", str(tmp_path / "audit.jsonl"), "--retries", "0"]
    return CliRunner().invoke(main, [*args, "--backend", "openai", "--base-url", url, "--model-name", MODEL])


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("ctxlite: error:")]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_honest_server_of_each_dialect_is_read_exactly(dialect):
    """The positive control: the fake model's log-probabilities come back as it computes them, in
    every dialect (llama-cpp-python's leaves the BOS out of its echo and takes text prompts)."""
    with FakeServer(dialect=dialect) as fake, _connect(fake.url) as server:
        assert server.describe()["tokenizer"] == dialect
        tokens = encode("Alice takes 10 mg.", bos=True)
        expected = [logprob(tokens[:i], tokens[i]) for i in range(3, len(tokens))]
        assert server.logprobs(tokens, 3).tolist() == expected


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_honest_control_scores_and_audits_with_exit_0(tmp_path, dialect):
    with FakeServer(dialect=dialect) as fake:
        scored, audited = _score(tmp_path, fake.url), _audit(tmp_path, fake.url)
    assert scored.exit_code == 0, scored.output
    assert audited.exit_code == 0, audited.output


@pytest.mark.parametrize("dialect, lie", CASES)
def test_a_plausible_lie_ends_a_doc_score_with_exit_9_not_another_influence(tmp_path, dialect, lie):
    """The issue's reproducer: ``score --backend openai ... --doc`` on a server whose echo is one
    token off (every value plausible) gave exit 0 and another document influence."""
    with FakeServer(lie, dialect=dialect) as fake:
        res = _score(tmp_path, fake.url)
    assert res.exit_code == 9, res.output
    line = _one_error_line(res.output)
    assert "not aligned with the prompt's tokens" in line, line


@pytest.mark.parametrize("dialect, lie", CASES)
def test_a_plausible_lie_ends_a_classification_audit_with_exit_9(tmp_path, dialect, lie):
    """The same lie gave a classification audit another exact ε."""
    with FakeServer(lie, dialect=dialect) as fake:
        res = _audit(tmp_path, fake.url)
    assert res.exit_code == 9, res.output
    assert "not aligned with the prompt's tokens" in _one_error_line(res.output)


def test_the_entry_of_the_first_token_sent_must_be_null_where_it_has_no_context():
    """vLLM's echo (entry j: token j) has null for the first token; llama-cpp-python's (entry j:
    token j + 1, after the BOS it leaves out) may carry a number there."""
    tokens = encode("Hi", bos=True)

    def piece(t):
        return bytes([t - 3]).decode() if t >= 3 else ""

    honest = {"token_logprobs": [None, -1.0, -2.0], "tokens": ["", "H", "i"]}
    shifted = {"token_logprobs": [-1.0, -2.0, -0.5], "tokens": ["", "H", "i"]}
    assert check_logprobs(honest, tokens, 0, piece, "x") == [None, -1.0, -2.0]
    with pytest.raises(ServerError, match=r"token_logprobs\[0\] is -1.0.*not aligned with the prompt's tokens"):
        check_logprobs(shifted, tokens, 0, piece, "x")
    after_bos = {"token_logprobs": [-1.0, -2.0], "tokens": ["H", "i"]}
    assert check_logprobs(after_bos, tokens, 1, piece, "x", first_null=False) == [-1.0, -2.0]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("lie", [None, "shifted", "shifted_null"])
def test_without_a_generated_entry_the_probe_and_the_probe_one_token_longer_must_agree(dialect, lie):
    """A server that echoes the prompt's entries only (as ctxlite serve's teacher forcing): the
    alignment check appends a token of its own; an echo shifted forward puts at the probe's last
    token a value that depends on what follows it, so the two answers disagree there. The honest
    server passes."""
    tokens = encode("Alice takes 10 mg.", bos=True)

    def read() -> list[float]:
        with FakeServer(lie, dialect=dialect, report_generated=False) as fake:
            with connect(ServerConfig(fake.url, MODEL)) as server:
                return server.logprobs(tokens, 3).tolist()

    if lie is None:
        assert read() == [logprob(tokens[:i], tokens[i]) for i in range(3, len(tokens))]
    else:  # on connecting (a number first, where vLLM has null) or by the check
        with pytest.raises(ServerError, match="not aligned with the prompt's tokens"):
            read()


def test_the_check_is_made_once_by_the_first_read_and_only_by_a_read(tmp_path):
    """Connecting to a lying server (llama-cpp-python's dialect, which allows a number first) is not
    refused, nor are sampled completions (a generation audit reads no log-probabilities); the first
    read of log-probabilities is, and every later one with the same line, without asking again."""
    with FakeServer("row_after", dialect="llama-cpp-python") as fake, connect(ServerConfig(fake.url, MODEL)) as s:
        assert isinstance(s, OpenAIServer) and fake.completions == 1  # the probe
        assert s.sample_texts([(encode("Hi", bos=True), 1)], 1.0, 2) == [" yes"]
        tokens = encode("Alice takes 10 mg.", bos=True)
        with pytest.raises(ServerError, match="not aligned") as first:
            s.logprobs_many([(tokens, 3)] * 4)
        asked = fake.completions
        with pytest.raises(ServerError, match="not aligned") as again:
            s.logprobs(tokens, 3)
        assert str(again.value) == str(first.value) and fake.completions == asked


def test_an_honest_server_is_checked_once_for_requests_in_flight_together():
    with FakeServer(delay=0.05) as fake, connect(ServerConfig(fake.url, MODEL, concurrency=4)) as s:
        tokens = encode("Alice takes 10 mg.", bos=True)
        expected = [logprob(tokens[:i], tokens[i]) for i in range(3, len(tokens))]
        assert [v.tolist() for v in s.logprobs_many([(tokens, 3)] * 8)] == [expected] * 8
        assert fake.completions == 1 + 1 + 8  # the probe, the alignment check, the requests
