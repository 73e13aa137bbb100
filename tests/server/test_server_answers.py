"""A server's answer is checked before it is used: each misbehaviour of a fake OpenAI-compatible
server (``tests/fake_server.py``, loopback, no model) ends the run with exit 9 and one line that
names the field, the request and the server's own message; finished records are kept."""

from __future__ import annotations

import json
import math
import resource
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxlite.audit.oracle import ModelOracle
from ctxlite.cli import main
from ctxlite.errors import ServerError
from ctxlite.runtime.openai_server import LOGPROB_TOLERANCE, OpenAIServer, ServerConfig, check_logprobs
from ctxlite.runtime.server_transport import MAX_ANSWER_BYTES
from tests.fake_server import BOS, ERROR_MESSAGE, GIB, MODEL, FakeServer, encode, logprob

TEMPLATE = "{context} Q: {query} A:"
EXAMPLES = [
    {"id": "alice", "context": "Alice takes 10 mg lisinopril.", "query": "What?", "response": " lisinopril"},
    {"id": "bob", "context": "Bob takes 5 mg warfarin.", "query": "What?", "response": " warfarin"},
]


def _connect(url: str, **config) -> OpenAIServer:
    return OpenAIServer(ServerConfig(url, MODEL, backoff=0.0, **config))


def _score(tmp_path: Path, url: str, *more: str):
    """``ctxlite score`` of EXAMPLES on the server at ``url``: (CliRunner result, log path)."""
    data, out = tmp_path / "data.jsonl", tmp_path / "run.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in EXAMPLES), encoding="utf-8")
    args = ["score", "--data", str(data), "--template", TEMPLATE, "--ngram", "4", "-T", "1", "--out", str(out)]
    args += ["--backend", "openai", "--base-url", url, "--model-name", MODEL, "--json", *more]
    return CliRunner().invoke(main, args), out


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("ctxlite: error:")]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


def _logged_keys(log: Path) -> list[str]:
    return [r["key"] for r in map(json.loads, log.read_text(encoding="utf-8").splitlines()[1:]) if "key" in r]


def test_a_well_behaved_server_is_read_exactly():
    """The positive control: the fake model's log-probabilities come back as it computes them."""
    with FakeServer() as fake, _connect(fake.url) as server:
        tokens = encode("Alice takes 10 mg.", bos=True)
        expected = [logprob(tokens[:i], tokens[i]) for i in range(3, len(tokens))]
        assert server.logprobs(tokens, 3).tolist() == expected


@pytest.mark.parametrize(
    "fault, field, value",
    [
        ("positive", "choices.0.logprobs.token_logprobs[", "0.5, not a log-probability"),
        ("nan", "choices.0.logprobs.token_logprobs[", "nan, not a log-probability"),
        ("neg_inf", "choices.0.logprobs.token_logprobs[", "-inf, not a log-probability"),
        ("echo", "choices.0.logprobs.tokens[", "the server scored other tokens than the ones sent"),
        ("short", "choices.0.logprobs.token_logprobs has 2 entries", "for a prompt of"),
        ("error200", "answered HTTP 200 with an error", ERROR_MESSAGE),
    ],
)
def test_an_impossible_answer_stops_the_run_with_exit_9_and_keeps_finished_records(tmp_path, fault, field, value):
    with FakeServer(fault, trigger="Bob") as fake:
        res, log = _score(tmp_path, fake.url)
    assert res.exit_code == 9, res.output
    line = _one_error_line(res.output)
    assert field in line and value in line, line
    assert "completions" in line  # the request: which endpoint
    assert "logits_all" not in line  # a server's wrong count is the server's fault, not a flag's
    assert fake.faulty >= 1
    assert _logged_keys(log) == ["alice"]  # the example finished before the fault is kept


def test_the_same_runs_to_the_end_on_a_well_behaved_server(tmp_path):
    """The control of the test above: without the fault both examples are scored (exit 0)."""
    with FakeServer() as fake:
        res, log = _score(tmp_path, fake.url)
    assert res.exit_code == 0, res.output
    assert _logged_keys(log) == ["alice", "bob"]


