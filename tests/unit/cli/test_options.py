"""The server options shared by the commands that take ``--backend openai`` (ctxlite/cli/options.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ctxlite.cli import main

SERVER = ["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model-name", "m"]
COMMANDS = {
    "score": ["score", "--context", "README.md", "-q", "q", "-r", "r", "-T", "1", "--doc"],
    "audit": ["audit", "--data", "ctxlite/data/dialogue_sample.jsonl"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("value", ["inf", "1e308", "1e100", "nan", "-inf", "86401"])
def test_a_request_timeout_that_is_no_number_of_seconds_is_a_usage_error(command, value):
    """``inf`` and ``1e308`` reached ``socket.settimeout`` (an OverflowError traceback) and ``nan``
    got a message naming neither the flag nor the value: each is refused before anything connects,
    exit 2, one line naming both (a day at most: a longer wait for one answer is no timeout)."""
    res = CliRunner().invoke(main, [*COMMANDS[command], *SERVER, "--request-timeout", value])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and not isinstance(res.exception, OverflowError)
    errors = [line for line in res.output.splitlines() if "--request-timeout" in line]
    assert len(errors) == 1 and (value in errors[0] or repr(float(value)) in errors[0]), res.output
