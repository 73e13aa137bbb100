"""Units of a private context: the passages, sentences, fields or given spans its influence is read over.

A unit is a run of characters of the context D with a kind and a label; the scorer removes its
tokens from D and measures the leave-one-out influence τ_u = Σ_t |log p̄_λ(y_t | D) − log p̄_λ(y_t |
D ∖ u)| exactly as for an n-gram (``ctxlite.influence.scorer``). Attribution to passages (TracLLM,
Wang et al., USENIX Security 2025) and to sentences (ContextCite, Cohen-Wang et al., NeurIPS 2024)
reads the same leave-one-out quantity; here it is a privacy loss of the unit.

The kinds (``UNIT_KINDS``; ``"ngram"`` is the scorer's token windows, not a unit of this module):

* ``passage``: a record's ``"passages"`` (the context is their join with its ``"separator"``,
  ``PASSAGE_JOIN`` by default), else the context split at blank lines (``BLANK_LINE``);
* ``sentence``: the sentences of ``sentencex`` (Wikimedia's rule-based segmenter, offline: no model
  is downloaded), in the language given, one of ``SENTENCE_LANGUAGES`` (:func:`check_sentence_language`);
* ``field``: each ``Name: value`` line (``FIELD_LINE``), labelled with its name;
* ``span``: the record's ``"spans"`` ``[[start, end, "label"], ...]``, characters ``[start, end)``
  of the context (a PII detector's output, say); they may not overlap.

Leading and trailing whitespace is not part of a unit (the separators between units belong to
none). A unit's characters are mapped onto the tokens of D by :func:`to_tokens`: every token that
holds one of its characters is removed (snapping outwards, never cutting a token), and the
characters actually removed are reported with ``snapped`` set where they differ from the unit's.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib.metadata import version

import sentencex

from ctxlite.errors import DataError, InvalidParameter

UNIT_KINDS = ("ngram", "passage", "sentence", "field", "span")
"""What a score run's influence is read over: n-gram token windows (the default) or one kind of unit."""

PASSAGE_JOIN = "\n\n"
"""The separator a record's ``"passages"`` are joined with when it gives no ``"separator"``."""

BLANK_LINE = re.compile(r"\n[ \t\r]*\n")
"""Where a context without ``"passages"`` is split into passages: a blank line (whitespace only)."""

FIELD_LINE = re.compile(r"^[ \t]*([^:\n]{1,64}?)[ \t]*:(?!//)[ \t]*\S[^\n]*$", re.MULTILINE)
"""A field: a line ``Name: value`` with a name of 1–64 characters (no colon) and a non-empty value;
a colon followed by ``//`` is a URL's (``See http://…``, ``https://…``), not the end of a name."""


SENTENCEX_VERSION = "1.0.32"
"""The sentencex release :data:`SENTENCE_RULES` was read from (its language table is compiled into
the extension, which lists no languages): another release is refused (:func:`check_sentencex`)."""

