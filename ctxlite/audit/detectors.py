"""Turn what the auditor sees into one membership score per trial (ContextLeak's detection, Choi et al. 2025).

Higher score = "the canary was present". Thresholding the scores is done by
``ctxlite.privacy.estimators.CanaryScoreAuditor``.

* :class:`CountDetector` (classification): the noisy count of y_c in the
  histogram (RNM), or the frequency of the answer y_c over the queries of a
  trial (no aggregation).
* :class:`DirectionDetector` (generation, and classification by default): a
  reference direction d = Σ_j (s_with_j − s_without_j) from paired reference
  runs with and without the canary (disjoint from the evaluated trials), and
  score = ⟨d, s⟩ − mean_j ⟨d, s_without_j⟩ (Nasr et al. 2023's linear
  separation; ContextLeak Appendix A.3). On classification signals (label
  histograms) it learns *which way* the canary moves the answers: measured on
  Gemma-3-270M, a canary in a 2-shot prompt often makes y_c *less* likely
  (the model avoids repeating the last label), which a fixed "count of y_c"
  would read as evidence of absence.
* :class:`LeakDetector` (prompt injection): the fraction of the canary the
  outputs reproduce (longest common substring), no fitting.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import numpy as np

from ctxlite.errors import InvalidParameter


class Detector(abc.ABC):
    name = "detector"
    needs_reference = False

    def fit(self, with_canary: Sequence[np.ndarray], without_canary: Sequence[np.ndarray]) -> Detector:
        return self

    @abc.abstractmethod
    def score(self, signal: np.ndarray) -> float:
        """Membership score of one trial's signal."""


class CountDetector(Detector):
    """Score = signal[index]: the (noisy) count or frequency of y_c."""

    name = "count"

    def __init__(self, index: int):
        self.index = int(index)

    def score(self, signal):
        return float(np.asarray(signal, dtype=np.float64)[self.index])


class DirectionDetector(Detector):
    """Score = ⟨d, s⟩ − mean over OUT references, d = Σ (with − without) over paired references."""

    name = "direction"
    needs_reference = True

    def __init__(self):
        self.direction: np.ndarray | None = None
        self.offset = 0.0

    def fit(self, with_canary, without_canary):
        w = np.asarray(with_canary, dtype=np.float64)
        wo = np.asarray(without_canary, dtype=np.float64)
        if w.ndim != 2 or w.shape != wo.shape or len(w) == 0:
            raise InvalidParameter(f"need equally many paired reference signals, got shapes {w.shape} and {wo.shape}")
        self.direction = (w - wo).sum(axis=0)
        self.offset = float((wo @ self.direction).mean())
        return self

    def score(self, signal):
        if self.direction is None:
            raise InvalidParameter("DirectionDetector.fit() must be called before score()")
        return float(np.asarray(signal, dtype=np.float64) @ self.direction - self.offset)


class LeakDetector(Detector):
    """Score = signal[0], the mean fraction of the canary reproduced by the outputs."""

    name = "leak"

    def score(self, signal):
        return float(np.asarray(signal, dtype=np.float64)[0])
