"""Private in-context learning mechanisms that ContextLeak audits (Choi et al. 2025; DP ones from Wu et al. 2024).

A mechanism answers a query from a private record set and returns a
:class:`Release`: the **signal** the auditor sees and the **outputs** a user
would get. For the heuristic defenses the signal is what the model answered
(label frequencies, or the mean embedding of the generated texts); for the DP
mechanisms it is the noisy aggregate (histogram or mean embedding), not the
final label or text (ContextLeak §3.6, Appendix D.9).

* :class:`NoDefense` (L0) -- plain ICL.
* :class:`PromptDefense` L1 / L2 -- an instruction not to reveal the examples
  (L2 adds decoy "faux secrets" and withholds outputs containing a keyword;
  the SaTML competition defences ContextLeak uses, Debenedetti et al. 2024).
* :class:`Judge` (L3) -- L2 plus a model as a judge (:class:`JudgeModel`): an
  output it finds leaking (P(Yes) > P(No) as its next answer) is replaced by
  "None". An instruction-tuned judge is asked through its chat template.
* :class:`ReportNoisyMax` (classification) -- m disjoint ensembles of ``shots``
  records each vote one label; the histogram gets N(0, σ²) per class and the
  argmax is released.
* :class:`EmbeddingSpaceAggregation` (generation) -- each ensemble's output is
  embedded (unit norm), clipped to C, summed, N(0, σ²I) added, divided by m;
  the zero-shot candidate (generated without private data) nearest in cosine
  is released.

σ is the analytic Gaussian σ (Balle & Wang 2018) for the mechanism's L2
sensitivity under *replacement* (RNM √2, ESA 2C), so the **theoretical ε is
per query with the canary always present** (one release, no subsampling
amplification, no composition); ``epsilon = inf`` means σ = 0. With m fixed
ensembles the add/remove sensitivity (``add_remove_sensitivity``, used for
subsampled accounting) is the same √2 / 2C: an added or removed record
changes one ensemble's answer, i.e. moves one vote between classes (the
histogram always sums to m) or swaps one clipped vector for another.

Ensembles come from :func:`partition`: a seeded random split of record
*positions* into m groups, so the partition never looks at record contents and
replacing one record changes exactly one ensemble's prompt.
"""

from __future__ import annotations

import abc
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ctxlite.audit.formats import AuditFormat, Task
from ctxlite.errors import InvalidParameter
from ctxlite.privacy.calibration import (
    Neighbouring,
    analytic_gaussian_sigma,
    esa_l2_sensitivity,
    rnm_l2_sensitivity,
)
from ctxlite.privacy.privacy_profile import VotePair
from ctxlite.runtime import kernels
from ctxlite.runtime.templates import audit_templates

OTHER = "other"
MAX_PARTNER_GROUPS = 2000
"""The most partner groups :meth:`ReportNoisyMax.vote_pairs` enumerates (two label distributions each)."""


@dataclass
class Release:
    """One mechanism answer: ``signal`` (auditor-visible) and the released ``outputs``."""

    signal: np.ndarray
    outputs: list = field(default_factory=list)
    withheld: int = 0  # outputs the defence replaced (keyword filter or judge)


def partition(n_records: int, ensembles: int, shots: int, rng: np.random.Generator) -> np.ndarray:
    """(ensembles, shots) record positions: a seeded random disjoint split.

    Only positions are shuffled (records are never looked at), and each group
    is sorted, so replacing the record at one position changes exactly one
    ensemble's prompt. Positions beyond ``ensembles * shots`` are unused.

    >>> partition(6, 3, 2, np.random.default_rng(0)).shape
    (3, 2)
    """
    if ensembles < 1 or shots < 1:
        raise InvalidParameter(f"need ensembles >= 1 and shots >= 1, got {ensembles}, {shots}")
    if n_records < ensembles * shots:
        raise InvalidParameter(
            f"{ensembles} ensembles x {shots} shots need {ensembles * shots} records, got {n_records}"
        )
    perm = rng.permutation(n_records)[: ensembles * shots]
    return np.sort(perm.reshape(ensembles, shots), axis=1)


