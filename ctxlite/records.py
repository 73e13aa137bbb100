"""JSONL in and out: validated input records and an append-only, resumable result log.

Input: every problem names the file and line (``DataError``): not UTF-8, empty
file, malformed JSON, a line that is not an object, a missing or empty field.

Output: ``RecordLog`` writes one JSON object per line and flushes + fsyncs each
one, so Ctrl-C or a crash loses at most the record in flight. The first line is
a header ``{"type": kind, "identity": ...}``; re-opening the same file with the
same identity resumes (finished records are reused only for the input hash
they were computed for), with another identity it is refused rather than
silently mixing two runs. A torn last line is dropped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

from ctxlite.errors import DataError, InvalidParameter, OutputError, output_error
from ctxlite.identity import differences, normalise


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


@dataclass
class RunLog:
    """A result log as written: its kind and identity, the finished records by key, and the
    ``end`` summary of a run that finished (None: a partial run, interrupted or still going)."""

    path: Path
    kind: str
    identity: dict
    records: dict[str, dict]
    end: dict | None
    torn_at: int | None = None  # byte offset of a torn last line (an interrupted write)
    first_end: dict | None = None  # the first end line ever written (a re-report appends later ones)

    @property
    def complete(self) -> bool:
        return self.end is not None


def read_run_log(path: str | os.PathLike, kind: str | None = None, advice: str = "") -> RunLog:
    """Parse a result log without writing to it; ``kind`` (if given) must match its header
    (``advice`` ends the refusal's message).

    A torn last line is ignored; a record after the ``end`` line means the run was
    resumed and has not finished again, so the log is partial.
    """
    path = Path(path)
    text = read_text(path, "result log")
    lines = text.split("\n")
    complete, torn = lines[:-1], lines[-1]
    try:
        header = json.loads(complete[0]) if complete else None
    except json.JSONDecodeError:
        header = None
    if (
        not isinstance(header, dict)
        or not isinstance(header.get("type"), str)
        or (kind is not None and header["type"] != kind)
        or not isinstance(header.get("identity"), dict)
    ):
        what = f"ctxlite {kind} log" if kind else "ctxlite result log (score or audit)"
        raise DataError(f"{path} is not a {what}{advice}")
    records: dict[str, dict] = {}
    end = first_end = None
    for number, raw in enumerate(complete[1:], start=2):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError:
            rec = None
        if isinstance(rec, dict) and set(rec) == {"end"} and isinstance(rec["end"], dict):
            end = rec["end"]
            first_end = end if first_end is None else first_end
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
            raise DataError(f"{path}:{number}: corrupt record in the result log")
        records[rec["key"]] = rec  # a later record of a key supersedes an earlier one
        end = None
    torn_at = len(text[: len(text) - len(torn)].encode("utf-8")) if torn.strip() else None
    return RunLog(path, header["type"], header["identity"], records, end, torn_at, first_end)


class RecordLog:
    """Append-only JSONL result log that a re-run resumes, bound to one run identity.

    The header ``{"type": kind, "identity": {...}}`` holds everything that
    determines the results (see :mod:`ctxlite.identity`); re-opening the file
    with another identity is refused, naming the dotted paths that differ.
    A record stored with an ``input`` hash is returned by :meth:`get` only for
    that same hash. Reading needs no write access: the file is opened for
    appending at the first :meth:`append`, and new logs are created owner-only
    (mode 0600) because they hold the private text.

    >>> log = RecordLog("runs/x.jsonl", {"settings": {"ngram": 8}})   # doctest: +SKIP
    >>> if log.get("ex-1", input_hash) is None: log.append("ex-1", {...}, input_hash)
    """

    def __init__(self, path: str | os.PathLike, identity: dict, kind: str = "run"):
        self.path = Path(path)
        self.kind = kind
        self.identity = normalise(identity)
        self.records: dict[str, dict] = {}
        self.end: dict | None = None  # the finished run's summary (see finish)
        self.first_end: dict | None = None  # the first summary this log was finished with
        self.appended = 0  # records this session wrote
        self._file = None
        self._keep_bytes: int | None = None  # a torn last line to cut before the first append
        try:
            if self.path.is_dir():
                raise OutputError(f"cannot write the result log {self.path}: it is a directory")
            exists = self.path.exists() and self.path.stat().st_size > 0
        except OSError as exc:
            if isinstance(exc, OutputError):
                raise
            raise output_error(self.path, exc, "result log") from None
        if exists:
            self._load()
        else:
            self._write_header()

    @staticmethod
    def check_existing(path: str | os.PathLike, identity: dict, kind: str = "run", ignore=()) -> None:
        """Refuse now (``DataError``) if ``path`` is a log of another run, comparing all but the ``ignore``d paths.

        For a check before expensive work whose result still changes a part of
        the identity (a template search choosing the template index).
        """
        p = Path(path)
        if not (p.is_file() and p.stat().st_size > 0):
            return
        first = read_text(p, "result log").split("\n", 1)[0]
        try:
            header = json.loads(first)
        except json.JSONDecodeError:
            header = None
        if not isinstance(header, dict) or header.get("type") != kind or not isinstance(header.get("identity"), dict):
            raise DataError(f"{p} exists and is not a ctxlite {kind} log: choose another --out")
        _refuse_differences(p, header["identity"], normalise(identity), ignore)

    def _write_header(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps({"type": self.kind, "identity": self.identity}, allow_nan=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise output_error(self.path, exc, "result log") from None

    def _load(self) -> None:
        run = read_run_log(self.path, self.kind, advice=": choose another --out")
        _refuse_differences(self.path, run.identity, self.identity)
        self.records, self.end, self.first_end = run.records, run.end, run.first_end
        if run.torn_at is not None:  # an interrupted write: cut the partial line now if we may, else before appending
            self._keep_bytes = run.torn_at
            try:
                self._open_for_append()
            except OutputError:
                pass  # read-only: reading works, a later append says why it cannot write

    def _open_for_append(self):
        if self._file is None:
            try:
                f = open(self.path, "r+b")
                if self._keep_bytes is not None:
                    f.truncate(self._keep_bytes)
                    os.fsync(f.fileno())
                    self._keep_bytes = None
                f.seek(0, os.SEEK_END)
            except OSError as exc:
                raise output_error(self.path, exc, "result log") from None
            self._file = f
        return self._file

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
        line = (json.dumps(obj, allow_nan=False) + "\n").encode("utf-8")
        f = self._open_for_append()
        try:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        except OSError as exc:
            raise output_error(self.path, exc, "result log") from None

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
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
