"""Run identity: content hashes that tie every logged result to what produced it.

A result is reusable only for the exact input, model and settings that
produced it. Everything that can change a number is written into the log's
header as plain JSON (the *identity*), and every input record is reduced to
a content hash; a resumed run compares both and refuses or recomputes, never
reuses a result silently. Hashes are SHA-256 over a canonical JSON encoding
(sorted keys, UTF-8, no whitespace), so the same content hashes the same on
every machine and Python version.
"""

from __future__ import annotations

import hashlib
import json
import math
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ctxlite._version import __version__


def canonical_json(obj: Any) -> str:
    """The one JSON text of ``obj`` that is hashed (sorted keys, compact, UTF-8, finite numbers)."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def content_hash(obj: Any) -> str:
    """``sha256:<hex>`` of ``canonical_json(obj)``."""
    return "sha256:" + hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def normalise(obj: Any) -> Any:
    """``obj`` as the JSON round trip gives it back (tuples become lists, inf becomes "inf")."""
    if isinstance(obj, float) and obj != obj:
        raise ValueError("NaN has no identity")
    if isinstance(obj, float) and obj in (float("inf"), float("-inf")):
        return "inf" if obj > 0 else "-inf"
    if isinstance(obj, dict):
        return {str(k): normalise(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [normalise(v) for v in obj]
    return obj


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths at which two JSON values differ (``settings.ngram``), sorted."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                out.append(path)
            else:
                out += differences(old[key], new[key], path)
        return out
    return [] if old == new else [prefix or "(whole value)"]


def mismatch(
    stored: Any, recomputed: Any, rel_tol: float = 1e-9, prefix: str = "", newer_keys: bool = False
) -> tuple[str, Any, Any] | None:
    """The first place (dotted path, list items as ``[i]``) where a stored JSON value differs from
    the same value recomputed, with both values; None if they agree. Numbers agree within
    ``rel_tol`` (another machine's floating point may round the last bits differently).
    ``newer_keys``: a key only the recomputed value has is no disagreement (a field this version
    adds that an older log never wrote); every key the log holds must still agree."""
    if isinstance(stored, dict) and isinstance(recomputed, dict):
        for key in sorted(set(stored) | set(recomputed), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if newer_keys and key not in stored:
                continue
            if key not in stored or key not in recomputed:
                return path, stored.get(key), recomputed.get(key)
            found = mismatch(stored[key], recomputed[key], rel_tol, path, newer_keys)
            if found:
                return found
        return None
    if isinstance(stored, list) and isinstance(recomputed, list) and len(stored) == len(recomputed):
        for i, (a, b) in enumerate(zip(stored, recomputed)):
            found = mismatch(a, b, rel_tol, f"{prefix}[{i}]", newer_keys)
            if found:
                return found
        return None
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (stored, recomputed))
    if numbers and math.isclose(stored, recomputed, rel_tol=rel_tol, abs_tol=1e-12):
        return None
    return None if stored == recomputed and type(stored) is type(recomputed) else (prefix, stored, recomputed)


def software() -> dict:
    """The versions whose code computes a result: ctxlite and llama-cpp-python (it pins llama.cpp)."""
    try:
        llama = version("llama-cpp-python")
    except PackageNotFoundError:  # pragma: no cover - not installed: the privacy maths alone
        llama = None
    return {"ctxlite": __version__, "llama_cpp_python": llama}


def bundled_data_hash(*names: str) -> str:
    """Content hash of package data files (``ctxlite/data/...``) that shape a result."""
    root = resources.files("ctxlite").joinpath("data")
    parts = {}
    for name in names:
        node = root
        for piece in name.split("/"):
            node = node.joinpath(piece)
        parts[name] = node.read_text(encoding="utf-8")
    return content_hash(parts)