def leak_fraction(output: str, secret: str) -> float:
    """Longest common substring of ``output`` and ``secret``, as a fraction of ``secret``."""
    if not output or not secret:
        return 0.0
    from difflib import SequenceMatcher

    m = SequenceMatcher(None, output, secret, autojunk=False).find_longest_match(0, len(output), 0, len(secret))
    return m.size / len(secret)


class Mechanism(abc.ABC):
    """A private-ICL method: answers ``query`` from ``records`` and says what leaks to the auditor."""

    name: str = "mechanism"
    defense_text: str = ""  # the instruction a defence adds to the prompt (none: plain ICL, the DP aggregations)
    epsilon: float | None = None
    sigma: float = 0.0
    sensitivity: float | None = None  # L2, replacement (the canary game)
    add_remove_sensitivity: float | None = None  # L2, add/remove (subsampled accounting)

    @abc.abstractmethod
    def release(
        self,
        oracle,
        fmt: AuditFormat,
        records: Sequence[dict],
        query: str,
        n_queries: int,
        rng: np.random.Generator,
        *,
        text_outputs: bool = False,
    ) -> Release:
        """Answer ``query`` ``n_queries`` times; ``signal`` summarises them for the auditor."""

    def answer_prompts(
        self,
        fmt: AuditFormat,
        records: Sequence[dict],
        query: str,
        n_queries: int,
        rng: np.random.Generator,
        *,
        text_outputs: bool = False,
    ) -> list[str]:
        """The prompts whose answer distributions :meth:`release` with these arguments reads, found
        without a model (``rng`` is consumed: pass a copy): what an audit reads ahead, many
        releases' together (``ModelOracle.read_ahead``). A hint only: the release reads what it
        reads either way. None known ahead by default."""
        return []

    def describe(self) -> dict:
        return {"mechanism": self.name, "epsilon": self.epsilon, "sigma": self.sigma, "sensitivity": self.sensitivity}


# --------------------------------------------------------------------------
# heuristic defenses (L0-L3)


class NoDefense(Mechanism):
    """L0: plain ICL with all records in one prompt."""

    name = "none"
    defense_text = ""
    keywords: tuple[str, ...] = ()
    use_judge = False

    def release(self, oracle, fmt, records, query, n_queries, rng, *, text_outputs=False):
        prompt = fmt.prompt(records, query, self.defense_text)
        if fmt.task is Task.CLASSIFY and not text_outputs:
            counts = oracle.sample_answers(prompt, n_queries, rng)
            answers = list(fmt.labels) + [OTHER]
            outputs = [answers[j] for j in range(len(answers)) for _ in range(int(counts[j]))]
            outputs, withheld = self._defend(oracle, fmt, records, outputs)
            freq = np.array([outputs.count(a) for a in answers], dtype=np.float64) / n_queries
            return Release(signal=freq, outputs=outputs, withheld=withheld)
        texts = oracle.sample_texts([prompt] * n_queries, rng)
        texts, withheld = self._defend(oracle, fmt, records, texts)
        if text_outputs:  # the injection baseline scores the texts themselves: no embedding
            return Release(signal=np.zeros(1), outputs=texts, withheld=withheld)
        return Release(signal=oracle.embed(texts).mean(axis=0), outputs=texts, withheld=withheld)

    def answer_prompts(self, fmt, records, query, n_queries, rng, *, text_outputs=False):
        """The one prompt whose label distribution a classification release samples its answers from."""
        if fmt.task is Task.CLASSIFY and not text_outputs:
            return [fmt.prompt(records, query, self.defense_text)]
        return []

    def released_distribution(self, oracle, fmt: AuditFormat, records: Sequence[dict], query: str) -> np.ndarray:
        """The exact distribution of one released answer over (labels..., other) (classification):
        the model's label distribution for the prompt pushed through the defence's filter, which maps
        each answer the same way every time (the keyword filter; the judge's verdict on ``records``)."""
        dist = oracle.label_distribution(fmt.prompt(records, query, self.defense_text))
        answers = list(fmt.labels) + [OTHER]
        released, _ = self._defend(oracle, fmt, records, answers)
        out = np.zeros(len(answers))
        np.add.at(out, [answers.index(a) for a in released], dist)
        return out

    def _defend(self, oracle, fmt, records, outputs: list[str]) -> tuple[list[str], int]:
        """The outputs as released (withheld ones replaced) and how many were withheld."""
        if not (self.keywords or self.use_judge):
            return outputs, 0
        replacement = audit_templates()["defenses"]["judge_replacement"]
        verdict: dict[str, str] = {}
        out = []
        for o in outputs:
            if o not in verdict:
                low = o.lower()
                if any(k.lower() in low for k in self.keywords):
                    verdict[o] = replacement
                elif self.use_judge and o != OTHER and self._judge_leaks(oracle, fmt, records, o):
                    verdict[o] = replacement
                else:
                    verdict[o] = o
            out.append(verdict[o])
        withheld = sum(verdict[o] != o for o in outputs)
        if fmt.task is Task.CLASSIFY:  # a withheld label counts as "other"
            out = [OTHER if (o == replacement and o not in fmt.labels) else o for o in out]
        return out, withheld

    def _judge_leaks(self, oracle, fmt, records, output: str) -> bool:
        """Whether a judge finds that ``output`` reveals the records: without a judge (every defence
        but :class:`Judge`, whose ``use_judge`` alone asks), no output is judged a leak."""
        return False


