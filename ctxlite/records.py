"""JSONL in and out: validated input records and an append-only, resumable result log.

Input: every problem names the file and line (``DataError``): not UTF-8, empty
file, malformed JSON, a line that is not an object, a missing or empty field.

Output: ``RecordLog`` writes one JSON object per line, unbuffered, and fsyncs each
one, so Ctrl-C or a crash loses at most the record in flight; a line that does not fit (a full
disk) is cut again and raises ``OutputError`` (exit 7), leaving the finished records a partial log. The first line is
a header ``{"type": kind, "identity": ...}``; re-opening the same file with the
same identity resumes (finished records are reused only for the input hash
they were computed for), with another identity it is refused rather than
silently mixing two runs. A torn last line is dropped. Every line carries its
hash in the log's chain (:mod:`ctxlite.chain`), and a log is written by one
process at a time (:mod:`ctxlite.lock`).

Reading (:func:`read_run_log`) checks the chain line by line and refuses
(``DataError``, naming the line) a broken chain or a duplicate record. The header
names the log's format (``schema_version``, :mod:`ctxlite.logformat`); a log of an
older format (written before logs were chained, or before formats were versioned)
is read (``RunLog.chained`` False, ``RunLog.schema_version`` None) but never resumed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

from ctxlite.chain import FIELD as CHAIN_FIELD
from ctxlite.chain import link, seal, unseal
from ctxlite.errors import DataError, InvalidParameter, OutputError, output_error
from ctxlite.identity import differences, normalise
from ctxlite.lock import LogLock
from ctxlite.logformat import NOT_RESUMABLE, UNCHAINED, version_of
from ctxlite.outputs import check_output_kind


@dataclass(frozen=True)
class Line:
    """One parsed input record and where it came from."""

    number: int
    data: dict


def read_text(path: str | os.PathLike, what: str = "file") -> str:
    """Read a UTF-8 text file (a leading BOM is dropped); a clear ``DataError`` if missing or not UTF-8."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{what} not found: {p}") from None
    except IsADirectoryError:
        raise DataError(f"{what} is a directory, not a file: {p}") from None
    except OSError as exc:
        raise DataError(f"cannot read the {what} {p}: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")  # a byte-order mark is not content
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{p}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None


