"""docs/servers.md's vLLM section: its commands run against the real vLLM, and its server command is
the one the tests start."""

from __future__ import annotations

import shlex
from pathlib import Path

from click.testing import CliRunner

from ctxlite.cli import main
from tests.docs_pages import vllm_lines

DOC_URL = "http://127.0.0.1:8000/v1"


def test_the_commands_of_docs_servers_md_run_against_vllm(metered, tmp_path, monkeypatch):
    commands = [line for line in vllm_lines() if line.startswith("ctxlite ")]
    assert len(commands) >= 2
    (tmp_path / "note.txt").write_text("Dana takes 10 mg lisinopril daily for her blood pressure.", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    repo = Path(__file__).resolve().parents[2]
    for command in commands:
        assert DOC_URL in command, command
        args = shlex.split(command.replace(DOC_URL, metered.url))[1:]
        args = [str(repo / a) if a.startswith("ctxlite/data/") else a for a in args]
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, (command, res.output)


def test_the_documented_server_command_is_the_tests_own(vllm_server):
    """Every flag of the page's ``python -m vllm.entrypoints.openai.api_server`` line, with its value
    (paths and port aside), is in the command the tests start, and the other way round."""
    [line] = [line for line in vllm_lines() if "vllm.entrypoints.openai.api_server" in line]
    documented = shlex.split(line)
    started = vllm_server.command()
    assert started[1:3] == documented[documented.index("-m") : documented.index("-m") + 2]

    def flags(args):
        pairs = {}
        for i, a in enumerate(args):
            if a.startswith("--"):
                value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
                pairs[a] = None if a in ("--model", "--port") else value
        return pairs

    assert flags(documented) == flags(started)
    environment = vllm_server.environment()
    for setting in (w for w in documented if "=" in w and w.split("=")[0].isupper()):
        name, value = setting.split("=", 1)
        assert environment.get(name) == value, setting
