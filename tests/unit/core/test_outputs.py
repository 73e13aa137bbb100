"""Outputs are atomic and never land on an input: every file ctxlite writes whole (HTML, JUnit)
replaces the old one at once or not at all, and an output that names an input or another output
(the same path, a symbolic or a hard link) is refused before any work, exit 2.

The score runs here use the fake server of ``tests/fake_server.py`` (no model), so the unguarded
command would run to the end and overwrite its input: what each test guards against."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import resource
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.errors import InvalidParameter, OutputError
from ctxlite.outputs import refuse_same_files, write_atomic
from tests.fake_server import MODEL, FakeServer

TEMPLATE = "{context} Q: {query} A:"
EXAMPLE = {"id": "alice", "context": "Alice takes 10 mg lisinopril.", "query": "What?", "response": " lisinopril"}


def ctxlite(args, **kw):
    """The command in a subprocess, as a user runs it (for what needs a process: limits, redirections)."""
    return subprocess.run([sys.executable, "-m", "ctxlite", *args], capture_output=True, timeout=300, **kw)


def invoke(args):
    """The command in this process (fast): returncode and stderr like ``ctxlite``'s result."""
    res = CliRunner().invoke(main, args)
    return SimpleNamespace(returncode=res.exit_code, stderr=res.stderr.encode(), stdout=res.stdout.encode())


def check_refused(r, message: str) -> str:
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, (r.returncode, err)
    assert "Traceback" not in err and err.count("ctxlite: error:") == 1, err
    assert message in err, err
    return err


@pytest.fixture(scope="module")
def fake():
    with FakeServer() as server:
        yield server


@pytest.fixture
def data(tmp_path) -> Path:
    p = tmp_path / "data.jsonl"
    p.write_text(json.dumps(EXAMPLE) + "\n", encoding="utf-8")
    return p


def _score(fake, data: Path, *more: str) -> list[str]:
    args = ["score", "--data", str(data), "--template", TEMPLATE, "--ngram", "4", "-T", "1"]
    return args + ["--backend", "openai", "--base-url", fake.url, "--model-name", MODEL, "--json", *more]


@pytest.fixture
def run_log(fake, data, tmp_path) -> Path:
    """A finished score log (its bytes are what a test checks are never touched)."""
    out = tmp_path / "run.jsonl"
    r = invoke(_score(fake, data, "--out", str(out)))
    assert r.returncode == 0, r.stderr
    return out


# ----- the reproducers: an output onto an input ------------------------------------------
@pytest.mark.parametrize("flag", ["--html", "--junit"])
def test_report_never_writes_onto_its_own_log(run_log, flag):
    before = run_log.read_bytes()
    check_refused(
        invoke(["report", str(run_log), flag, str(run_log)]), f"{flag} {run_log} is the same file as RUN.jsonl"
    )
    assert run_log.read_bytes() == before


def test_report_html_and_junit_on_one_file_are_refused(run_log, tmp_path):
    same = tmp_path / "r.out"
    check_refused(invoke(["report", str(run_log), "--html", str(same), "--junit", str(same)]), "--junit")
    assert not same.exists()


def test_score_junit_onto_its_out_log_is_refused(fake, data, tmp_path):
    out = tmp_path / "x.jsonl"
    check_refused(invoke(_score(fake, data, "--out", str(out), "--junit", str(out))), "is the same file as --out")
    assert not out.exists()  # refused before any work: no log was started


def test_score_junit_onto_its_data_is_refused(fake, data):
    before, completions = data.read_bytes(), fake.completions
    check_refused(invoke(_score(fake, data, "--junit", str(data))), "is the same file as --data")
    assert data.read_bytes() == before and fake.completions == completions  # nothing was sent


@pytest.mark.parametrize(
    "args, message",
    [
        (["--out", "{data}"], "--out {data} is the same file as --data"),
        (["--format", "{fmt}", "--junit", "{fmt}"], "--junit {fmt} is the same file as --format"),
    ],
)
def test_audit_outputs_onto_its_inputs_are_refused(data, tmp_path, args, message):
    fmt = tmp_path / "f.toml"
    fmt.write_text('task = "classify"\n', encoding="utf-8")
    before = (data.read_bytes(), fmt.read_bytes())
    paths = {"data": data, "fmt": fmt}
    r = invoke(["audit", "--data", str(data), *(a.format(**paths) for a in args), "--trials", "4"])
    check_refused(r, message.format(**paths))
    assert (data.read_bytes(), fmt.read_bytes()) == before


