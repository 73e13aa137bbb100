"""``ctxlite serve``'s refusals before any model work: each a one-line error with its exit code."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.serve.ledger import Budgets, Ledger


@pytest.mark.parametrize(
    "extra,code,message",
    [
        (["--host", "0.0.0.0"], 2, "reachable from other machines"),
        (["--host", "0.0.0.0", "--api-keys", "KEYS", "--release-realised"], 2, "a testing server listens on loopback"),
        (["--host", "192.0.2.7", "--api-keys", "KEYS", "--release-realised"], 2, "outside the epsilon bound"),
        (["--budget-total", "5"], 2, "a budget needs --epsilon"),
        (["--epsilon", "1", "--budget-per-key", "-1"], 2, "--budget-per-key must be a finite number > 0"),
        (["--epsilon", "1", "--data", "DATA"], 2, "exactly one of --context FILE or --data"),
        (["--epsilon", "0"], 2, "not in the range x>0"),
    ],
)
def test_refusals_are_one_line_errors(tmp_path, monkeypatch, extra, code, message):
    monkeypatch.delenv("CTXLITE_API_KEYS", raising=False)
    (tmp_path / "note.txt").write_text("Dana takes lisinopril.", encoding="utf-8")
    (tmp_path / "data.jsonl").write_text('{"text": "Dana"}\n', encoding="utf-8")
    (tmp_path / "keys.txt").write_text("alpha\n", encoding="utf-8")
    files = {"DATA": str(tmp_path / "data.jsonl"), "KEYS": str(tmp_path / "keys.txt")}
    extra = [files.get(a, a) for a in extra]
    args = ["serve", "--context", str(tmp_path / "note.txt"), "--log", str(tmp_path / "serve.jsonl"), *extra]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == code and message in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "serve.jsonl").exists()


def test_an_empty_context_and_an_empty_key_file_are_refused(tmp_path):
    (tmp_path / "empty.txt").write_text("  \n", encoding="utf-8")
    (tmp_path / "note.txt").write_text("Dana", encoding="utf-8")
    (tmp_path / "keys.txt").write_text("# no key\n", encoding="utf-8")
    log = ["--log", str(tmp_path / "serve.jsonl")]
    r = CliRunner().invoke(main, ["serve", "--context", str(tmp_path / "empty.txt"), *log])
    assert r.exit_code == 2 and "the private context is empty" in r.output
    r = CliRunner().invoke(
        main, ["serve", "--context", str(tmp_path / "note.txt"), "--api-keys", str(tmp_path / "keys.txt"), *log]
    )
    assert r.exit_code == 2 and "holds no API key" in r.output


def test_another_servers_budget_log_is_refused_before_the_model_loads(tmp_path):
    identity = {"software": {"ctxlite": "0"}, "model": None, "settings": {"epsilon": 2.0, "lambda": 1.0,
                "context": "sha256:" + "0" * 64}}  # fmt: skip
    Ledger(tmp_path / "serve.jsonl", identity, Budgets(), 2.0).close_log()
    (tmp_path / "note.txt").write_text("Dana", encoding="utf-8")
    args = ["serve", "--context", str(tmp_path / "note.txt"), "--epsilon", "1", "--log", str(tmp_path / "serve.jsonl")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 4 and "was written by a different run" in r.output and "--log" in r.output, r.output


def test_keys_come_from_a_file_else_the_environment_comments_and_blanks_skipped(tmp_path):
    from ctxlite.serve.deployment import read_api_keys

    (tmp_path / "keys.txt").write_text("# ops\nalpha\n\n  beta  \n", encoding="utf-8")
    environ = {"CTXLITE_API_KEYS": " gamma, ,#delta,epsilon "}
    assert read_api_keys(str(tmp_path / "keys.txt"), environ) == {"alpha", "beta"}
    assert read_api_keys(None, environ) == {"gamma", "epsilon"}
    assert read_api_keys(None, {}) == frozenset()