def read_table(path: str | os.PathLike, what: str = "file") -> tuple[dict, str]:
    """A configuration table from a ``.json`` file or TOML (any other name), and its text."""
    text = read_text(path, what)
    is_json = Path(path).suffix.lower() == ".json"
    try:
        data = json.loads(text) if is_json else tomllib.loads(text)
    except ValueError as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError both are
        raise InvalidParameter(f"{what} {path} is not valid {'JSON' if is_json else 'TOML'}: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidParameter(f"{what} {path}: expected a table of keys, got {type(data).__name__}")
    return data, text


def read_jsonl(path: str | os.PathLike, required: Iterable[str] = (), strings: Iterable[str] = ()) -> list[Line]:
    """Parse a JSONL file; each object must have non-empty ``required`` fields;
    fields in ``strings`` (when present) must be strings. Blank lines are skipped."""
    text = read_text(path, "data file")
    required, strings = tuple(required), tuple(strings)
    lines: list[Line] = []
    # split on "\n" only: U+2028 etc. inside JSON strings are data, not line breaks
    for number, raw in enumerate(text.split("\n"), start=1):
        raw = raw.removesuffix("\r")
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: malformed JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(data, dict):
            raise DataError(f"{path}:{number}: expected a JSON object, got {type(data).__name__}")
        for key in required:
            value = data.get(key)
            if value is None or (isinstance(value, str) and not value.strip()):
                raise DataError(f"{path}:{number}: field {key!r} is missing or empty")
        bad = _unencodable_field(data)
        if bad is not None:
            raise DataError(
                f"{path}:{number}: field {bad!r} holds an unpaired surrogate escape (like \\ud800): "
                "not valid Unicode text"
            )
        for key in strings:
            if key in data and data[key] is not None and not isinstance(data[key], str):
                raise DataError(f"{path}:{number}: field {key!r} must be a string, got {type(data[key]).__name__}")
        lines.append(Line(number, data))
    if not lines:
        raise DataError(f"{path}: no records (the file is empty)")
    return lines


def unencodable(text: str) -> bool:
    """True if ``text`` cannot be written as UTF-8 (it holds a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _unencodable_field(data: dict) -> str | None:
    """The first field whose value (at any depth) holds a string that is not valid Unicode."""

    def bad(v) -> bool:
        if isinstance(v, str):
            return unencodable(v)
        if isinstance(v, dict):
            return any(bad(k) or bad(x) for k, x in v.items())
        if isinstance(v, list):
            return any(bad(x) for x in v)
        return False

    return next((k for k, v in data.items() if bad(k) or bad(v)), None)


def _refuse_differences(path: Path, logged: dict, current: dict, ignore=()) -> None:
    diff = [d for d in differences(logged, current) if not any(d == i or d.startswith(i + ".") for i in ignore)]
    if diff:
        shown = ", ".join(diff[:6]) + (f" and {len(diff) - 6} more" if len(diff) > 6 else "")
        raise DataError(
            f"{path} was written by a different run ({shown} differ): re-run with the same input, "
            "model and settings to resume, or choose another --out"
        )


def _refuse_other_format(path: Path, run: RunLog, version: int) -> None:
    """A log is written to only in the format ``version`` the run writes: never one of an older,
    unversioned format (:mod:`ctxlite.logformat`), nor one of another format."""
    if not run.chained:
        raise DataError(f"{path} {UNCHAINED}: choose another --out")
    if run.schema_version is None:
        raise DataError(f"{path} {NOT_RESUMABLE}: choose another --out")
    if run.schema_version != version:
        raise DataError(
            f"{path} is a log of format {run.schema_version}, this run writes format {version}: choose another --out"
        )


@dataclass
class RunLog:
    """A result log as written: its kind and identity, the finished records by key, and the
    ``end`` summary of a run that finished (None: a partial run, interrupted or still going).

    ``chained``: the log carries a hash chain, checked as it was read (False: a log written before
    chains); ``head``: the hash of its last complete line; ``line_of``: the line number of each
    record in force (1-based, the header is line 1) and, under ``END``, of the end line in force."""

    path: Path
    kind: str
    identity: dict
    records: dict[str, dict]
    end: dict | None
    torn_at: int | None = None  # byte offset of a torn last line (an interrupted write)
    first_end: dict | None = None  # the first end line ever written (a re-report appends later ones)
    chained: bool = True
    head: str | None = None
    line_of: dict[str, int] = field(default_factory=dict)
    lines: int = 0  # complete lines read, the header included
    schema_version: int | None = 1  # ctxlite.logformat.FORMATS; None: written before log formats were versioned

    END = "(end)"

    @property
    def complete(self) -> bool:
        return self.end is not None

    def where(self, key: str = END) -> str:
        """``path:line`` of the record ``key`` (default: the end line in force), for a message."""
        return f"{self.path}:{self.line_of.get(key, '?')}"


def _header(first: str | None) -> dict | None:
    try:
        header = json.loads(first) if first is not None else None
    except json.JSONDecodeError:
        return None
    return header if isinstance(header, dict) else None


def read_run_log(path: str | os.PathLike, kind: str | None = None, advice: str = "") -> RunLog:
    """Parse a result log without writing to it; ``kind`` (if given) must match its header
    (``advice`` ends the refusal's message).

    A torn last line is ignored; a record after the ``end`` line means the run was
    resumed and has not finished again, so the log is partial. The chain is checked line by line:
    a line whose hash does not follow from the line before it (edited, inserted, moved, or a line
    before it removed) is refused, naming it; so is a second record of a key already held for the
    same input (a record recomputed for a changed input supersedes the earlier one).
    """
    path = Path(path)
    text = read_text(path, "result log")
    lines = text.split("\n")
    complete, torn = lines[:-1], lines[-1]
    header = _header(complete[0] if complete else None)
    if (
        header is None
        or not isinstance(header.get("type"), str)
        or (kind is not None and header["type"] != kind)
        or not isinstance(header.get("identity"), dict)
    ):
        what = f"ctxlite {kind} log" if kind else "ctxlite result log (score or audit)"
        raise DataError(f"{path} is not a {what}{advice}")
    version = version_of(path, header)
    body, head = unseal(header)
    chained = CHAIN_FIELD in header
    if chained and head != link(None, body):
        raise DataError(f"{path}:1: the hash chain breaks at the header: it was edited (its hash does not match it)")
    records: dict[str, dict] = {}
    line_of: dict[str, int] = {}
    end = first_end = None
    for number, raw in enumerate(complete[1:], start=2):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError:
            rec = None
        if not isinstance(rec, dict):
            raise DataError(f"{path}:{number}: corrupt record in the result log")
        body, claimed = unseal(rec)
        is_end = set(body) == {"end"} and isinstance(body["end"], dict)
        if chained:
            if claimed is None or claimed != link(head, body):
                what = "the end line" if is_end else f"record {body.get('key')!r}"
                raise DataError(
                    f"{path}:{number}: the hash chain breaks at {what}: it was edited, inserted or moved, "
                    "or a line before it was removed (ctxlite verify checks a log)"
                )
            head = claimed
        elif CHAIN_FIELD in rec:
            raise DataError(f"{path}:{number}: a chained line in a log whose header has no chain")
        if is_end:
            end = body["end"]
            first_end = end if first_end is None else first_end
            line_of[RunLog.END] = number
            continue
        key = body.get("key")
        if not isinstance(key, str):
            raise DataError(f"{path}:{number}: corrupt record in the result log")
        held = records.get(key)
        if held is not None and (held.get("input") is None or held.get("input") == body.get("input")):
            raise DataError(
                f"{path}:{number}: duplicate record {key!r} (already at line {line_of[key]}): a log holds "
                "each result once"
            )
        records[key] = body  # a record recomputed for another input supersedes the earlier one
        line_of[key] = number
        end = None
    torn_at = len(text[: len(text) - len(torn)].encode("utf-8")) if torn.strip() else None
    return RunLog(
        path,
        header["type"],
        header["identity"],
        records,
        end,
        torn_at,
        first_end,
        chained,
        head if chained else None,
        line_of,
        len(complete),
        version,
    )


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class RecordLog:
    """Append-only JSONL result log that a re-run resumes, bound to one run identity.

    The header ``{"type": kind, "identity": {...}}`` holds everything that
    determines the results (see :mod:`ctxlite.identity`); re-opening the file
    with another identity is refused, naming the dotted paths that differ.
    A record stored with an ``input`` hash is returned by :meth:`get` only for
    that same hash. Reading needs no write access: the file is opened for
    appending at the first :meth:`append`, and new logs are created owner-only
    (mode 0600) because they hold the private text. Each line written carries
    its chain hash (``head`` is the last one). The log's write lock
    (:class:`ctxlite.lock.LogLock`) is held from opening to :meth:`close`:
    ``lock`` passes one the caller already holds (a command that locks its
    ``--out`` before any other work), else the log takes its own.

    >>> log = RecordLog("runs/x.jsonl", {"settings": {"ngram": 8}})   # doctest: +SKIP
    >>> if log.get("ex-1", input_hash) is None: log.append("ex-1", {...}, input_hash)
    """

    def __init__(
        self,
        path: str | os.PathLike,
        identity: dict,
        kind: str = "run",
        lock: LogLock | None = None,
        schema_version: int = 1,
        continues: tuple[int, ...] = (),
    ):
        self.path = Path(path)
        self.kind = kind
        self.schema_version = schema_version  # the format written (ctxlite.logformat.format_of_run)
        self.continues = continues  # other formats with the same records: a log of one is continued in it
        self.identity = normalise(identity)
        self.records: dict[str, dict] = {}
        self.end: dict | None = None  # the finished run's summary (see finish)
        self.first_end: dict | None = None  # the first summary this log was finished with
        self.appended = 0  # records this session wrote
        self.head: str | None = None  # the chain hash of the log's last line
        self._fd: int | None = None  # the log opened for appending (unbuffered)
        self._keep_bytes: int | None = None  # a torn last line to cut before the first append
        try:
            if self.path.is_dir():
                raise OutputError(f"cannot write the result log {self.path}: it is a directory")
        except OSError as exc:
            if isinstance(exc, OutputError):
                raise
            raise output_error(self.path, exc, "result log") from None
        check_output_kind(self.path, "the result log")  # a FIFO or /dev/null: refused before it is locked
        self._own_lock = None if lock is not None else LogLock(self.path).acquire()
        try:
            try:
                exists = self.path.exists() and self.path.stat().st_size > 0
            except OSError as exc:
                raise output_error(self.path, exc, "result log") from None
            if exists:
                self._load()
            else:
                self._write_header()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def check_existing(
        path: str | os.PathLike, identity: dict, kind: str = "run", ignore=(), schema_version: int = 1
    ) -> None:
        """Refuse now (``DataError``) if ``path`` is a log of another run (comparing all but the ``ignore``d
        paths of the identity), a broken log, or one without a chain.

        For a check before expensive work whose result still changes a part of
        the identity (a template search choosing the template index).
        """
        p = Path(path)
        if not (p.is_file() and p.stat().st_size > 0):
            return
        run = read_run_log(p, kind, advice=": choose another --out")  # the chain too, before any model work
        _refuse_differences(p, run.identity, normalise(identity), ignore)
        _refuse_other_format(p, run, schema_version)

    def _write_header(self) -> None:
        header = {"type": self.kind, "schema_version": self.schema_version, "identity": self.identity}
        header = seal(None, header)
        line = (json.dumps(header, allow_nan=False) + "\n").encode("utf-8")
        existed = os.path.lexists(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            raise output_error(self.path, exc, "result log") from None
        try:
            _write_all(fd, line)
            os.fsync(fd)
        except OSError as exc:  # a full disk: leave no torn header, which a re-run would refuse as no log
            try:
                os.ftruncate(fd, 0)
                if not existed:
                    os.unlink(self.path)
            except OSError:
                pass
            raise output_error(self.path, exc, "result log") from None
        finally:
            os.close(fd)
        self.head = header[CHAIN_FIELD]

    def _load(self) -> None:
        run = read_run_log(self.path, self.kind, advice=": choose another --out")
        _refuse_differences(self.path, run.identity, self.identity)
        if run.schema_version in self.continues:
            self.schema_version = run.schema_version
        _refuse_other_format(self.path, run, self.schema_version)
        self.records, self.end, self.first_end, self.head = run.records, run.end, run.first_end, run.head
        if run.torn_at is not None:  # an interrupted write: cut the partial line now if we may, else before appending
            self._keep_bytes = run.torn_at
            try:
                self._open_for_append()
            except OutputError:
                pass  # read-only: reading works, a later append says why it cannot write

    def _open_for_append(self) -> int:
        """The log's descriptor for appending (opened at the first call; a torn last line cut first).
        Written unbuffered, so a failed write leaves nothing behind to be flushed again at close."""
        if self._fd is None:
            try:
                fd = os.open(self.path, os.O_RDWR)
            except OSError as exc:
                raise output_error(self.path, exc, "result log") from None
            try:
                if self._keep_bytes is not None:
                    os.ftruncate(fd, self._keep_bytes)
                    os.fsync(fd)
                    self._keep_bytes = None
            except OSError as exc:
                os.close(fd)
                raise output_error(self.path, exc, "result log") from None
            self._fd = fd
        return self._fd

    def done(self, key: str) -> bool:
        return key in self.records

    def get(self, key: str, input_hash: str | None = None) -> dict | None:
        """The finished record of ``key``, or None; with ``input_hash``, only if it was computed for that input."""
        rec = self.records.get(key)
        if rec is None or (input_hash is not None and rec.get("input") != input_hash):
            return None
        return rec

    def append(self, key: str, record: dict, input_hash: str | None = None) -> None:
        """Write one finished record durably (flush + fsync); ``input_hash`` binds it to its input."""
        record = {"key": key, **({"input": input_hash} if input_hash is not None else {}), **record}
        self._write_line(record)
        self.records[key] = record
        self.appended += 1
        self.end = None  # a record after the end line reopens the run

    def _write_line(self, obj: dict) -> None:
        sealed = seal(self.head, json.loads(json.dumps(obj, allow_nan=False)))  # hashed as it reads back
        line = (json.dumps(sealed, allow_nan=False) + "\n").encode("utf-8")
        fd = self._open_for_append()
        at = None
        try:
            at = os.lseek(fd, 0, os.SEEK_END)
            _write_all(fd, line)
            os.fsync(fd)
        except OSError as exc:  # a full disk: cut what part of the line was written (a reader drops it anyway)
            if at is not None:
                try:
                    os.ftruncate(fd, at)
                except OSError:
                    pass
            raise output_error(self.path, exc, "result log") from None
        self.head = sealed[CHAIN_FIELD]

    def finish(self, end: dict) -> None:
        """Mark the run finished: one ``{"end": ...}`` line (the run's summary) after its last record.

        A log without one (or with records after it) is a partial run; see :func:`read_run_log`.
        A re-run that added nothing and ends with the same summary writes nothing.
        """
        end = json.loads(json.dumps(end, allow_nan=False))  # as it reads back
        if end != self.end:
            self._write_line({"end": end})
            self.end = end
            self.first_end = end if self.first_end is None else self.first_end

    def __iter__(self) -> Iterator[dict]:
        return iter(self.records.values())

    def __len__(self) -> int:
        return len(self.records)

    def close(self) -> None:
        """Close the file and release the write lock the log took itself (a passed-in one stays held)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)  # nothing is buffered: every line was written and fsynced as it came
            except OSError:
                pass
        if self._own_lock is not None:
            self._own_lock.release()
            self._own_lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def logged(log: RecordLog | None, key: str, play: Callable[[], dict]) -> dict:
    """The record of ``key`` from ``log`` (a resumed run's), or ``play()``'s, appended to the log as
    it finishes (no log: just ``play()``)."""
    rec = log.records.get(key) if log is not None else None
    if rec is None:
        rec = play()
        if log is not None:
            log.append(key, rec)
    return rec