@pytest.mark.parametrize(
    "fault, message",
    [
        ("positive", r"token_logprobs\[\d+\] is 0.5"),
        ("nan", r"token_logprobs\[\d+\] is nan"),
        ("neg_inf", r"token_logprobs\[\d+\] is -inf"),
        ("echo", r"logprobs.tokens\[\d+\] is 'Z'"),
        ("short", "token_logprobs has 2 entries"),
        ("error200", "KV cache is full"),
    ],
)
def test_an_impossible_answer_at_connection_is_refused(fault, message):
    """The connection's own probe (a teacher-forced sentence) is checked like every answer."""
    with FakeServer(fault) as fake:
        with pytest.raises(ServerError, match=f"teacher forcing.*{message}"):
            _connect(fake.url)


def test_the_rounding_tolerance_admits_float32_rounding_only():
    tokens = encode("Hi", bos=True)

    def answer(last):
        return {"token_logprobs": [None, -1.0, last], "tokens": ["", "H", "i"]}

    def piece(t):
        return bytes([t - 3]).decode() if t >= 3 else ""

    assert check_logprobs(answer(LOGPROB_TOLERANCE / 2), tokens, 0, piece, "x")[2] == LOGPROB_TOLERANCE / 2
    assert check_logprobs(answer(0.0), tokens, 0, piece, "x")[2] == 0.0
    with pytest.raises(ServerError, match=r"token_logprobs\[2\]"):
        check_logprobs(answer(2 * LOGPROB_TOLERANCE), tokens, 0, piece, "x")
    with pytest.raises(ServerError, match="not a number"):
        check_logprobs(answer("-1"), tokens, 0, piece, "x")
    with pytest.raises(ServerError, match="has 5 entries"):
        check_logprobs({"token_logprobs": [None, -1.0, -1.0, -1.0, -1.0], "tokens": []}, tokens, 0, piece, "x")


def test_label_probabilities_above_1_are_refused():
    """Every served log-probability is -0.01 (each one valid), so P(" yes") and P(" no") are both
    about 0.97: a distribution no model gives. Renormalised it would look like a fair coin."""
    with FakeServer("flat") as fake, _connect(fake.url) as server:
        oracle = ModelOracle(server, labels=(" yes", " no"))
        with pytest.raises(ServerError, match=r"total probability of 1\.9"):
            oracle.label_distribution("Is it? A:")
    with FakeServer() as fake, _connect(fake.url) as server:  # the control: a true distribution passes
        dist = ModelOracle(server, labels=(" yes", " no")).label_distribution("Is it? A:")
        assert math.isclose(dist.sum(), 1.0) and dist[-1] > 0.9


def test_request_timeout_bounds_a_server_that_drips_its_answer():
    """One byte every 20 ms never trips a per-read timeout of 1 s; the whole request must."""
    with FakeServer("drip") as fake:
        with pytest.raises(ServerError, match=r"no answer within 1 s \(--request-timeout"):
            _connect(fake.url, timeout=1.0, retries=0)
        assert 0 < fake.sent < 1000  # cut off well before its answer ended


def test_a_dripping_server_ends_the_cli_run_with_exit_9(tmp_path):
    with FakeServer("drip", trigger="Bob") as fake:
        res, log = _score(tmp_path, fake.url, "--request-timeout", "1", "--retries", "0")
    assert res.exit_code == 9, res.output
    assert "no answer within 1 s" in _one_error_line(res.output)
    assert _logged_keys(log) == ["alice"]


@pytest.mark.parametrize("fault", ["huge", "huge_declared"])
def test_a_1_gib_answer_is_refused_while_it_streams_in(fault):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with FakeServer(fault) as fake:
        with pytest.raises(ServerError, match=f"larger than {MAX_ANSWER_BYTES:,} bytes"):
            _connect(fake.url, retries=0)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert fake.sent < GIB // 4, fake.sent  # the client hung up long before the end
    assert grown < 4 * MAX_ANSWER_BYTES, grown  # never held the answer whole


def test_a_bos_token_in_the_echo_is_not_compared():
    """Special tokens decode to nothing alone: the echo check compares only what shows."""
    with FakeServer() as fake, _connect(fake.url) as server:
        assert server.bos_id == BOS
        assert server.logprobs(encode("ab", bos=True), 1).shape == (2,)
