"""Helpers for tests that edit a result log as an attacker would: by hand, or re-chaining it after."""

from __future__ import annotations

import json
from pathlib import Path


def rechain(text: str) -> str:
    """``text`` (a log's lines) with every line's chain hash recomputed: an edit that hides from the chain."""
    from ctxlite.chain import link, unseal

    out, head = [], None
    for raw in text.split("\n"):
        if not raw.strip():
            out.append(raw)
            continue
        body, _ = unseal(json.loads(raw))
        head = link(head, body)
        out.append(json.dumps({**body, "chain": head}))
    return "\n".join(out)


def edit_log(path: Path, edit, chain: bool = True) -> None:
    """Apply ``edit(list of line objects) -> list`` to the log at ``path``; re-chain it if ``chain``."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    text = "\n".join(json.dumps(obj) for obj in edit(lines)) + "\n"
    path.write_text(rechain(text) if chain else text, encoding="utf-8")
