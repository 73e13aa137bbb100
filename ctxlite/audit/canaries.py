"""Canaries for ContextLeak audits (Choi et al. 2025; its examples are in Appendix A.4).

A canary ``c = (x_c, y_c)`` is one record that the audit game swaps into the
private set with probability 1/2. Three kinds of ``x_c``:

* ``hex``: 64 hexadecimal characters, the hex form of 32 random bytes drawn
  from a seeded ``numpy.random.Generator`` (ContextLeak follows Wei et al. 2024);
* ``unigram``: the 16 vocabulary tokens that are rarest under the *target
  model's* tokenizer given token counts over the private set, concatenated
  (Panda et al. 2025). Only plain pieces are eligible: decodable UTF-8,
  printable, not blank, and re-tokenized to themselves (so special, control and
  byte-fallback tokens never appear). Almost every vocabulary token has count 0
  in a small private set, so ties are broken by the seeded generator;
* ``semantic``: a statement contradicting common knowledge, drawn from the
  curated ``ctxlite/data/semantic_canaries.txt``.

Label rule: for classification ``y_c`` is the rarest class of the private set
(ties broken by the seeded generator); for open generation ``y_c = x_c``.

>>> import numpy as np
>>> len(hex_text(np.random.default_rng(0)))
64
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np

from ctxlite.audit.formats import AuditFormat, Task
from ctxlite.choices import Choice
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.runtime.backend import Vocabulary, require

HEX_BYTES = 32
UNIGRAM_TOKENS = 16


class CanaryKind(Choice):
    """Kind of canary text ``x_c`` (the value is the CLI spelling)."""

    HEX = "hex"
    UNIGRAM = "unigram"
    SEMANTIC = "semantic"

    @property
    def template_key(self) -> str:
        """Key of this kind in ``audit_templates.json``'s ``canary_kinds``."""
        return "rare-unigram" if self is CanaryKind.UNIGRAM else self.value

    @property
    def spellings(self) -> tuple:
        return (self.value, self.template_key, self.name)


@dataclass(frozen=True)
class Canary:
    """One canary record: ``text`` is x_c, ``label`` is y_c, ``id`` names it in logs."""

    kind: CanaryKind
    text: str
    label: str
    id: str

    def record(self, fmt: AuditFormat, base: Mapping | None = None) -> dict:
        """The canary as a record of ``fmt``: x_c as the input, y_c as the output, any other
        field from ``base`` (the record it replaces)."""
        return {**(base or {}), fmt.input: self.text, fmt.output: self.label}

    def to_dict(self) -> dict:
        """What an audit report keeps of the canary."""
        return {"id": self.id, "kind": self.kind.value, "text": self.text, "label": self.label}

    @classmethod
    def from_dict(cls, d: dict) -> Canary:
        return cls(CanaryKind.parse(d["kind"]), d["text"], d["label"], d["id"])


def canary_id(kind: CanaryKind, text: str) -> str:
    return f"{kind.value}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]}"


def hex_text(rng: np.random.Generator) -> str:
    """64 hex characters: 32 random bytes from ``rng``."""
    return rng.bytes(HEX_BYTES).hex()


def semantic_canaries() -> list[str]:
    """The curated semantic canaries (one statement per line)."""
    text = resources.files("ctxlite").joinpath("data", "semantic_canaries.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def semantic_text(rng: np.random.Generator) -> str:
    lines = semantic_canaries()
    return lines[int(rng.integers(len(lines)))]


def _plain_piece(engine, token: int) -> str | None:
    """The token's text if it is a plain word/piece, else None."""
    raw = engine.token_bytes(token)
    if not raw:
        return None
    try:
        piece = raw.decode("utf-8")
    except UnicodeDecodeError:  # partial UTF-8 sequence / byte-fallback token
        return None
    if not piece.strip() or not piece.isprintable():
        return None
    if engine.tokenize(piece) != [token]:  # special / unreachable by the tokenizer
        return None
    return piece


def token_counts(engine, texts: Iterable[str]) -> Counter:
    """How often each token id occurs in the tokenized ``texts``."""
    counts: Counter = Counter()
    for text in texts:
        counts.update(engine.tokenize(text))
    return counts


def rare_unigram_text(engine, texts: Sequence[str], rng: np.random.Generator, n_tokens: int = UNIGRAM_TOKENS) -> str:
    """The ``n_tokens`` plain vocabulary tokens rarest in ``texts``, concatenated.

    Tokens are ranked by (count in the tokenized private texts, random tie-break
    from ``rng``); ineligible tokens (see module docstring) are skipped.
    """
    if n_tokens < 1:
        raise InvalidParameter(f"n_tokens must be >= 1, got {n_tokens}")
    counts = token_counts(engine, texts)
    tie = rng.permutation(engine.n_vocab)
    count_arr = np.zeros(engine.n_vocab, dtype=np.int64)
    for tok, c in counts.items():
        if 0 <= tok < engine.n_vocab:
            count_arr[tok] = c
    order = np.lexsort((tie, count_arr))  # by count, then by the random tie-break
    pieces: list[str] = []
    for tok in order:
        piece = _plain_piece(engine, int(tok))
        if piece is not None:
            pieces.append(piece)
            if len(pieces) == n_tokens:
                break
    if len(pieces) < n_tokens:
        raise InvalidParameter(f"the vocabulary has only {len(pieces)} plain tokens, need {n_tokens}")
    return "".join(pieces).strip()


def canary_label(fmt: AuditFormat, text: str, record_labels: Sequence[str], rng: np.random.Generator) -> str:
    """y_c: the rarest of ``fmt.labels`` among ``record_labels`` (seeded tie-break), or x_c for generation."""
    if fmt.task is not Task.CLASSIFY:
        return text
    if not fmt.labels:
        raise DataError("classification needs at least one label")
    counts = Counter(record_labels)
    least = min(counts.get(label, 0) for label in fmt.labels)
    rarest = [label for label in fmt.labels if counts.get(label, 0) == least]
    return rarest[int(rng.integers(len(rarest)))] if len(rarest) > 1 else rarest[0]


def make_canary(kind, fmt: AuditFormat, records: Sequence[dict], seed: int, *, engine=None) -> Canary:
    """Draw the canary for an audit: x_c of ``kind`` and y_c by the label rule.

    ``records`` is the private set in ``fmt`` (labels resolved); ``engine`` is needed for
    ``unigram`` canaries. Deterministic in ``seed``.
    """
    kind = CanaryKind.parse(kind)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xCA]))
    if kind is CanaryKind.HEX:
        text = hex_text(rng)
    elif kind is CanaryKind.SEMANTIC:
        text = semantic_text(rng)
    else:
        if engine is None:
            raise InvalidParameter("a unigram canary needs the target model's tokenizer (engine=...)")
        require(engine, [Vocabulary], "the unigram canary (rare tokens of the vocabulary; use hex or semantic)")
        texts = [r[fmt.input] for r in records] + [str(r[fmt.output]) for r in records]
        text = rare_unigram_text(engine, texts, rng)
    record_labels = [r[fmt.output] for r in records] if fmt.task is Task.CLASSIFY else []
    label = canary_label(fmt, text, record_labels, rng)
    return Canary(kind=kind, text=text, label=label, id=canary_id(kind, text))
