"""``python -m ctxlite`` and the ``ctxlite`` script: Ctrl-C while the command line is still being
imported exits 130 like Ctrl-C anywhere else (the CLI's own handler is not in place yet)."""

import os
import sys

EXIT_INTERRUPTED = 130  # ctxlite.errors.EXIT_INTERRUPTED, not imported: a Ctrl-C could land in that import


def entry() -> None:
    try:
        try:
            from ctxlite.cli import INTERRUPTED, main
        except KeyboardInterrupt:
            sys.stderr.write("ctxlite: interrupted\n")
            sys.exit(EXIT_INTERRUPTED)
        try:
            main()
        except KeyboardInterrupt:  # between the import and click's own handler
            sys.stderr.write(INTERRUPTED + "\n")
            sys.exit(EXIT_INTERRUPTED)
    except SystemExit as exc:
        if exc.code == EXIT_INTERRUPTED:
            _exit_interrupted()
        raise


def _exit_interrupted() -> None:
    """Exit with 130 even where CPython would die of SIGINT instead.

    CPython marks a KeyboardInterrupt that ends code run from a string
    (``PyRun_String``; ``dataclasses`` builds ``__init__`` that way while
    llama_cpp is imported) as unhandled, and ``python -m`` then kills itself
    with SIGINT at exit although the interrupt was caught. Every ``finally``
    has run by now; run the exit handlers, flush, and leave with our code.
    """
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe has nothing left to keep
            pass
    os._exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    entry()
