"""``command``: load and ask as commands: the records file's path an argument, the question on
standard input, the answer on standard output."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence

from ctxlite.errors import InvalidParameter, TargetError


def _last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no message)"


class CommandTarget:
    """``load`` writes the records to a JSONL file and runs ``load`` (an argv list; ``{records_file}``
    is replaced by that file's path); ``ask`` runs ``ask`` (``{seed}`` replaced by the seed) with
    the question on standard input and returns its standard output. A command that exits non-zero
    or runs past ``timeout`` seconds is a ``TargetError`` with the last line it wrote to standard
    error. ``cwd``: the folder the commands run in."""

    kind = "command"

    def __init__(
        self,
        load: Sequence[str],
        ask: Sequence[str],
        *,
        timeout: float = 120.0,
        cwd: str | os.PathLike | None = None,
        file_sha256: str | None = None,
    ):
        for name, argv in (("load", load), ("ask", ask)):
            if not argv or not all(isinstance(a, str) for a in argv):
                raise InvalidParameter(f"the {name} command must be a non-empty list of strings")
        if not any("{records_file}" in a for a in load):
            raise InvalidParameter("the load command must take the records file as an argument ({records_file})")
        if not timeout > 0:
            raise InvalidParameter(f"the command target's timeout must be > 0, got {timeout}")
        self.load_argv, self.ask_argv, self.timeout, self.cwd = list(load), list(ask), float(timeout), cwd
        self.file_sha256 = file_sha256
        self._dir = tempfile.TemporaryDirectory(prefix="ctxlite-target-")

    def _run(self, argv: list[str], what: str, stdin: bytes = b"") -> bytes:
        try:
            done = subprocess.run(argv, input=stdin, capture_output=True, timeout=self.timeout, cwd=self.cwd)
        except subprocess.TimeoutExpired:
            raise TargetError(
                f"the target's {what} command {argv[0]} did not finish within {self.timeout:g} s"
            ) from None
        except OSError as exc:
            raise TargetError(f"the target's {what} command {argv[0]} cannot run: {exc.strerror or exc}") from None
        if done.returncode != 0:
            raise TargetError(
                f"the target's {what} command {argv[0]} exited {done.returncode}: {_last_line(done.stderr)}"
            )
        return done.stdout

    def load(self, records: Sequence[dict]) -> None:
        path = os.path.join(self._dir.name, "records.jsonl")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # private records: owner only
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(dict(r), ensure_ascii=False) + "\n" for r in records)
        self._run([a.replace("{records_file}", path) for a in self.load_argv], "load")

    def ask(self, query: str, seed: int) -> str:
        argv = [a.replace("{seed}", str(int(seed))) for a in self.ask_argv]
        out = self._run(argv, "ask", query.encode("utf-8"))
        try:
            return out.decode("utf-8")
        except UnicodeDecodeError:
            raise TargetError(f"the target's ask command {argv[0]} wrote an answer that is not UTF-8") from None

    def identity(self) -> dict:
        ident = {"kind": self.kind, "load": self.load_argv, "ask": self.ask_argv}
        if self.file_sha256 is not None:
            ident["target_file_sha256"] = self.file_sha256
        return ident

    def close(self) -> None:
        self._dir.cleanup()
