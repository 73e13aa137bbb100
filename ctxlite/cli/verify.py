"""``ctxlite verify``: check a result log's hash chain, and that it ends at a head kept elsewhere."""

from __future__ import annotations

import click

from ctxlite.cli.progress import say
from ctxlite.runs.report import verify_log


@click.command()
@click.argument("log_path", metavar="RUN.jsonl", type=click.Path(dir_okay=False))
@click.option(
    "--head",
    metavar="HASH",
    default=None,
    help="The chain head kept from the run (its verdict line, JSON or JUnit property log.head): the log "
    "must end exactly there.",
)
def verify(log_path, head):
    """Check that a log's records are the ones its run wrote: no model is loaded.

    Every line's hash must follow from the line before it (exit 4 names the first
    that does not: an edit, an insertion, a reordering or a removal), no record may
    appear twice, and with --head the log must end at that head, which catches a
    rewrite of the whole file (hashes recomputed) and a truncation too. A chain is
    not a signature: without --head, whoever can write the file can re-chain it.

    \b
    Examples:
      ctxlite verify runs/scores.jsonl
      ctxlite verify runs/audit.jsonl --head sha256:5f0c…
    """
    run = verify_log(log_path, head)
    state = "finished" if run.complete else "partial (it did not finish)"
    say(
        f"{log_path}: hash chain intact over {run.lines} line(s), {len(run.records)} record(s), {state}; "
        f"head {run.head}" + (" (the kept head)" if head is not None else "")
    )
    click.echo(run.head)