SENTENCE_RULES: dict[str, tuple[str, ...]] = {
    "am": (),
    "ar": ("acm", "aeb", "aeb-arab", "apc", "arq", "ary", "arz"),
    "bg": (),
    "bn": ("bpy",),
    "ca": ("oc",),
    "da": ("jut", "kl"),
    "de": (
        "als",
        "bar",
        "de-at",
        "de-ch",
        "de-formal",
        "dsb",
        "frr",
        "gsw",
        "hrx",
        "hsb",
        "ksh",
        "lb",
        "nds",
        "pdc",
        "pdt",
        "pfl",
        "rm",
        "sli",
        "stq",
        "vmf",
    ),
    "el": ("pnt",),
    "en": (),
    "es": ("an", "arn", "ast", "ay", "cbk-zam", "es-formal", "ext", "gn", "guc", "lad", "nah", "qu", "qug"),
    "fi": ("fit", "krl", "olo", "smn", "vot"),
    "fr": (
        "atj",
        "avk",
        "bci",
        "bm",
        "dua",
        "fon",
        "frc",
        "frp",
        "gcf",
        "gcr",
        "hke",
        "ht",
        "kab",
        "kbp",
        "ln",
        "lua",
        "mg",
        "pcd",
        "ses",
        "sg",
        "shy",
        "shy-latn",
        "ty",
        "wa",
        "wls",
        "wo",
    ),
    "gu": (),
    "hi": ("anp", "awa", "mag", "mai", "sa"),
    "hy": ("hyw",),
    "it": (
        "aae",
        "co",
        "egl",
        "eml",
        "fur",
        "lij",
        "lld",
        "lmo",
        "nap",
        "pms",
        "rgn",
        "roa-tara",
        "scn",
        "sdc",
        "sro",
        "vec",
    ),
    "ja": (),
    "kk": ("kaa", "kk-arab", "kk-cn", "kk-cyrl", "kk-kz", "kk-latn", "kk-tr"),
    "kn": ("tcy",),
    "ml": (),
    "mr": (),
    "my": ("blk", "kjp", "ksw", "mnw"),
    "nl": ("li", "nds-nl", "nl-informal", "srn", "vls"),
    "pa": (),
    "pl": ("csb", "szl"),
    "pt": ("gl", "kea", "mwl", "pt-br", "tet", "vmw"),
    "ru": (
        "ab",
        "alt",
        "av",
        "ba",
        "bxr",
        "ce",
        "cv",
        "gld",
        "inh",
        "kjh",
        "koi",
        "krc",
        "kum",
        "kv",
        "lbe",
        "lez",
        "mdf",
        "mhr",
        "mrj",
        "myv",
        "os",
        "rut",
        "sah",
        "sjd",
        "sty",
        "tt",
        "tt-cyrl",
        "tyv",
        "udm",
        "xal",
    ),
    "sk": ("cs",),
    "ta": (),
    "te": (),
    "uk": ("rue",),
}
"""sentencex's sentence rules, by the language they are written for, and the codes it maps onto each
(its fallback table: ``bar`` is segmented by the German rules). Read from sentencex's source
(``src/lib.rs``'s ``language_factory``, ``src/languages/fallbacks.rs``), following each code's
fallbacks as it does, and checked against the table the installed extension holds. A code it knows
no rules for (``xx``, ``de-DE``: codes are lowercase; ``zh``, ``fa``: codes it maps to no rules)
is segmented with the English rules, so it is no language here: ask for ``en`` for those."""

SENTENCE_LANGUAGES: dict[str, str] = {
    code: rules for rules, codes in SENTENCE_RULES.items() for code in (rules, *codes)
}
"""Every ``sentence_language`` accepted, and the rules sentencex segments it by."""


def check_sentence_language(language) -> str:
    """``language`` if it is one of :data:`SENTENCE_LANGUAGES`, else ``InvalidParameter`` naming it
    (sentencex would segment it with its English rules, silently, while the run recorded the code)."""
    if isinstance(language, str) and language in SENTENCE_LANGUAGES:
        return language
    near = sorted({c for c in (str(language).lower(), str(language).lower().split("-")[0]) if c in SENTENCE_LANGUAGES})
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise InvalidParameter(
        f"sentence language {language!r}{hint} is not one of the sentencex {SENTENCEX_VERSION} languages "
        "(ctxlite.influence.units.SENTENCE_LANGUAGES, docs/scoring.md#sentence-languages): sentencex would "
        "segment it with its English rules; give en for those"
    )


@cache
def check_sentencex() -> None:
    """Refuse a sentencex release other than :data:`SENTENCEX_VERSION`: the languages it has rules for
    may differ from :data:`SENTENCE_RULES`, and a code it dropped would be segmented in English."""
    installed = version("sentencex")
    if installed != SENTENCEX_VERSION:
        raise InvalidParameter(
            f"sentencex {installed} is installed, but ctxlite's list of its languages is for sentencex "
            f"{SENTENCEX_VERSION} (ctxlite.influence.units.SENTENCE_RULES): install sentencex=={SENTENCEX_VERSION}"
        )


def check_kind(kind: str) -> str:
    """``kind`` if it is one of ``UNIT_KINDS``, else ``InvalidParameter``."""
    if kind not in UNIT_KINDS:
        raise InvalidParameter(f"unit must be one of {', '.join(UNIT_KINDS)}; got {kind!r}")
    return kind


