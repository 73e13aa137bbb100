"""ctxlite's exception tree and the process exit codes the CLI maps them to.

The library raises these; only ``ctxlite.cli`` turns them into messages and exit
codes. Every exception carries one human-readable line that names the bad value
(file, line number, parameter) and what to do about it.

Exit codes (documented in docs/errors.md):

====  ===========================================================
0     success
1     unexpected internal error (a bug: please report it)
2     bad command-line usage or parameter (click's own code too), an
      output that is the same file as an input or another output
3     model problem: missing, not a GGUF, truncated, wrong sha256
4     bad input data: empty/malformed JSONL, non-UTF-8, bad fields
5     does not fit: prompt longer than the context window
6     llama.cpp failed to decode (its return code is in the message)
7     a file ctxlite must write cannot be written (permissions, a
      directory, a path under a regular file, a full disk)
8     a gate tripped (--fail-above-influence / --fail-above-epsilon):
      the run finished and every output was written
9     the inference server (--backend openai) failed: unreachable or
      erroring after retries, timed out, or answered malformed JSON, an
      error body, an impossible answer (checked before use) or one too large;
      or the audited target (--target) failed the same ways, or its load or
      ask command failed (TargetError)
10    a gate is inconclusive: the run finished and nothing exceeds
      the budget, but nothing proves it holds either (README's
      verdict table); every output was written
11    the --out log is being written by another running ctxlite
      process (its PID is named); nothing was written
130   interrupted (Ctrl-C); finished records are kept, re-run resumes
====  ===========================================================
"""


class CtxliteError(Exception):
    """Base class of every error ctxlite raises on purpose."""

    exit_code = 1


class InvalidParameter(CtxliteError, ValueError):
    """A parameter is out of its domain (e.g. lambda < 0, epsilon <= 0)."""

    exit_code = 2


class ModelError(CtxliteError):
    """The model file is missing, corrupt, or not the one the registry names."""

    exit_code = 3


class DataError(CtxliteError, ValueError):
    """Input data cannot be used: empty, malformed, not UTF-8, missing fields."""

    exit_code = 4


class ContextOverflow(CtxliteError, ValueError):
    """A prompt does not fit in the model's context window."""

    exit_code = 5


class DecodeError(CtxliteError, RuntimeError):
    """llama.cpp returned a non-zero status from ``llama_decode``."""

    exit_code = 6


class OutputError(CtxliteError, OSError):
    """A file ctxlite must write (a log, the model cache) cannot be written."""

    exit_code = 7


class ServerError(CtxliteError, RuntimeError):
    """The inference server of ``--backend openai`` cannot be used: down after retries (the circuit
    breaker is open), timing out, refusing a request, answering malformed JSON, or an answer that
    fails its checks (``ctxlite.runtime.openai_server.check_logprobs``) or exceeds the size cap."""

    exit_code = 9


class TargetError(ServerError):
    """The audited system (``ctxlite audit --target``, :mod:`ctxlite.targets`) failed: its load or ask
    command exited non-zero or timed out, its HTTP endpoint erred after retries, or its answer is not
    the shape its target file says (not JSON, the answer's JSON path missing or not text). The
    message names the target and carries the target's own message. Exit 9, like a server's."""


class LogInUse(CtxliteError):
    """The result log is being written by another running ctxlite process (:mod:`ctxlite.lock`)."""

    exit_code = 11


def output_error(path, exc: OSError, what: str = "file") -> OutputError:
    """One line for an ``OSError`` met while writing ``path``: what, where (None: ``what`` says it),
    why."""
    import errno

    why = {
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.EROFS: "read-only file system",
        errno.ENOTDIR: "a part of the path is a regular file, not a folder",
        errno.EISDIR: "it is a directory",
        errno.ENOSPC: "no space left on the device",
        errno.EFBIG: "the file would exceed the file-size limit (ulimit -f)",
        errno.ENOENT: "a folder on the path does not exist",
        errno.EPIPE: "the reader closed the pipe",
    }.get(exc.errno, exc.strerror or type(exc).__name__)
    return OutputError(f"cannot write the {what}{'' if path is None else f' {path}'}: {why}")


EXIT_GATE = 8
EXIT_INCONCLUSIVE = 10
EXIT_INTERRUPTED = 130
