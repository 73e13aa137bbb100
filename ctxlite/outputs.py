"""Files ctxlite writes whole (an HTML report, a JUnit file): atomically, and never onto an input.

:func:`write_atomic` writes to a temporary file in the destination's own folder, fsyncs it,
renames it over the destination (``os.replace``: atomic on POSIX) and fsyncs the folder. A
reader, a crash or a full disk therefore sees either the old file whole or the new one whole,
never a truncated mix; on any failure the temporary file is removed and the old file is left
as it was. A destination that is a symbolic link is written through: the file it points to is
replaced (the temporary file is made in *its* folder), the link stays. A destination that is a
character device (``/dev/null``, ``/dev/full``, a terminal) is written in place, never replaced:
renaming a file over ``/dev/null`` would put a regular file where the device was. Any other
destination that exists and is not a regular file (a FIFO, a socket, a block device), directly
or through a link, is refused (:func:`check_output_kind`, exit 2): ctxlite writes a whole file,
and a rename would replace the pipe or socket with one.

:func:`refuse_same_files` runs before a command does any work: an output path that names the
same file as an input or as another output (the same path, a symbolic link to it, or a hard
link: the same device and inode) is a usage error (exit 2), so ``report RUN.jsonl --html
RUN.jsonl`` or ``score --data D --junit D`` cannot replace the evidence they read. Standard
output counts as an output when it is redirected to a regular file. It also refuses an output that
exists and is not a regular file (:func:`check_output_kind`): a FIFO, socket, directory or block
device for every output, a character device too for a result log (``--out``), which is appended
to, locked and read back.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ctxlite.errors import InvalidParameter, output_error

STDOUT = "standard output"


def write_atomic(path: str | os.PathLike, data: bytes, what: str = "file", mode: int = 0o600) -> None:
    """Replace ``path`` by ``data`` all at once (see the module docstring); created with ``mode``
    (owner-only by default: reports hold private text). An ``OSError`` becomes one
    :class:`~ctxlite.errors.OutputError` line (exit 7) naming ``what`` and ``path``."""
    path = Path(path)
    target = Path(os.path.realpath(path))  # through a symbolic link: the link keeps pointing at the report
    tmp = None
    try:
        if target.is_dir():
            raise IsADirectoryError(21, "Is a directory", str(path))
        if check_output_kind(path, what, devices=True) == "character device":
            _write_in_place(target, data)
            return
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        tmp = None
        _fsync_folder(target.parent)
    except OSError as exc:
        raise output_error(path, exc, what) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _write_in_place(device: Path, data: bytes) -> None:
    """Write ``data`` to a character device as it is (no temporary file, no rename: the device stays)."""
    fd = os.open(device, os.O_WRONLY)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


KINDS = (
    (stat.S_ISDIR, "directory"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISFIFO, "FIFO (named pipe)"),
    (stat.S_ISSOCK, "socket"),
)
"""The kinds of file that are not regular files, by the test of their mode."""


LINK_LOOP = "loop of symbolic links"
"""The kind :func:`file_kind` gives a path whose links never reach a file (ELOOP)."""


def file_kind(path: str | os.PathLike) -> str | None:
    """What ``path`` names, following symbolic links: ``"regular file"``, one of :data:`KINDS`' names,
    or None where nothing is there yet (or it cannot be told: the write itself will say why)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:  # a loop of links is something there, which a rename would replace
        return LINK_LOOP if exc.errno == errno.ELOOP else None
    except ValueError:
        return None
    if stat.S_ISREG(mode):
        return "regular file"
    return next((name for test, name in KINDS if test(mode)), "special file")


def check_output_kind(path: str | os.PathLike, flag: str, devices: bool = False) -> str | None:
    """Refuse (``InvalidParameter``, exit 2) an output ``path`` that exists and is not a regular file
    (through a symbolic link too): ctxlite would replace a FIFO or a socket with a regular file.
    With ``devices``, a character device (``/dev/null``) is accepted and written in place; a result
    log (appended to, locked and read back) takes none. ``flag`` names the output in the message
    (an option, or what the file is). Returns the file's kind (None: it does not exist yet)."""
    kind = file_kind(path)
    if kind in (None, "regular file") or (devices and kind == "character device"):
        return kind
    link = " (through a symbolic link)" if os.path.islink(path) and kind != LINK_LOOP else ""
    what = "a regular file or a character device such as /dev/null" if devices else "a regular file"
    raise InvalidParameter(
        f"{flag} {os.fspath(path)} is a {kind}{link}, not a regular file: ctxlite writes a whole file and "
        f"would replace it; give the path of {what}"
    )


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (where the platform lets a folder be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _identity(path: str) -> tuple[str, tuple[int, int] | None]:
    """What a path names: its resolved absolute path and, where it exists, its (device, inode)."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return real, None
    return real, (st.st_dev, st.st_ino)


def _stdout_identity() -> tuple[int, int] | None:
    """(device, inode) of standard output when it is a regular file (a shell redirection), else None."""
    try:
        st = os.fstat(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # replaced by a test runner, closed, or not a file
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def refuse_same_files(
    inputs: Iterable[tuple[str, str | os.PathLike | None]],
    outputs: Iterable[tuple[str, str | os.PathLike | None]],
    stdout: bool = True,
    logs: Iterable[str] = ("--out",),
) -> None:
    """Refuse (``InvalidParameter``, exit 2) when an output names the same file as an input or as
    another output, or exists and is not a regular file (:func:`check_output_kind`: a character
    device is accepted, but for the outputs named in ``logs``, result logs). ``inputs`` and
    ``outputs`` are (option, value) pairs; a None value is skipped, and so is an input that is no
    existing file (a registry model name, a literal template, ``-``): nothing there can be overwritten.
    ``stdout``: standard output, when redirected to a regular file, is one more output."""
    ins = [(flag, os.fspath(p)) for flag, p in inputs if p is not None and os.path.isfile(p)]
    outs = [(flag, os.fspath(p)) for flag, p in outputs if p is not None]
    logs = tuple(logs)
    # a character device is written in place, never replaced: several outputs may share /dev/null
    outs = [(flag, p) for flag, p in outs if check_output_kind(p, flag, devices=flag not in logs) != "character device"]
    seen: list[tuple[str, str, tuple[str, tuple[int, int] | None]]] = [(f, p, _identity(p)) for f, p in ins]
    for flag, p in outs:
        real, inode = _identity(p)
        for other_flag, other, (other_real, other_inode) in seen:
            if real == other_real or (inode is not None and inode == other_inode):
                how = "" if os.path.abspath(p) == os.path.abspath(other) else " (the same file, through a link)"
                raise InvalidParameter(
                    f"{flag} {p} is the same file as {other_flag} {other}{how}: ctxlite would overwrite it; "
                    f"give {flag} another path"
                )
        seen.append((flag, p, (real, inode)))
    out = _stdout_identity() if stdout else None
    if out is not None:
        for flag, p, (_, inode) in seen:
            if inode == out:
                raise InvalidParameter(
                    f"{STDOUT} is redirected to {flag} {p}: ctxlite would write its result into it; "
                    "redirect standard output to another file"
                )
