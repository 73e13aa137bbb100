"""One writer per result log: an exclusive ``flock`` held for the whole life of the run that writes it.

The lock is a sidecar file ``<log>.lock`` (named after the log's resolved path, so a symlink to the
log takes the same lock) that holds the holder's PID. ``flock`` locks belong to the open file: the
kernel drops them when the holder exits, however it exits, so a run killed with ``kill -9`` leaves
at most a stale file that the next run locks at once. A second writer is refused immediately
(:class:`LogInUse`, exit 11), naming the holder's PID; it touches neither the log nor the lock.

Where no sidecar can be created (a read-only folder holding a finished log that is only re-read),
the log file itself is locked, read-only; the holder's PID is then unknown.

>>> with LogLock("runs/x.jsonl"):   # doctest: +SKIP
...     ...                          # a second LogLock("runs/x.jsonl").acquire() raises LogInUse
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from pathlib import Path

from ctxlite.errors import InvalidParameter, LogInUse, OutputError, output_error


class LogLock:
    """The exclusive write lock of the result log at ``log_path`` (:meth:`acquire`, :meth:`release`)."""

    def __init__(self, log_path: str | os.PathLike):
        self._fd: int | None = None
        self._sidecar = False
        self.log_path = Path(log_path)
        try:
            self.path = Path(str(self.log_path.resolve()) + ".lock")
        except (RuntimeError, OSError) as exc:  # a loop of symbolic links (RuntimeError before Python 3.13)
            raise InvalidParameter(f"the log {self.log_path} cannot be resolved to a file: {exc}") from None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> LogLock:
        """Take the lock now or raise :class:`LogInUse` (never waits); ``OutputError`` if it cannot be made."""
        if self._fd is not None:
            return self
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._holder(fd)
                os.close(fd)
                who = f"PID {holder}" if holder else "a process whose PID it does not record"
                raise LogInUse(
                    f"{self.log_path} is being written by another ctxlite run ({who}): wait for it to "
                    "finish or choose another --out"
                ) from None
            if not self._sidecar or self._same_file(fd):
                break
            os.close(fd)  # the holder we waited behind removed this file as it released: lock the new one
        self._fd = fd
        if self._sidecar:
            try:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            except OSError as exc:  # a full disk: no lock left behind, one line (exit 7)
                self.release()
                raise output_error(self.path, exc, "lock file") from None
        return self

    def release(self) -> None:
        """Drop the lock (removing the sidecar first, while still holding it); safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if self._sidecar:
            try:
                os.unlink(self.path)
            except OSError:
                pass  # a read-only folder or a removed file: the lock is released all the same
        os.close(fd)

    def _open(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o600)
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device in the lock's place
                os.close(fd)
                raise OutputError(f"cannot write the lock file {self.path}: it is not a regular file")
            self._sidecar = True
            return fd
        except OutputError:
            raise
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and self.log_path.is_file():
                try:  # a read-only folder: lock the (existing) log itself
                    fd = os.open(self.log_path, os.O_RDONLY)
                    self._sidecar = False
                    return fd
                except OSError:
                    pass
            raise output_error(self.log_path, exc, "result log") from None

    def _same_file(self, fd: int) -> bool:
        try:
            return os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            return False

    def _holder(self, fd: int) -> int | None:
        """The PID the holder wrote (it writes it right after locking: a moment's wait covers that)."""
        if not self._sidecar:
            return None
        for _ in range(50):
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            if text.isdigit():
                return int(text)
            time.sleep(0.01)
        return None

    def __enter__(self) -> LogLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):  # a holder dropped without release: close the descriptor (the kernel drops the lock)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
