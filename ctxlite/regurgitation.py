"""Input regurgitation metrics (SPEC §1.6, the seed's reference definitions).

- Repeat: more than 25 distinct whitespace tokens (case-sensitive) of the
  response also occur in the source.
- Rouge: ROUGE-L recall > 0.5 or precision > 0.5 of the response against the
  *untruncated* source (Google's maintained ``rouge-score`` implementation).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

REPEAT_THRESHOLD = 25
ROUGE_THRESHOLD = 0.5


@lru_cache(maxsize=1)
def _rouge_l():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


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


def shared_word_count(prediction: str, source: str) -> int:
    """|set(prediction.split()) ∩ set(source.split())| (case-sensitive)."""
    return len(set(prediction.split()) & set(source.split()))


def regurgitation(prediction: str, source: str) -> Regurgitation:
    """Repeat count and ROUGE-L precision/recall of ``prediction`` against ``source``."""
    score = _rouge_l().score(source, prediction)["rougeL"]
    return Regurgitation(shared_word_count(prediction, source), float(score.precision), float(score.recall))
