"""``ctxlite verify``: check a result log's hash chain, and that it ends at a head kept elsewhere."""

from __future__ import annotations

import json

import click

from ctxlite.chain import FIELD
from ctxlite.cli.progress import say
from ctxlite.errors import DataError
from ctxlite.records import read_run_log, read_text


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
    run = read_run_log(log_path)
    if not run.chained:
        raise DataError(f"{log_path} has no hash chain (written before ctxlite chained its logs): nothing to verify")
    state = "finished" if run.complete else "partial (it did not finish)"
    if head is not None and head != run.head:
        heads = [json.loads(line).get(FIELD) for line in read_text(log_path, "result log").split("\n")[: run.lines]]
        if head in heads:
            at = heads.index(head) + 1
            raise DataError(
                f"{log_path}: the kept head {head} is line {at}'s; the log has {run.lines - at} line(s) after it "
                f"(it was resumed or appended to since; its head is now {run.head})"
            )
        raise DataError(
            f"{log_path}: its head is {run.head}, not the kept {head}: the log is not the one whose head was "
            "kept (rewritten, truncated, or another log)"
        )
    say(
        f"{log_path}: hash chain intact over {run.lines} line(s), {len(run.records)} record(s), {state}; "
        f"head {run.head}" + (" (the kept head)" if head is not None else "")
    )
    click.echo(run.head)
