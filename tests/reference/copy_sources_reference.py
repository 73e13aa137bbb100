"""The copy sources of a response in a prompt's context, by brute force, for the tests of the
hierarchical search (``ctxlite.influence.regurgitation.copy_sources`` is the fast version)."""

from __future__ import annotations


def copy_source_positions(enc, y: list[int]) -> list[int]:
    """Positions i of ``enc.context`` (0-based in the context) where, in the whole prompt, the token
    before i and the token at i equal a response token's predecessor and that token (the prompt's
    last token precedes the response's first), tried pair by pair."""
    full, p = enc.with_context, len(enc.prefix)
    read = [full[-1], *y]
    return [
        i
        for i in range(len(enc.context))
        if p + i >= 1 and any(full[p + i - 1 : p + i + 1] == read[t : t + 2] for t in range(len(y)))
    ]