@dataclass(frozen=True)
class Unit:
    """Characters ``[char_start, char_end)`` of the context: a unit of ``kind`` named ``label``."""

    kind: str
    label: str
    char_start: int
    char_end: int
    text: str


@dataclass(frozen=True)
class TokenUnit:
    """A unit on the tokens of D: tokens ``[token_start, token_end)`` are removed, which hold
    characters ``[removed_start, removed_end)`` ⊇ the unit's (``snapped``: strictly more)."""

    unit: Unit
    token_start: int
    token_end: int
    removed_start: int
    removed_end: int

    @property
    def snapped(self) -> bool:
        return (self.removed_start, self.removed_end) != (self.unit.char_start, self.unit.char_end)


def join_passages(passages: Sequence[str], separator: str | None = None) -> str:
    """The context of a record's ``"passages"``: their join with ``separator`` (``PASSAGE_JOIN``)."""
    return (PASSAGE_JOIN if separator is None else separator).join(passages)


def _stripped(kind: str, label: str, context: str, start: int, end: int) -> Unit | None:
    """The unit of ``context[start:end]`` without its outer whitespace; None if nothing is left."""
    piece = context[start:end]
    lead = len(piece) - len(piece.lstrip())
    body = piece.strip()
    if not body:
        return None
    return Unit(kind, label, start + lead, start + lead + len(body), body)


def _passages(context: str, passages: Sequence[str] | None, separator: str | None) -> list[Unit]:
    if passages is not None:
        sep = PASSAGE_JOIN if separator is None else separator
        bounds, at = [], 0
        for p in passages:
            bounds.append((at, at + len(p)))
            at += len(p) + len(sep)
    else:
        cuts = [(m.start(), m.end()) for m in BLANK_LINE.finditer(context)]
        edges = [0] + [x for cut in cuts for x in cut] + [len(context)]
        bounds = list(zip(edges[::2], edges[1::2]))
    # an empty passage has nothing to remove and is skipped; the record's passages keep their numbers
    # (a retriever's positions), the blank lines' are counted without the empty ones (several blank lines)
    units = [_stripped("passage", "", context, a, b) for a, b in bounds]
    numbered = enumerate(units if passages is not None else [u for u in units if u is not None], 1)
    units = [Unit(u.kind, f"passage {i}", u.char_start, u.char_end, u.text) for i, u in numbered if u is not None]
    if len(units) < 2:
        raise DataError(
            f"unit passage needs at least two passages, found {len(units)}: give the record "
            '"passages": [...] or separate its passages by a blank line'
        )
    return units


def _sentences(context: str, language: str) -> list[Unit]:
    check_sentence_language(language)
    check_sentencex()
    units = []
    for b in sentencex.get_sentence_boundaries(language, context):
        a, e = b["start_index"], b["end_index"]
        if context[a:e] != b["text"]:  # the segmenter's offsets are characters: never trust them blindly
            raise DataError(f"the sentence segmenter's offsets [{a}, {e}) do not match its sentence {b['text']!r}")
        u = _stripped("sentence", "", context, a, e)
        if u is not None:
            units.append(Unit(u.kind, f"sentence {len(units) + 1}", u.char_start, u.char_end, u.text))
    if not units:
        raise DataError("unit sentence: the context holds no sentence")
    return units


def _fields(context: str) -> list[Unit]:
    units = []
    for m in FIELD_LINE.finditer(context):
        u = _stripped("field", m.group(1).strip(), context, m.start(), m.end())
        units.append(u)
    if not units:
        raise DataError('unit field: the context has no "Name: value" line')
    return units


