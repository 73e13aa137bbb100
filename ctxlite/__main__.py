"""``python -m ctxlite`` and the ``ctxlite`` script: Ctrl-C while the command line is still being
imported exits 130 like Ctrl-C anywhere else (the CLI's own handler is not in place yet)."""

import sys


def entry() -> None:
    try:
        from ctxlite.cli import INTERRUPTED, main
    except KeyboardInterrupt:
        sys.stderr.write("ctxlite: interrupted\n")
        sys.exit(130)
    try:
        main()
    except KeyboardInterrupt:  # between the import and click's own handler
        sys.stderr.write(INTERRUPTED + "\n")
        sys.exit(130)


if __name__ == "__main__":
    entry()