def test_a_symbolic_link_to_the_log_is_the_log(run_log, tmp_path):
    link = tmp_path / "elsewhere" / "report.html"
    link.parent.mkdir()
    link.symlink_to(run_log)
    before = run_log.read_bytes()
    err = check_refused(invoke(["report", str(run_log), "--html", str(link)]), "the same file, through a link")
    assert "RUN.jsonl" in err and run_log.read_bytes() == before


def test_a_hard_link_to_the_data_is_the_data(fake, data, tmp_path):
    link = tmp_path / "junit.xml"
    os.link(data, link)
    before = data.read_bytes()
    check_refused(invoke(_score(fake, data, "--junit", str(link))), "is the same file as --data")
    assert data.read_bytes() == before


def test_standard_output_redirected_into_the_log_is_refused(run_log):
    before = run_log.read_bytes()
    with open(run_log, "ab") as stdout:
        r = subprocess.run([sys.executable, "-m", "ctxlite", "report", str(run_log), "--json"], stdout=stdout,
                           stderr=subprocess.PIPE, timeout=300)  # fmt: skip
    assert r.returncode == 2 and b"standard output is redirected to RUN.jsonl" in r.stderr, r.stderr
    assert run_log.read_bytes() == before


def test_distinct_outputs_are_written(run_log, tmp_path):
    """The control: other paths are accepted, and the log is read, not touched."""
    before = run_log.read_bytes()
    html, junit = tmp_path / "r.html", tmp_path / "r.xml"
    r = invoke(["report", str(run_log), "--html", str(html), "--junit", str(junit)])
    assert r.returncode == 0, r.stderr
    assert html.read_text(encoding="utf-8").startswith("<!DOCTYPE html>") and junit.read_bytes().startswith(b"<?xml")
    assert oct(html.stat().st_mode & 0o777) == "0o600" and oct(junit.stat().st_mode & 0o777) == "0o600"
    assert run_log.read_bytes() == before


