"""The CLI reference (docs/cli.md): the ``--help`` of every ``ctxlite`` command and subcommand.

docs/cli.md holds a cog block (https://nedbatchelder.com/code/cog/) that calls :func:`markdown`;
``make docs`` regenerates the page in place and tests/test_docs.py fails when the committed page
differs from what the code prints. The help is rendered at a fixed width, without the
environment variables that change a default, so the page is the same on every machine.
"""

from __future__ import annotations

import click
from click.testing import CliRunner

from ctxlite.cli import main

WIDTH = 80  # click wraps help at min(terminal width, 80) - 2 columns
# variables that can change what --help prints (defaults read from the environment); unset for the page
ENV = {"CTXLITE_MODEL": None, "CTXLITE_HOME": None, "COLUMNS": None}


def commands(group: click.Group = main, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path below ``group``, parents before their subcommands, in alphabetical order."""
    out = [path]
    if isinstance(group, click.Group):
        for name in sorted(group.commands):
            out += commands(group.commands[name], (*path, name))
    return out


def help_text(path: tuple[str, ...]) -> str:
    """What ``ctxlite PATH --help`` prints at the reference's width."""
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="ctxlite", env=ENV, terminal_width=WIDTH)
    if result.exit_code != 0:
        raise RuntimeError(f"ctxlite {' '.join(path)} --help exited {result.exit_code}: {result.output}")
    return result.output.rstrip() + "\n"


def markdown() -> str:
    """The page body: links to every command, then one section per command (``## ctxlite score``), its
    help in a text block."""
    paths = commands()
    toc = " · ".join(f"[`{' '.join(('ctxlite', *p))}`](#{'-'.join(('ctxlite', *p))})" for p in paths)
    parts = [f"Commands: {toc}\n"]
    for path in paths:
        title = " ".join(("ctxlite", *path))
        level = "#" * min(2 + max(len(path) - 1, 0), 4)
        parts.append(f"{level} {title}\n\n```text\n$ {title} --help\n{help_text(path)}```\n")
    return "\n" + "\n".join(parts)
