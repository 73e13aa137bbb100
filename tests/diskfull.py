"""A disk that fills up, for tests: ``os.write`` to one file fails with ENOSPC once it holds a given
number of bytes (a short write first, as a disk that fills mid-line gives), and a small tmpfs."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest


def enospc_after(monkeypatch, path: str | os.PathLike, room: int) -> None:
    """From now on, ``os.write`` to the file at ``path`` writes at most ``room`` bytes more, then
    fails with ENOSPC (every other descriptor is written as usual). Linux (/proc/self/fd)."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to tell which file a descriptor writes")
    real, target, left = os.write, os.path.realpath(path), [room]

    def write(fd, data):
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            name = None
        if name != target:
            return real(fd, data)
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real(fd, bytes(data[: left[0]]))
        left[0] -= n
        return n

    monkeypatch.setattr(os, "write", write)


@contextmanager
def full_tmpfs(where: Path, size: str = "256k"):
    """A tmpfs of ``size`` mounted at ``where`` and filled to the last byte (a file ``filler``);
    skipped where mounting is not allowed (not root, no CAP_SYS_ADMIN)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    where.mkdir()
    if libc.mount(b"tmpfs", str(where).encode(), b"tmpfs", 0, f"size={size}".encode()) != 0:
        pytest.skip("cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN)")
    try:
        with open(where / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
            try:
                while True:
                    f.write(b"\0")
            except OSError:
                pass
        yield where
    finally:
        subprocess.run(["umount", "--lazy", str(where)], check=False)  # also while a failing test holds a file open