# ----- atomic replacement ---------------------------------------------------------------------------
def _limit_file_size(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_report_that_cannot_be_written_whole_leaves_the_old_one_intact(run_log, tmp_path):
    """The write fails midway (the file-size limit: EFBIG, as ENOSPC on a full disk): exit 7, the old
    report keeps every byte, and no temporary file is left."""
    html = tmp_path / "report.html"
    assert invoke(["report", str(run_log), "--html", str(html)]).returncode == 0
    before = html.read_bytes()
    r = ctxlite(["report", str(run_log), "--html", str(html), "--no-text"], preexec_fn=_limit_file_size(4096))
    assert len(before) > 4096
    assert r.returncode == 7, r.stderr
    assert b"cannot write the HTML report" in r.stderr and b"Traceback" not in r.stderr
    assert html.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl", "report.html", "run.jsonl"]


def _mount_tmpfs(where: Path, size: str) -> bool:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    where.mkdir()
    return libc.mount(b"tmpfs", str(where).encode(), b"tmpfs", 0, f"size={size}".encode()) == 0


def test_a_full_disk_leaves_the_old_report_intact(run_log, tmp_path):
    """The issue's case itself, on a real full file system (a small tmpfs; needs the right to mount)."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "256k"):
        pytest.skip("cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN)")
    try:
        html = disk / "report.html"
        assert invoke(["report", str(run_log), "--html", str(html)]).returncode == 0
        before = html.read_bytes()
        filler = disk / "filler"
        with open(filler, "wb", buffering=0) as f:  # fill the disk, then free less than a report
            try:
                while True:
                    f.write(b"\0" * 1024)
            except OSError:
                pass
        os.truncate(filler, max(0, filler.stat().st_size - len(before) // 2))
        r = invoke(["report", str(run_log), "--html", str(html)])
        assert r.returncode == 7 and b"no space left on the device" in r.stderr, r.stderr
        assert html.read_bytes() == before
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "report.html"]
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_write_atomic_replaces_whole_and_follows_a_link(tmp_path):
    target = tmp_path / "real.xml"
    target.write_bytes(b"old")
    link = tmp_path / "link.xml"
    link.symlink_to(target)
    write_atomic(link, b"new", "JUnit file")
    assert link.is_symlink() and target.read_bytes() == b"new"
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(OutputError, match="cannot write the JUnit file .*: it is a directory"):
        write_atomic(tmp_path, b"x", "JUnit file")
    with pytest.raises(OutputError, match="a folder on the path does not exist"):
        write_atomic(tmp_path / "missing" / "r.html", b"x", "HTML report")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.xml", "real.xml"]


def test_refuse_same_files_compares_paths_and_inodes(tmp_path):
    a = tmp_path / "a"
    a.write_text("x")
    os.link(a, tmp_path / "hard")
    refuse_same_files([("--data", a)], [("--out", tmp_path / "b"), ("--junit", tmp_path / "c")])
    refuse_same_files([("--template", "{context} Q: {query}")], [("--junit", "{context} Q: {query}")])  # not a file
    for outputs in ([("--junit", a)], [("--junit", tmp_path / "hard")], [("--junit", tmp_path / "." / "a")]):
        with pytest.raises(InvalidParameter, match="is the same file as --data"):
            refuse_same_files([("--data", a)], outputs)
    with pytest.raises(InvalidParameter, match="--junit .* is the same file as --out"):  # neither exists yet
        refuse_same_files([], [("--out", tmp_path / "new"), ("--junit", tmp_path / "new")])


# ----- targets that are not regular files (issue 46, 4) ---------------------------------------------
def _fifo(where: Path) -> Path:
    os.mkfifo(where)
    return where


def _char_device(where: Path, minor: int, skip: bool = True) -> Path | None:
    """A character device node of our own in tmp_path (1:3 is null, 1:7 full): what a bug replaces is
    then ours, never the machine's /dev/null. Needs root (CAP_MKNOD): else the test is skipped, or
    (``skip`` False) None."""
    try:
        os.mknod(where, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        if skip:
            pytest.skip("cannot make a device node here (not root)")
        return None
    return where


def _is_fifo(p: Path) -> bool:
    return stat.S_ISFIFO(os.lstat(p).st_mode)


def _is_chr(p: Path) -> bool:
    return stat.S_ISCHR(os.stat(p).st_mode)


@pytest.mark.parametrize("flag", ["--html", "--junit"])
@pytest.mark.parametrize("through_link", [False, True])
def test_report_refuses_a_fifo_output(run_log, tmp_path, flag, through_link):
    """The issue's reproducer: ``--html``/``--junit`` onto a FIFO replaced it with a regular file, exit 0."""
    fifo = _fifo(tmp_path / "pipe")
    target = fifo
    if through_link:
        target = tmp_path / "link.out"
        target.symlink_to(fifo)
    err = check_refused(invoke(["report", str(run_log), flag, str(target)]), f"{flag} {target} is a FIFO (named pipe)")
    assert "through a symbolic link" in err if through_link else "through" not in err
    assert _is_fifo(fifo) and (not through_link or target.is_symlink())
    names = ["data.jsonl", "run.jsonl", "pipe"] + ["link.out"] * through_link
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def test_score_refuses_a_fifo_junit_before_any_work(fake, data, tmp_path):
    fifo = _fifo(tmp_path / "pipe")
    completions = fake.completions
    check_refused(invoke(_score(fake, data, "--junit", str(fifo))), f"--junit {fifo} is a FIFO")
    assert _is_fifo(fifo) and fake.completions == completions  # refused before anything was sent


def test_a_socket_output_is_refused(run_log, tmp_path):
    import socket

    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        check_refused(invoke(["report", str(run_log), "--junit", str(path)]), f"--junit {path} is a socket")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)


@pytest.mark.parametrize("command", ["score", "audit"])
def test_a_log_on_a_fifo_or_a_device_is_refused(fake, data, tmp_path, command):
    """``--out`` onto a FIFO blocked forever opening it (no reader) and left ``pipe.lock``; a log is
    appended to and read back, so a character device is refused too. In a subprocess: a hang is a
    failure, not a stuck suite."""
    fifo, null = _fifo(tmp_path / "pipe"), _char_device(tmp_path / "null", 3, skip=False)
    for target in (fifo, null) if null is not None else (fifo,):
        if command == "score":
            args = _score(fake, data, "--out", str(target))
        else:
            args = ["audit", "--data", str(data), "--out", str(target), "--trials", "4"]
        try:
            r = subprocess.run([sys.executable, "-m", "ctxlite", *args], capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"--out {target}: blocked")
        check_refused(r, f"--out {target} is a ")
        assert b"not a regular file" in r.stderr
    assert _is_fifo(fifo) and (null is None or _is_chr(null))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["data.jsonl", "pipe"] + ["null"] * (null is not None))


