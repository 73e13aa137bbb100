"""The ``ctxlite`` command line: a thin layer over the library.

The library raises ``CtxliteError`` subclasses; only here are they turned into
one-line messages and the exit codes documented in ``ctxlite.errors`` and
docs/errors.md. Ctrl-C exits with 130 after the commands have kept what finished.
"""

from __future__ import annotations

import os
import sys

import click

from ctxlite._version import __version__
from ctxlite.cli import audit, models, progress, report, score, serve, verify, version
from ctxlite.errors import EXIT_INTERRUPTED, CtxliteError, OutputError, output_error
from ctxlite.visible import visible

INTERRUPTED = "ctxlite: interrupted; finished records are kept, re-run the same command to resume"


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            rv = super().invoke(ctx)
            sys.stdout.flush()  # now, where a failure is still ours to report (not at interpreter exit)
            return rv
        except CtxliteError as exc:
            click.echo(f"ctxlite: error: {visible(str(exc))}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo(INTERRUPTED, err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except OSError as exc:
            failed = _stdout_failed(exc)
            click.echo(f"ctxlite: error: {failed}", err=True)
            ctx.exit(failed.exit_code)

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
        except OSError as exc:  # --help or --version onto a full device
            failed = _stdout_failed(exc)
            click.echo(f"ctxlite: error: {failed}", err=True)
            sys.exit(failed.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


def _stdout_failed(exc: OSError) -> OutputError:
    """The one line (exit 7) for standard output that cannot be written (a full device, a closed
    pipe); ``exc`` again where it came from elsewhere (a bug). What the failed write left buffered
    is then sent to /dev/null, so that Python's own flush at exit does not fail a second time."""
    if not _stdout_broken(exc):
        raise exc
    try:
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (AttributeError, OSError, ValueError):  # a test runner's stream: nothing flushes it at exit
        pass
    return output_error(None, exc, "standard output")


def _stdout_broken(exc: OSError) -> bool:
    """Whether ``exc`` came from writing standard output: raised by click's echo to it, or standard
    output still cannot be flushed."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    frame = None if tb is None else tb.tb_frame
    if frame is not None and frame.f_code.co_name == "echo" and frame.f_globals.get("__name__") == "click.utils":
        if not frame.f_locals.get("err"):
            return True
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        return True
    return False


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
