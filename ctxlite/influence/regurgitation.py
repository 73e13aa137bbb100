"""Input regurgitation metrics: the "Repeat" and "Rouge" prompt counts of Flemings et al. (ACL 2025).

Thresholds as in the authors' ``input_regurg.py`` (github.com/james-flemings/context_influence):

- Repeat: more than 25 distinct whitespace tokens (case-sensitive) of the
  response also occur in the source.
- Rouge: ROUGE-L recall > 0.5 or precision > 0.5 of the response against the
  *untruncated* source (Google's maintained ``rouge-score`` implementation).

ROUGE counts tokens; ``rouge-score``'s own tokenizer keeps only ``[a-z0-9]``,
so any other script scores 0 even for a verbatim copy. :func:`unicode_tokens`
counts every script: letters and digits of any alphabet as words, one token
per character in scripts written without spaces (Han, kana, Thai, ...), and
non-ASCII symbols (emoji) as tokens. On ASCII text it gives exactly the
tokens of ``rouge-score`` (a test pins this), so English scores are unchanged.

:func:`copy_sources` works on the model's tokens instead: where in the context a response token
could have been copied from (a hierarchical search measures the n-grams holding them).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

REPEAT_THRESHOLD = 25
ROUGE_THRESHOLD = 0.5


_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]"
)  # Thai, Lao, Myanmar, Khmer, kana, CJK ideographs: written without spaces between words


def unicode_tokens(text: str) -> list[str]:
    """Lower-cased tokens of any script (see the module docstring)."""
    out: list[str] = []
    word: list[str] = []
    for ch in text.lower():
        category = unicodedata.category(ch)
        if _UNSPACED.match(ch):
            if word:
                out.append("".join(word))
                word = []
            out.append(ch)
        elif ch.isalnum() or (category[0] == "M" and word):  # a combining mark belongs to its letter
            word.append(ch)
        else:
            if word:
                out.append("".join(word))
                word = []
            if category[0] == "S" and not ch.isascii():  # emoji and other symbols; punctuation is dropped
                out.append(ch)
    if word:
        out.append("".join(word))
    return out


class _UnicodeTokenizer:
    """The ``tokenize`` interface ``rouge_score.RougeScorer`` takes."""

    def tokenize(self, text: str) -> list[str]:
        return unicode_tokens(text)


@lru_cache(maxsize=1)
def _rouge_l():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False, tokenizer=_UnicodeTokenizer())


@dataclass(frozen=True)
class Regurgitation:
    """How much of the source a response copies."""

    shared_words: int
    rouge_l_precision: float
    rouge_l_recall: float

    @property
    def repeat(self) -> bool:
        return self.shared_words > REPEAT_THRESHOLD

    @property
    def rouge(self) -> bool:
        return self.rouge_l_precision > ROUGE_THRESHOLD or self.rouge_l_recall > ROUGE_THRESHOLD

    def to_dict(self) -> dict:
        return {
            "shared_words": self.shared_words,
            "rouge_l_precision": self.rouge_l_precision,
            "rouge_l_recall": self.rouge_l_recall,
            "repeat": self.repeat,
            "rouge": self.rouge,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Regurgitation:
        """The measures :meth:`to_dict` wrote (``repeat`` and ``rouge`` follow from them)."""
        return cls(d["shared_words"], d["rouge_l_precision"], d["rouge_l_recall"])


def copy_sources(prompt: Sequence[int], start: int, end: int, lead: int, response: Sequence[int]) -> list[int]:
    """Positions i in [start, end) of ``prompt`` whose token could be copied into the response: the
    pair (prompt[i − 1], prompt[i]) equals a consecutive pair of the response read after ``lead``
    (the token it follows). A model copies a token from the context where the token before it
    recurs: the induction heads of Olsson et al. (2022) attend to the token after an earlier match
    of the current one and predict it again; these positions are what such a head can copy from."""
    seq = [lead, *response]
    pairs = set(zip(seq, seq[1:]))
    return [i for i in range(max(start, 1), end) if (prompt[i - 1], prompt[i]) in pairs]


def shared_word_count(prediction: str, source: str) -> int:
    """|set(prediction.split()) ∩ set(source.split())| (case-sensitive)."""
    return len(set(prediction.split()) & set(source.split()))


def rouge_l(reference: str, prediction: str) -> dict:
    """ROUGE-L of ``prediction`` against ``reference`` over :func:`unicode_tokens` (any script):
    with LCS the longest common subsequence of the token sequences, precision LCS/|prediction|,
    recall LCS/|reference| and F1 their harmonic mean (Lin 2004)."""
    score = _rouge_l().score(reference, prediction)["rougeL"]
    return {"precision": float(score.precision), "recall": float(score.recall), "f": float(score.fmeasure)}


def regurgitation(prediction: str, source: str) -> Regurgitation:
    """Repeat count and ROUGE-L precision/recall of ``prediction`` against ``source``."""
    score = rouge_l(source, prediction)
    return Regurgitation(shared_word_count(prediction, source), score["precision"], score["recall"])