def test_a_record_log_refuses_a_fifo_in_the_library(tmp_path):
    from ctxlite.records import RecordLog

    fifo = _fifo(tmp_path / "pipe")
    with pytest.raises(InvalidParameter, match="the result log .*pipe is a FIFO"):
        RecordLog(fifo, {"settings": {}})
    assert _is_fifo(fifo) and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


@pytest.mark.parametrize("flag", ["--html", "--junit"])
def test_a_character_device_is_written_in_place(run_log, tmp_path, flag):
    """A device node of our own: null takes the report and stays a device; full is ENOSPC, exit 7 in
    one line, and stays a device (a rename put a regular file in its place, exit 0)."""
    null, full = _char_device(tmp_path / "null", 3), _char_device(tmp_path / "full", 7)
    r = invoke(["report", str(run_log), flag, str(null)])
    assert r.returncode == 0, r.stderr
    r = invoke(["report", str(run_log), flag, str(full)])
    err = r.stderr.decode()
    assert r.returncode == 7 and err.count("ctxlite: error:") == 1 and "Traceback" not in err, err
    assert f"{full}: no space left on the device" in err
    assert _is_chr(null) and _is_chr(full)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl", "full", "null", "run.jsonl"]


def test_dev_null_and_dev_full_stay_devices(run_log):
    """The issue's case on the machine's own devices (as root, CI replaced them)."""
    null, full = Path("/dev/null"), Path("/dev/full")
    assert _is_chr(null) and _is_chr(full)
    r = invoke(["report", str(run_log), "--html", str(null), "--junit", str(null)])  # both onto one device
    assert r.returncode == 0, r.stderr
    r = invoke(["report", str(run_log), "--html", str(full)])
    assert r.returncode == 7 and b"/dev/full: no space left on the device" in r.stderr, r.stderr
    assert _is_chr(null) and _is_chr(full)


def test_write_atomic_through_a_link_replaces_the_target_in_its_own_folder(tmp_path):
    """The documented choice for a symbolic link to a regular file: the file it points to is replaced
    whole (the temporary file made beside it, so the rename stays on one file system), the link stays."""
    elsewhere = tmp_path / "real"
    elsewhere.mkdir()
    target = elsewhere / "r.html"
    target.write_bytes(b"old")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    write_atomic(link, b"new", "HTML report")
    assert link.is_symlink() and target.read_bytes() == b"new" and os.listdir(elsewhere) == ["r.html"]


def _loop(tmp_path: Path) -> Path:
    a, b = tmp_path / "loop-a", tmp_path / "loop-b"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


@pytest.mark.parametrize("flag", ["--html", "--junit"])
def test_an_output_on_a_loop_of_links_is_refused_and_the_links_stay(run_log, tmp_path, flag):
    """A review's case: ``--html`` onto a loop of symbolic links took ELOOP for "nothing there yet"
    and replaced the link with a regular file, exit 0."""
    loop = _loop(tmp_path)
    check_refused(invoke(["report", str(run_log), flag, str(loop)]), f"{flag} {loop} is a loop of symbolic links")
    assert loop.is_symlink() and (tmp_path / "loop-b").is_symlink()


@pytest.mark.parametrize("command", ["score", "audit"])
def test_a_log_on_a_loop_of_links_is_one_line_and_no_traceback(fake, data, tmp_path, command):
    """A review's case: ``--out`` onto a loop ended in a RuntimeError traceback from the lock
    (Path.resolve), and a second one from the lock's __del__."""
    loop = _loop(tmp_path)
    if command == "score":
        args = _score(fake, data, "--out", str(loop))
    else:
        args = ["audit", "--data", str(data), "--out", str(loop), "--trials", "4"]
    r = subprocess.run([sys.executable, "-m", "ctxlite", *args], capture_output=True, timeout=120)
    check_refused(r, f"--out {loop} is a loop of symbolic links")
    assert b"Exception ignored" not in r.stderr and loop.is_symlink()