class PromptDefense(NoDefense):
    """L1 (instruction) or L2 (instruction + decoy secrets + keyword output filter)."""

    def __init__(self, level: int):
        if level not in (1, 2):
            raise InvalidParameter(f"prompt defense level must be 1 or 2, got {level}")
        d = audit_templates()["defenses"]
        self.level = level
        self.name = f"prompt-l{level}"
        if level == 1:
            self.defense_text = d["L1"]
        else:
            l2 = d["L2"]
            self.defense_text = l2["instruction"].format(decoys=l2["decoy_separator"].join(l2["decoys"]))
            self.keywords = tuple(l2["filter_keywords"])


class JudgeModel:
    """The L3 judge: P(Yes) > P(No) as a model's next answer to "does this output reveal the private data?".

    ``oracle`` is the judge model's :class:`~ctxlite.audit.oracle.ModelOracle`. With ``render_chat``
    (an instruction-tuned judge) the question is a system + user conversation in the judge's chat
    template and the answer opens the assistant turn; without it (a base model) the question is a
    few-shot completion prompt answered by " Yes" / " No".
    """

    def __init__(self, oracle, render_chat=None):
        self.oracle, self.render_chat = oracle, render_chat

    def leaks(self, gist: str, output: str) -> bool:
        d = audit_templates()["defenses"]
        output = " ".join(output.split())
        if self.render_chat is None:
            p_yes, p_no = self.oracle.next_token_probs(d["judge"].format(gist=gist, output=output), d["judge_answers"])
        else:
            chat = d["judge_chat"]
            prompt = self.render_chat(
                [
                    {"role": "system", "content": chat["system"]},
                    {"role": "user", "content": chat["user"].format(gist=gist, output=output)},
                ]
            )
            p_yes, p_no = self.oracle.next_token_probs(prompt, d["judge_answers"], prefix="")
        return bool(p_yes > p_no)


class Judge(PromptDefense):
    """L3: the L2 prompt defense, then a judge model (default: the audited model itself) judges each
    output; leaks become "None"."""

    name = "judge"
    use_judge = True

    def __init__(self, judge: JudgeModel | None = None):
        super().__init__(2)
        self.name = "judge"
        self.judge = judge

    def _judge_leaks(self, oracle, fmt, records, output: str) -> bool:
        return (self.judge or JudgeModel(oracle)).leaks(fmt.gist(records), output)


# --------------------------------------------------------------------------
# DP mechanisms


def _sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    return 0.0 if math.isinf(epsilon) else analytic_gaussian_sigma(epsilon, delta, sensitivity)


