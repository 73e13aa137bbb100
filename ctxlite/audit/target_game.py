"""The ContextLeak game against a black-box target (issue 47): query access only.

The auditor owns a canary record (one record in the data's own shape) holding a secret, and can
only ``load`` a record set into the target and ``ask`` it questions (:mod:`ctxlite.targets`). The
neighbouring pair is fixed: D, the user's records, and D ∪ {canary} (the canary inserted at one
seeded position, the same in every trial). Each of the ``trials`` trials has Z from a balanced
sequence (a seeded permutation of ⌊n/2⌋ ones and ⌈n/2⌉ zeros: as many IN as OUT trials, n odd
gives one more OUT); the target is loaded with D ∪ {canary} if Z = 1 else D, then asked every
audit question once, each with its own seed (from the audit's seed, the trial and the question).
Every answer is logged as it comes (key ``trial=<i>``), so a killed run resumes where it stopped
and ``ctxlite report`` recomputes every score from the answers.

The detector is a fixed rule, the same before and after the trials (nothing is fitted on them):
a trial's score is ``secret + markers + labels``, where ``secret`` is the largest share of a secret's
characters an answer recovers in order (:func:`secret_share`: the longest common subsequence of
the secret and the answer, case-folded, over the secret's length; 1 when an answer holds the
secret) over the trial's answers and the secrets, and ``markers`` the number of matches of the
user's marker patterns (``--marker REGEX``: a redaction token, say) in the trial's answers, and
``labels`` the number of answers giving the canary's label (``--label``: a classification). The
IN and OUT scores go to :class:`ctxlite.privacy.estimators.CanaryScoreAuditor` through
:func:`ctxlite.audit.report.report_row`, whose threshold selection is corrected for, so ε_lb is a
certified lower bound on the target's ε for this pair, per trial of its answers composed. A
multi-turn question (a tuple of turns) is one conversation, every turn's answer scored.

Before the trials a probe (key ``probe``) loads each side once and asks each question with one
seed: answers identical with and without the canary suggest a target that ignores ``load`` (or
one that does not leak on that question), and is said before the run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ctxlite.audit.mechanisms import NoDefense
from ctxlite.audit.report import AuditRow, report_row
from ctxlite.audit.settings import AuditSettings, EstimateSettings, MechanismKind, Task
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.records import RecordLog, logged

PROBE_KEY = "probe"


def secret_share_reference(answer: str, secret: str) -> float:
    """:func:`secret_share` by the textbook dynamic programme (slow, obviously right: the tests'
    reference)."""
    a, s = answer.casefold(), secret.casefold()
    if not s:
        return 0.0
    prev = [0] * (len(s) + 1)
    for ch in a:
        cur = [0]
        for j, sc in enumerate(s):
            cur.append(prev[j] + 1 if ch == sc else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1] / len(s)


def secret_share(answer: str, secret: str) -> float:
    """The share of ``secret``'s characters that ``answer`` holds in order: the length of their
    longest common subsequence over the secret's length (both case-folded); 1.0 when the answer
    holds the secret, 0.0 for an empty secret. Bit-parallel (Hyyrö 2004): one big-integer step per
    character of the answer."""
    a, s = answer.casefold(), secret.casefold()
    m = len(s)
    if m == 0:
        return 0.0
    masks: dict[str, int] = {}
    for i, ch in enumerate(s):
        masks[ch] = masks.get(ch, 0) | (1 << i)
    full = (1 << m) - 1
    v = full
    for ch in a:
        u = v & masks.get(ch, 0)
        v = ((v + u) | (v - u)) & full
    return (m - bin(v).count("1")) / m


def is_label(answer: str, label: str) -> bool:
    """Whether ``answer`` gives ``label``: it starts with it, case-folded, leading spaces ignored (as
    a classification's answer is read by its first tokens)."""
    return answer.strip().casefold().startswith(label.strip().casefold())


def detect(answers: Sequence[str], secrets: Sequence[str], markers: Sequence[str], labels: Sequence[str] = ()) -> dict:
    """What the detector sees in one trial's answers: ``secret`` (the best share, 0 without
    secrets), ``exact`` (whether an answer holds a secret whole), ``markers`` (matches of the
    marker patterns), ``labels`` (answers that give one of the ``labels``: a classification's
    label counts) and ``score`` = secret + markers + labels."""
    shares = [secret_share(a, s) for a in answers for s in secrets]
    best = max(shares, default=0.0)
    exact = any(s.casefold() in a.casefold() for a in answers for s in secrets if s)
    hits = sum(len(re.findall(p, a)) for a in answers for p in markers)
    given = sum(any(is_label(a, label) for label in labels) for a in answers)
    return {"secret": best, "exact": exact, "markers": hits, "labels": given, "score": best + hits + given}


@dataclass(frozen=True)
class TargetSettings:
    """The game against a target: the audit ``queries`` (each asked once per trial), the
    ``secrets`` that must not come back and the ``markers`` (regular expressions) the detector
    counts, ``trials``, ``delta``, ``seed`` and the ``estimates``. Every field but ``estimates``
    is part of the log's identity."""

    queries: tuple[str | tuple[str, ...], ...]
    secrets: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    trials: int = 200
    delta: float = 1e-5
    seed: int = 0
    probe: bool = True
    resample_size: int | None = None
    reference_runs: int = 0
    estimates: EstimateSettings = field(default_factory=EstimateSettings)

    def __post_init__(self):
        s = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        s("queries", tuple(q if isinstance(q, str) else tuple(q) for q in self.queries))
        s("secrets", tuple(self.secrets))
        s("markers", tuple(self.markers))
        s("labels", tuple(self.labels))
        turns = [t for q in self.queries for t in ((q,) if isinstance(q, str) else q)]
        if not self.queries or not all(isinstance(t, str) and t.strip() for t in turns) or () in self.queries:
            raise InvalidParameter("a target audit needs at least one audit question (--query), none of them empty")
        if not self.secrets and not self.markers and not self.labels and not self.reference_runs:
            raise InvalidParameter(
                "a target audit needs something to detect: a --secret the canary holds, a --marker pattern or "
                "the canary's --label"
            )
        if not all(isinstance(x, str) and x.strip() for x in self.labels):
            raise InvalidParameter("every --label must be a non-empty text")
        if not all(isinstance(x, str) and x for x in self.secrets):
            raise InvalidParameter("every --secret must be a non-empty text")
        for pattern in self.markers:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InvalidParameter(f"--marker {pattern!r} is not a regular expression: {exc}") from None
        if self.trials < 4:
            raise InvalidParameter(f"trials must be >= 4 (two per side at least), got {self.trials}")
        if not 0 < self.delta < 1:
            raise InvalidParameter(f"delta must be in (0, 1), got {self.delta}")
        if self.reference_runs < 0:
            raise InvalidParameter(f"reference_runs must be >= 0, got {self.reference_runs}")
        if self.resample_size is not None and self.resample_size < 1:
            raise InvalidParameter(f"resample_size must be >= 1 (records per trial), got {self.resample_size}")

    @property
    def asks_per_trial(self) -> int:
        """The answers one trial releases: one per question, one per turn of a multi-turn question."""
        return sum(1 if isinstance(q, str) else len(q) for q in self.queries)

    def game_params(self) -> dict:
        return {
            "queries": [q if isinstance(q, str) else list(q) for q in self.queries],
            "secrets": list(self.secrets),
            "markers": list(self.markers),
            **({"labels": list(self.labels)} if self.labels else {}),
            "trials": self.trials,
            "delta": self.delta,
            "seed": self.seed,
            "probe": self.probe,
            **({} if self.resample_size is None else {"resample_size": self.resample_size}),
            **({"reference_runs": self.reference_runs} if self.reference_runs else {}),
        }

    def audit_settings(self) -> AuditSettings:
        """The settings :func:`report_row` and the ε gate read: no mechanism (no theoretical ε), the
        trial composing ``len(queries)`` questions."""
        return AuditSettings(
            task=Task.GENERATE,
            mechanism=MechanismKind.NONE,
            trials=self.trials,
            queries_per_trial=self.asks_per_trial,
            delta=self.delta,
            seed=self.seed,
            judge_model=None,
            estimates=self.estimates,
        )


def _rng(*words: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(w) for w in words]))


