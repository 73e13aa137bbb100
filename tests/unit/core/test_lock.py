"""ctxlite.lock: one writer per log, and a lock that cannot be written leaves nothing behind."""

from __future__ import annotations

import pytest

from ctxlite.errors import LogInUse, OutputError
from ctxlite.lock import LogLock
from tests.diskfull import enospc_after


def test_a_full_disk_at_the_lock_is_one_output_error_and_no_stale_lock(tmp_path, monkeypatch):
    """The issue's 'full at start': writing the PID raised a bare OSError (exit 1, a traceback) and
    left ``run.jsonl.lock`` behind."""
    log = tmp_path / "run.jsonl"
    enospc_after(monkeypatch, tmp_path / "run.jsonl.lock", 0)
    with pytest.raises(OutputError, match=r"cannot write the lock file .*run\.jsonl\.lock: no space left") as info:
        LogLock(log).acquire()
    assert info.value.exit_code == 7
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    with LogLock(log) as lock:  # nothing held: the next run locks at once
        assert lock.held
        with pytest.raises(LogInUse):
            LogLock(log).acquire()


def test_a_lock_file_that_is_a_fifo_is_refused(tmp_path):
    import os

    os.mkfifo(tmp_path / "run.jsonl.lock")
    with pytest.raises(OutputError, match="lock file .* is not a regular file"):
        LogLock(tmp_path / "run.jsonl").acquire()


def test_a_lock_on_a_loop_of_links_is_one_error_not_a_traceback(tmp_path):
    """The library path: Path.resolve raised RuntimeError, and __del__ then read an unset _fd."""
    from ctxlite.errors import InvalidParameter

    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(InvalidParameter, match="cannot be resolved"):
        LogLock(a)