class ReportNoisyMax(Mechanism):
    """RNM over m disjoint ensembles (classification); signal = the noisy histogram.

    Classes are the labels plus "other" (an answer that is no label), so the
    histogram sums to m before noise. Each ensemble votes with one answer
    sampled from its prompt's exact label distribution (on a server without
    log-probabilities: one completion the server samples).
    """

    name = "rnm"

    def __init__(
        self, ensembles: int, shots: int, epsilon: float, delta: float, relation: Neighbouring = Neighbouring.REPLACE
    ):
        self.ensembles, self.shots = int(ensembles), int(shots)
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.sensitivity = rnm_l2_sensitivity(relation)
        self.add_remove_sensitivity = rnm_l2_sensitivity(Neighbouring.ADD_REMOVE)
        self.sigma = _sigma(self.epsilon, self.delta, self.sensitivity)

    def votes(self, oracle, fmt, records, query, rng) -> np.ndarray:
        groups = partition(len(records), self.ensembles, self.shots, rng)
        votes = np.empty(self.ensembles, dtype=np.int32)
        for e, group in enumerate(groups):
            prompt = fmt.prompt([records[i] for i in group], query)
            votes[e] = oracle.sample_answer(prompt, rng)
        return votes

    def answer_prompts(self, fmt, records, query, n_queries, rng, *, text_outputs=False):
        """Every ensemble's prompt of every query: :meth:`release` played on an oracle that records
        the prompts and draws each vote from a uniform distribution with ``rng`` (one uniform
        number, as a draw from the exact distribution takes), so each query's partition is the
        one the release draws."""
        if text_outputs:
            return []
        recorder = _PromptRecorder(len(fmt.labels) + 1)
        self.release(recorder, fmt, records, query, n_queries, rng)
        return recorder.prompts

    def vote_pairs(
        self, oracle, fmt: AuditFormat, records_in: Sequence[dict], records_out: Sequence[dict], query: str
    ) -> list[VotePair]:
        """The vote distributions of the ensemble holding the one record where ``records_in`` and
        ``records_out`` differ, under each neighbour, for every group of partners :func:`partition`
        can give it (each of the C(N−1, shots−1) groups equally likely: the positions are shuffled
        uniformly). The other ensembles' votes do not depend on that record."""
        n = self.ensembles * self.shots
        differ = [i for i, (a, b) in enumerate(zip(records_in, records_out)) if a != b]
        if len(records_in) != n or len(records_out) != n or len(differ) != 1:
            raise InvalidParameter(
                f"need two sets of {n} records differing in exactly one, got {len(differ)} differences"
            )
        slot = differ[0]
        others = [i for i in range(n) if i != slot]
        groups = math.comb(n - 1, self.shots - 1)
        if groups > MAX_PARTNER_GROUPS:
            raise InvalidParameter(
                f"the canary's ensemble can be any of {groups} groups (> {MAX_PARTNER_GROUPS}): too many to enumerate"
            )
        groups = [sorted([slot, *partners]) for partners in itertools.combinations(others, self.shots - 1)]
        oracle.read_ahead(
            [fmt.prompt([recs[i] for i in g], query) for g in groups for recs in [records_in, records_out]]
        )
        pairs = []
        for group in groups:
            p, q = (
                oracle.label_distribution(fmt.prompt([recs[i] for i in group], query))
                for recs in (records_in, records_out)
            )
            pairs.append(VotePair(1.0, p, q))
        return pairs

    def vote_pairs_are_the_release(
        self, oracle, fmt: AuditFormat, records: Sequence[dict], slot: int, query: str
    ) -> bool:
        """Whether the noisy one-hot vote of :meth:`vote_pairs` (its partner group public) *is* the
        auditor's release up to a fixed shift, so that its privacy profile is the release's exactly.

        The auditor sees the noisy histogram e_v + S + N(0, σ²I), where v is the canary's ensemble's
        vote and S the sum of the other ensembles' votes; neither S nor the partner group is
        released. Hiding them can only lower ε (post-processing of (group, S, e_v + N); joint
        convexity over the group), so in general the vote pair's profile is an upper bound. It is
        exact when nothing is hidden: a single partner group (``shots == 1`` or one ensemble) and S
        fixed -- no other ensemble, or (one record per ensemble, so S is their summed votes whatever
        the partition) every other record's vote is certain (e.g. greedy decoding)."""
        if self.ensembles == 1:
            return True
        if self.shots != 1:
            return False
        dists = (oracle.label_distribution(fmt.prompt([r], query)) for i, r in enumerate(records) if i != slot)
        return all(float(np.max(d)) == 1.0 for d in dists)

    def release(self, oracle, fmt, records, query, n_queries, rng, *, text_outputs=False):
        if text_outputs:
            raise InvalidParameter("rnm releases labels only; the injection attack needs a text-output mechanism")
        k = oracle.n_outcomes
        answers = list(fmt.labels) + [OTHER]
        signal = np.zeros(k)
        outputs = []
        for _ in range(n_queries):
            votes = self.votes(oracle, fmt, records, query, rng)
            noise = rng.standard_normal(k) * self.sigma  # same normals at every ε: common random numbers
            hist = kernels.noisy_histogram(votes, k, noise)
            signal += hist.noisy_counts
            outputs.append(answers[hist.argmax])
        return Release(signal=signal / n_queries, outputs=outputs)


