"""The ``ctxlite`` command line: a thin layer over the library.

The library raises ``CtxliteError`` subclasses; only here are they turned into
one-line messages and the exit codes documented in ``ctxlite.errors`` and
docs/errors.md. Ctrl-C exits with 130 after the commands have kept what finished.
"""

from __future__ import annotations

import sys

import click

from ctxlite._version import __version__
from ctxlite.cli import audit, models, progress, report, score, serve, verify, version
from ctxlite.errors import EXIT_INTERRUPTED, CtxliteError
from ctxlite.visible import visible

INTERRUPTED = "ctxlite: interrupted; finished records are kept, re-run the same command to resume"


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except CtxliteError as exc:
            click.echo(f"ctxlite: error: {visible(str(exc))}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo(INTERRUPTED, err=True)
            ctx.exit(EXIT_INTERRUPTED)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Click's main, except that Ctrl-C outside a command (while parsing) also exits 130, not 1."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except (click.exceptions.Abort, KeyboardInterrupt):
            click.echo(INTERRUPTED, err=True)
            sys.exit(EXIT_INTERRUPTED)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


def _refuse_short_quiet(ctx, param, value):
    """``-q`` before the command was quiet and after it is ``--query``: the short spelling is refused
    here, so ``ctxlite -q score ...`` and ``ctxlite score ... -q --doc`` cannot be read two ways."""
    if value:
        raise click.UsageError(
            "-q is --query (score) after the command; quiet is spelt --quiet, e.g. ctxlite --quiet audit ..."
        )


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ctxlite")
@click.option(
    "--quiet",
    is_flag=True,
    help="No progress line on stderr (it is drawn only on a terminal anyway); messages, warnings "
    "and verdicts still print.",
)
@click.option("-q", "short_quiet", is_flag=True, hidden=True, expose_value=False, callback=_refuse_short_quiet)
def main(quiet):
    """Measure how much a language model leaks from the private text in its prompt.

    \b
    ctxlite score   context influence of each n-gram on the response (CID)
    ctxlite audit   ContextLeak canary audits of private in-context learning
    ctxlite serve   answer over a private context, each token epsilon-bounded (HTTP)
    ctxlite report  re-render a run from its --out log, gate it, write JUnit
    ctxlite verify  check a log's hash chain (and its head against a kept one)
    ctxlite models  list / pull / locate GGUF models (offline)
    ctxlite version the versions and the llama.cpp build (instruction sets) behind the numbers

    On a terminal a progress line (examples, ablations, trials; rate and ETA) is drawn on
    stderr; give --quiet before the command to turn it off, e.g. ctxlite --quiet audit ...
    """
    progress.QUIET = quiet


for _command in (models.models, score.score, audit.audit, serve.serve, report.report, verify.verify, version.version):
    main.add_command(_command)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
