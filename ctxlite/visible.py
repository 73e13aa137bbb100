"""Private text as a person may safely read it: no character in it can act instead of showing.

A context, a response or an example id is untrusted text. Shown raw, a C0 control (NUL, ESC)
can drive a terminal or end a string, and a bidirectional control (U+202E RIGHT-TO-LEFT
OVERRIDE, U+2066 LEFT-TO-RIGHT ISOLATE, U+202C POP DIRECTIONAL FORMATTING, ...) reorders the
characters after it, so a page or a table displays another text than the one scored (the
"Trojan Source" attack, CVE-2021-42574). :func:`visible` replaces each of them by a visible
stand-in: a C0 control by its Unicode control picture (NUL as ␀, ESC as ␛), DEL as ␡, and a
C1 control, a bidi control or a line/paragraph separator by its code point in angle
brackets (``⟨U+202E⟩``). Every place a person reads text goes through it: the terminal table
and its id column, stderr verdict and headline lines, the HTML report and JUnit names.
"""

from __future__ import annotations

import unicodedata

BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Unicode's Bidi_Control characters (UAX #9): marks, embeddings, overrides and isolates."""
SEPARATORS = frozenset("\u2028\u2029")
"""LINE SEPARATOR and PARAGRAPH SEPARATOR: line breaks that most terminals do not show as one."""


def _stand_in(c: str) -> str:
    code = ord(c)
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "␡"
    return f"⟨U+{code:04X}⟩"


def needs_escape(c: str) -> bool:
    """Whether one character acts (control, bidi control, separator) instead of showing."""
    return c in BIDI_CONTROLS or c in SEPARATORS or unicodedata.category(c) == "Cc"


def visible(text: str, keep: str = "") -> str:
    """``text`` with every control, bidi control and line/paragraph separator replaced by a visible
    stand-in (see the module docstring); the characters in ``keep`` (e.g. ``"\\n"``) are left as they are."""
    if text.isprintable():  # the common case, fast: controls and bidi controls are not "printable"
        return text
    return "".join(_stand_in(c) if c not in keep and needs_escape(c) else c for c in text)