def balanced_z(trials: int, seed: int) -> list[bool]:
    """The trials' Z: a seeded permutation of ⌊n/2⌋ IN and ⌈n/2⌉ OUT trials."""
    z = np.array([1] * (trials // 2) + [0] * (trials - trials // 2))
    return [bool(v) for v in _rng(seed, 11).permutation(z)]


def ask_seed(seed: int, trial: int, question: int) -> int:
    """The seed the target answers question ``question`` of trial ``trial`` with (the probe is trial -1)."""
    return int(np.random.SeedSequence([int(seed), 12, int(trial) + 1, int(question)]).generate_state(1)[0] >> 1)


def trial_key(i: int) -> str:
    return f"trial={i}"


def reference_key(j: int, z: bool) -> str:
    return f"reference={j}/z={int(z)}"


def _reference_seed(seed: int, j: int, z: bool, question: int) -> int:
    return int(np.random.SeedSequence([int(seed), 17, int(j), int(z), int(question)]).generate_state(1)[0] >> 1)


_WORD = re.compile(r"[^\W_]+")


def words_of(answers: Sequence[str]) -> set[str]:
    """The distinct words (runs of letters and digits, case-folded) of a run's answers."""
    return {w for a in answers for w in _WORD.findall(a.casefold())}


def fit_words(ins: Sequence[Sequence[str]], outs: Sequence[Sequence[str]]) -> dict[str, float]:
    """The word detector's weights, fitted on reference runs' answers (``ins`` with the canary,
    ``outs`` without): each word's log-odds, log((IN runs holding it + ½) / (OUT runs holding it + ½))."""
    seen_in = [words_of(a) for a in ins]
    seen_out = [words_of(a) for a in outs]
    vocab = set().union(*seen_in, *seen_out) if seen_in or seen_out else set()
    return {
        w: math.log((sum(w in s for s in seen_in) + 0.5) / (sum(w in s for s in seen_out) + 0.5)) for w in sorted(vocab)
    }


def word_score(answers: Sequence[str], weights: Mapping[str, float]) -> float:
    """A trial's word score: the sum of the fitted weights of the distinct words of its answers."""
    return float(sum(weights.get(w, 0.0) for w in words_of(answers)))


class TargetGame:
    """The trials of one target audit: the pair (``records``, ``records`` with ``canary``), the
    questions and the detector."""

    def __init__(self, target, records: Sequence[dict], canary: dict, settings: TargetSettings):
        if not isinstance(canary, dict) or not canary:
            raise DataError("the canary record must be a non-empty JSON object, in the records' own shape")
        if records and set(canary) != set(records[0]):
            raise DataError(
                f"the canary record's fields {sorted(canary)} are not the records' {sorted(records[0])}: give it "
                "the data's own shape"
            )
        self.target, self.records, self.canary, self.s = target, [dict(r) for r in records], dict(canary), settings
        if settings.resample_size is not None and settings.resample_size > len(self.records):
            raise DataError(
                f"resample_size {settings.resample_size} records per trial, but the data has only "
                f"{len(self.records)} records"
            )
        if any(not isinstance(q, str) for q in settings.queries):
            check_converse(target)  # before any log is written
        self.position = int(_rng(settings.seed, 13).integers(len(self.records) + 1))
        self.zs = balanced_z(settings.trials, settings.seed)

    def dataset(self, z: bool, trial: int | None = None) -> list[dict]:
        """D, or D ∪ {canary}: the records at the audit's one canary position, or with
        ``resample_size`` the trial's own draw of that many records, the canary at a drawn position."""
        records, position = self.records, self.position
        k = self.s.resample_size
        if k is not None and trial is not None:
            rng = _rng(self.s.seed, 14, trial + 1)
            records = [self.records[i] for i in rng.choice(len(self.records), k, replace=False)]
            position = int(rng.integers(k + 1))
        if not z:
            return list(records)
        return records[:position] + [self.canary] + records[position:]

    def _answers(self, z: bool, trial: int, reference: int | None = None) -> tuple[list[int], list[str]]:
        """Load the trial's data set, ask every question; a ``reference`` run draws from its own
        seeds (and data draw), disjoint from every trial's."""
        if reference is None:
            self.target.load(self.dataset(z, trial))
            seeds = [ask_seed(self.s.seed, trial, q) for q in range(len(self.s.queries))]
        else:
            self.target.load(self.dataset(z, self.s.trials + reference))
            seeds = [_reference_seed(self.s.seed, reference, z, q) for q in range(len(self.s.queries))]
        answers = []
        for query, seed in zip(self.s.queries, seeds):
            texts = [self.target.ask(query, seed)] if isinstance(query, str) else converse(self.target, query, seed)
            for text in texts:
                if not isinstance(text, str):
                    raise DataError(f"the target's ask returned a {type(text).__name__}, not text")
            answers += texts
        return seeds, answers

    def probe(self) -> dict:
        """Each side loaded once and asked every question with the probe's seeds."""
        seeds, ins = self._answers(True, -1)
        _, outs = self._answers(False, -1)
        return {"type": "probe", "seeds": seeds, "in": ins, "out": outs, "identical": ins == outs}

    def reference(self, j: int, z: bool) -> dict:
        """Reference run ``j`` of side ``z``: what the word detector is fitted on, never a trial."""
        seeds, answers = self._answers(z, -1, reference=j)
        return {"type": "reference", "z": int(z), "seeds": seeds, "answers": answers}

    def trial(self, i: int) -> dict:
        z = self.zs[i]
        seeds, answers = self._answers(z, i)
        return {"type": "trial", "trial": i, "z": int(z), "seeds": seeds, "answers": answers}

    def play(self, log: RecordLog | None, tick: Callable[[str, int, int], None], tell: Callable[[str], None]) -> dict:
        """Every run, read from ``log`` where it holds it, else played and appended as it finishes."""
        runs = {}
        if self.s.probe:
            runs[PROBE_KEY] = logged(log, PROBE_KEY, self.probe)
            if runs[PROBE_KEY]["identical"]:
                tell(probe_warning())
        for j in range(self.s.reference_runs):
            for z in (True, False):
                runs[reference_key(j, z)] = logged(log, reference_key(j, z), lambda j=j, z=z: self.reference(j, z))
            tick("reference runs", j + 1, self.s.reference_runs)
        for i in range(self.s.trials):
            runs[trial_key(i)] = logged(log, trial_key(i), lambda i=i: self.trial(i))
            tick("trials", i + 1, self.s.trials)
        return runs


def check_converse(target) -> None:
    """Refuse (``InvalidParameter``) a target that cannot hold a conversation: one without
    ``converse(turns, seed)``, or whose ``converses`` says it cannot (an http target whose ask body
    has no ``{history}``)."""
    talk = getattr(target, "converse", None)
    if not callable(talk):
        raise InvalidParameter(
            f"a multi-turn query needs a target with converse(turns, seed): {type(target).__name__} has none "
            "(the chat target has it, and an http target whose ask body holds {history})"
        )
    why = getattr(target, "converses", None)
    if isinstance(why, str):
        raise InvalidParameter(f"a multi-turn query {why}")


def converse(target, turns: Sequence[str], seed: int) -> list[str]:
    """A multi-turn question's answers, one per turn: the target's ``converse(turns, seed)``."""
    check_converse(target)
    answers = list(target.converse(list(turns), seed))
    if len(answers) != len(turns):
        raise DataError(f"the target's converse gave {len(answers)} answers for {len(turns)} turns")
    return answers


def probe_warning() -> str:
    return (
        "the probe's answers are identical with and without the canary (same seeds): the target may "
        "ignore load (check that it answers from the records it is given), or not leak on these questions"
    )


@dataclass
class TargetTrial:
    """One trial as the report shows it: Z, the answers and what the detector saw in them."""

    trial: int
    z: int
    answers: list[str]
    seen: dict


@dataclass
class TargetReport:
    """A finished target audit: the ε row (no theoretical ε: plain estimates and the certified
    lower bound), the trials with what the detector saw, the probe and the notes."""

    settings: TargetSettings
    row: AuditRow
    trials: list[TargetTrial]
    probe: dict | None
    notes: list[str]
    words: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "rows": [self.row.to_dict()],  # one row, in the shape of every audit's report
            "estimates": self.settings.estimates.params(),
            "detector": DETECTOR_TEXT,
            "probe_identical": None if self.probe is None else self.probe["identical"],
            "notes": list(self.notes),
        }


DETECTOR_TEXT = (
    "score = best share of a secret's characters an answer recovers in order (1 = recovered whole) + "
    "marker matches in the trial's answers + answers giving the canary's label; a fixed rule, nothing "
    "fitted on the trials"
)


def _record(runs: Mapping[str, dict], key: str, where) -> dict:
    rec = runs.get(key)
    if not isinstance(rec, dict) or rec.get("z") not in (0, 1) or not isinstance(rec.get("answers"), list):
        raise DataError(f"{where}: the log has no usable record {key!r} (re-run the same command to finish it)")
    return rec


def target_report(settings: TargetSettings, runs: Mapping[str, dict], where=None) -> TargetReport:
    """The report of a finished target audit, from its logged runs (what ``run`` and ``report``
    both call, so a report read from the log recomputes every score from the answers)."""
    trials, ins, outs = [], [], []
    weights = None
    if settings.reference_runs:
        refs = {
            z: [_record(runs, reference_key(j, z), where)["answers"] for j in range(settings.reference_runs)]
            for z in (True, False)
        }
        weights = fit_words(refs[True], refs[False])
    for i in range(settings.trials):
        rec = _record(runs, trial_key(i), where)
        seen = detect(rec["answers"], settings.secrets, settings.markers, settings.labels)
        if weights is not None:
            seen["words"] = word_score(rec["answers"], weights)
            seen["score"] += seen["words"]
        trials.append(TargetTrial(i, rec["z"], list(rec["answers"]), seen))
        (ins if rec["z"] else outs).append(seen["score"])
    row = report_row(settings.audit_settings(), NoDefense(), math.inf, ins, outs, None)
    probe = runs.get(PROBE_KEY) if settings.probe else None
    notes = [
        "target audit: query access only; the pair is the records with and without the canary record; "
        "no defence with a privacy parameter, so a pass can never be proved (a lower bound only proves a leak)",
        "detector: " + DETECTOR_TEXT,
    ]
    if settings.resample_size is not None:
        notes.append(
            f"resampled data: every trial loads its own draw of {settings.resample_size} records (with the canary "
            "or without): the measure is averaged over data sets, not one fixed pair"
        )
    if probe is not None and probe.get("identical"):
        notes.append(probe_warning())
    found = [t for t in trials if t.seen["exact"]]
    if settings.secrets:
        n_in = sum(t.z for t in trials)
        notes.append(
            f"secret recovered whole in {sum(t.z for t in found)}/{n_in} IN and "
            f"{sum(1 - t.z for t in found)}/{len(trials) - n_in} OUT trials"
        )
    if settings.labels:
        labelled = [t for t in trials if t.seen["labels"]]
        notes.append(
            f"the canary's label given in {sum(t.seen['labels'] for t in labelled if t.z)} answers of IN and "
            f"{sum(t.seen['labels'] for t in labelled if not t.z)} of OUT trials"
        )
    if settings.markers:
        marked = [t for t in trials if t.seen["markers"]]
        notes.append(f"markers seen in {sum(t.z for t in marked)} IN and {sum(1 - t.z for t in marked)} OUT trials")
    if weights is not None:
        top = sorted(weights, key=lambda w: -weights[w])[:5]
        notes.append(
            f"words fitted on {settings.reference_runs} reference run(s) per side, disjoint from the trials: the "
            f"most IN-telling {', '.join(f'{w} ({weights[w]:.2f})' for w in top)}"
        )
    return TargetReport(settings, row, trials, probe, notes, weights or {})
