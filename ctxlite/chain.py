"""The hash chain of a result log: every line carries a SHA-256 chained to the line before it.

Line 0 (the header) carries h_0 = SHA-256(``GENESIS`` "\\n" canonical(header)), line i carries
h_i = SHA-256(h_{i-1} "\\n" canonical(line i)), where canonical is
:func:`ctxlite.identity.canonical_json` of the line's object without its own ``chain`` field. The
last line's hash, the *head*, therefore names the whole log: changing, removing, reordering or
inserting any line changes every hash after it, and finding another log with the same head means
finding a SHA-256 collision.

A chain is not a signature: anyone who can write the file can recompute every hash after an edit.
It detects edits made without recomputing the chain, and, checked against a head kept elsewhere
(``ctxlite verify LOG --head HASH``, the head a CI job kept from the run's verdict), a rewrite of
the whole file. It cannot tell who wrote a log, nor whether the first head kept was honest.

>>> h0 = link(None, {"type": "score-run", "identity": {}})
>>> h0.startswith("sha256:") and link(h0, {"key": "a"}) != link(h0, {"key": "b"})
True
"""

from __future__ import annotations

import hashlib
import re

from ctxlite.errors import InvalidParameter
from ctxlite.identity import canonical_json

FIELD = "chain"
"""The key under which each line of a log holds its hash."""

GENESIS = "ctxlite-log-chain/1"
"""What the header's hash is chained to (names the chain's version)."""

HEAD = re.compile(r"sha256:[0-9a-f]{64}")
"""The form of every chain hash, and so of a head: ``sha256:`` and 64 lowercase hex digits."""


def check_head(head: str, name: str = "--head") -> str:
    """``head`` if it has the form of a chain hash (:data:`HEAD`), else ``InvalidParameter`` (exit 2)
    about the argument ``name``: a head that could never match is a mistyped argument, not a log
    that was rewritten."""
    if not isinstance(head, str) or not HEAD.fullmatch(head):
        raise InvalidParameter(
            f"{name} {head!r} is not a chain head: give it as ctxlite printed it, 'sha256:' and 64 lowercase "
            "hex digits (the verdict line's log head, the JSON's log_head or the JUnit property log.head)"
        )
    return head


def link(previous: str | None, body: dict) -> str:
    """``sha256:<hex>`` of the line ``body`` (without its own hash) chained to ``previous`` (None: the header)."""
    text = f"{GENESIS if previous is None else previous}\n{canonical_json(body)}"
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def seal(previous: str | None, body: dict) -> dict:
    """``body`` with its chain hash added under :data:`FIELD` (``body`` must not hold that key)."""
    if FIELD in body:
        raise ValueError(f"a log line may not hold its own {FIELD!r} field")
    return {**body, FIELD: link(previous, body)}


def unseal(line: dict) -> tuple[dict, str | None]:
    """A line's body and the hash it claims (None: the line has none)."""
    body = {k: v for k, v in line.items() if k != FIELD}
    claimed = line.get(FIELD)
    return body, claimed if isinstance(claimed, str) else None
