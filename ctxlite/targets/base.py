"""The :class:`Target` Protocol: what an audit needs of a system it can only query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ctxlite.errors import InvalidParameter


@runtime_checkable
class Target(Protocol):
    """A system audited through its queries only.

    ``load(records)`` replaces the record set the system answers from (its store, its prompt's
    private records) with ``records``; ``ask(query, seed)`` asks one question and returns the
    text answered, ``seed`` being the system's sampling seed where it takes one (so a replayed
    trial asks the same); ``identity()`` is a JSON object naming the system audited: at least its
    ``kind``, and its URL or command and target file hash where it has them."""

    def load(self, records: Sequence[dict]) -> None: ...

    def ask(self, query: str, seed: int) -> str: ...

    def identity(self) -> dict: ...


def check_target(target) -> None:
    """Refuse (``InvalidParameter``) an object that lacks ``load`` or ``ask``."""
    missing = [name for name in ("load", "ask") if not callable(getattr(target, name, None))]
    if missing:
        raise InvalidParameter(
            f"the audit target {type(target).__name__} has no {' or '.join(missing)} method: a target needs "
            "load(records) and ask(query, seed) -> str"
        )


def target_identity(target) -> dict:
    """``target.identity()``, or for a Python object without one its class's qualified name."""
    ident = getattr(target, "identity", None)
    if callable(ident):
        value = ident()
        if not isinstance(value, dict) or "kind" not in value:
            raise InvalidParameter(f"{type(target).__name__}.identity() must return a dict with a 'kind'")
        return value
    cls = type(target)
    return {"kind": "python", "object": f"{cls.__module__}.{cls.__qualname__}"}