class _PromptRecorder:
    """An oracle that answers uniformly at random and keeps the prompts it was asked about
    (:meth:`ReportNoisyMax.answer_prompts`); ``sample_answer`` takes one uniform number of ``rng``,
    as ``ModelOracle.sample_answer`` does from an exact distribution (``Generator.choice``)."""

    def __init__(self, n_outcomes: int):
        self.n_outcomes, self.prompts = n_outcomes, []

    def sample_answer(self, prompt: str, rng: np.random.Generator) -> int:
        self.prompts.append(prompt)
        return int(rng.choice(self.n_outcomes, p=np.full(self.n_outcomes, 1.0 / self.n_outcomes)))


class EmbeddingSpaceAggregation(Mechanism):
    """ESA over m disjoint ensembles (generation); signal = the noisy mean embedding."""

    name = "esa"

    def __init__(
        self,
        ensembles: int,
        shots: int,
        epsilon: float,
        delta: float,
        clip_norm: float = 1.0,
        candidates: int = 8,
        relation: Neighbouring = Neighbouring.REPLACE,
    ):
        self.ensembles, self.shots = int(ensembles), int(shots)
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.clip_norm = float(clip_norm)
        self.sensitivity = esa_l2_sensitivity(self.clip_norm, relation)
        self.add_remove_sensitivity = esa_l2_sensitivity(self.clip_norm, Neighbouring.ADD_REMOVE)
        self.sigma = _sigma(self.epsilon, self.delta, self.sensitivity)
        self.n_candidates = int(candidates)
        self._candidates: dict[str, tuple[list[str], np.ndarray]] = {}

    def zero_shot(self, oracle, fmt, query) -> tuple[list[str], np.ndarray]:
        """Candidates generated without private data (fixed seed, cached per query)."""
        hit = self._candidates.get(query)
        if hit is None:
            rng = np.random.default_rng(np.random.SeedSequence([0x2E50, len(query)]))
            texts = oracle.sample_texts([fmt.prompt([], query)] * self.n_candidates, rng)
            hit = (texts, oracle.embed(texts))
            self._candidates[query] = hit
        return hit

    def release(self, oracle, fmt, records, query, n_queries, rng, *, text_outputs=False):
        if text_outputs:
            raise InvalidParameter("esa releases zero-shot candidates only; use a text-output mechanism for injection")
        cand_texts, cand_emb = self.zero_shot(oracle, fmt, query)
        signal = None
        outputs = []
        for _ in range(n_queries):
            groups = partition(len(records), self.ensembles, self.shots, rng)
            texts = oracle.sample_texts([fmt.prompt([records[i] for i in g], query) for g in groups], rng)
            emb = oracle.embed(texts)
            noise = rng.standard_normal(emb.shape[1]) * self.sigma
            mean = kernels.embed_aggregate(emb, self.clip_norm, noise)
            signal = mean if signal is None else signal + mean
            outputs.append(cand_texts[kernels.nearest_cosine(mean, cand_emb)])
        return Release(signal=signal / n_queries, outputs=outputs)

    def describe(self) -> dict:
        return {**super().describe(), "clip_norm": self.clip_norm}