def check_spans(spans, context: str) -> list[tuple[int, int, str]]:
    """A record's ``"spans"`` as ``(start, end, label)``, validated: each ``[start, end, "label"]``
    (the label optional, not empty nor blank) with 0 ≤ start < end ≤ the length of ``context``,
    holding more than whitespace, none overlapping another (``DataError`` naming the first bad one)."""
    n_chars = len(context)
    if not isinstance(spans, (list, tuple)) or not spans:
        raise DataError('unit span needs a record field "spans": [[start, end, "label"], ...] (none given)')
    out = []
    for i, s in enumerate(spans):
        ok = isinstance(s, (list, tuple)) and len(s) in (2, 3)
        ok = ok and all(isinstance(x, int) and not isinstance(x, bool) for x in s[:2])
        ok = ok and (len(s) == 2 or isinstance(s[2], str))
        if not ok:
            raise DataError(f'span {i}: expected [start, end, "label"] with integer start and end, got {s!r}')
        a, b = s[0], s[1]
        if not 0 <= a < b <= n_chars:
            raise DataError(f"span {i} [{a}, {b}) is not a non-empty range inside the context (0..{n_chars})")
        if not context[a:b].strip():
            raise DataError(
                f"span {i} [{a}, {b}) holds only whitespace {context[a:b]!r}: nothing of the context to remove"
            )
        if len(s) == 3 and not s[2].strip():
            raise DataError(f"span {i} has an empty label {s[2]!r}: name it, or leave the label out (span {i + 1})")
        out.append((a, b, s[2] if len(s) == 3 else f"span {i + 1}"))
    ordered = sorted(out)
    for (a0, b0, l0), (a1, b1, l1) in zip(ordered, ordered[1:]):
        if a1 < b0:
            raise DataError(f"spans [{a0}, {b0}) {l0!r} and [{a1}, {b1}) {l1!r} overlap")
    return out


def split_units(
    kind: str,
    context: str,
    passages: Sequence[str] | None = None,
    separator: str | None = None,
    spans=None,
    language: str = "en",
) -> list[Unit]:
    """The units of ``kind`` of ``context``, in the order of the context (``span``: of the data)."""
    check_kind(kind)
    if kind == "ngram":
        raise InvalidParameter("n-grams are token windows of the scorer, not units of a context")
    if passages is not None and join_passages(passages, separator) != context:
        raise DataError('the context is not the join of the record\'s "passages" (with its "separator")')
    if kind == "passage":
        return _passages(context, passages, separator)
    if kind == "sentence":
        return _sentences(context, language)
    if kind == "field":
        return _unique_labels(_fields(context))
    return _unique_labels([Unit("span", label, a, b, context[a:b]) for a, b, label in check_spans(spans, context)])


def _unique_labels(units: list[Unit]) -> list[Unit]:
    """Units whose label repeats (a detector's ``PERSON`` on two names, two ``Medication:`` lines)
    named apart by their characters, ``PERSON (0–10)``: a result names a unit's near-duplicate
    partner, and a gate the unit it failed on, by label."""
    seen = Counter(u.label for u in units)
    out = [u if seen[u.label] == 1 else replace(u, label=f"{u.label} ({u.char_start}–{u.char_end})") for u in units]
    repeated = [label for label, n in Counter(u.label for u in out).items() if n > 1]
    if repeated:
        raise DataError(f"unit label {repeated[0]!r} names two units: give the units distinct labels")
    return out


def to_tokens(units: Sequence[Unit], token_chars: Sequence[tuple[int, int]]) -> list[TokenUnit]:
    """Each unit on the tokens holding any byte of its characters, where ``token_chars`` gives the
    characters ``[start, end)`` each token holds bytes of (``Backend.char_cover``: a character split
    over several tokens is in the span of each). The removal's characters are those its first and
    last token hold bytes of, so a unit that starts or ends inside a token, or in a character split
    with a token outside it, is reported snapped."""
    out = []
    for u in units:
        members = [
            i
            for i, (s, e) in enumerate(token_chars)
            if (s < u.char_end and e > u.char_start) or (s == e and u.char_start <= s < u.char_end)
        ]
        if not members:
            raise DataError(f"{u.label} [{u.char_start}, {u.char_end}) holds no token of the context")
        a, b = members[0], members[-1] + 1
        out.append(TokenUnit(u, a, b, token_chars[a][0], token_chars[b - 1][1]))
    return out


__all__ = [
    "BLANK_LINE",
    "FIELD_LINE",
    "PASSAGE_JOIN",
    "SENTENCEX_VERSION",
    "SENTENCE_LANGUAGES",
    "SENTENCE_RULES",
    "UNIT_KINDS",
    "TokenUnit",
    "Unit",
    "check_kind",
    "check_sentence_language",
    "check_sentencex",
    "check_spans",
    "join_passages",
    "split_units",
    "to_tokens",
]
