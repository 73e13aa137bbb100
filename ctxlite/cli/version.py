"""``ctxlite version``: the versions and the llama.cpp build that compute ctxlite's numbers."""

from __future__ import annotations

import click

from ctxlite.cli.options import emit_json
from ctxlite.identity import software
from ctxlite.runtime.build import describe, llama_build


@click.command()
@click.option("-v", "--verbose", is_flag=True, help="Also print llama.cpp's full system-info line.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def version(verbose, as_json):
    """Print ctxlite's version and the llama.cpp build (its compiled instruction sets).

    Two builds of llama.cpp round differently (an AVX-512 build against an AVX2 one), so the
    build is part of every run's identity: a log is resumed only by the build that wrote it.

    \b
    ctxlite version
    ctxlite version --verbose --json
    """
    build = llama_build()
    info = {"ctxlite": software()["ctxlite"], **build}
    if not verbose:
        info.pop("system_info")
    if as_json:
        emit_json(info)
        return
    click.echo(f"ctxlite {info['ctxlite']}")
    click.echo(describe(build))
    if verbose:
        click.echo(f"llama.cpp system info: {build['system_info']}")
