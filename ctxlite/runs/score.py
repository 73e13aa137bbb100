"""A score run: examples scored on one backend with one template and settings, its log, its verdict.

:func:`run_score` is what ``ctxlite score`` runs and what a program embedding ctxlite calls. It
owns what a run *means*: the identity its log is bound to (the backend's, the template text, the
settings), the log itself (locked for one writer, hash-chained, resumed for the examples whose
input is unchanged and refused when it holds other inputs), the data set's summary, the gate's
verdict and the end line. A gate needs every n-gram measured, so with a gate ``search="auto"``
means exhaustive search. The result, :class:`ScoreRun`, is rendered by :mod:`ctxlite.reporting`
(table, JSON, JUnit, HTML), and ``ctxlite report`` builds the same object from the log alone
(:func:`ctxlite.runs.report.report_log`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace

from ctxlite.errors import DataError, InvalidParameter
from ctxlite.gates import InfluenceGate, Verdict, score_verdict
from ctxlite.influence.analysis import Summary, summarize
from ctxlite.influence.results import ExampleResult
from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings
from ctxlite.influence.search import ADAPTIVE_FROM_TOKENS
from ctxlite.logformat import format_of_run
from ctxlite.records import RecordLog
from ctxlite.runs.log import LogState, finish
from ctxlite.runs.ordered import InOrder
from ctxlite.runs.progress import Notes, Progress, Serialized, Silent
from ctxlite.runtime.backend import ConcurrentRequests, TeacherForcing, require
from ctxlite.runtime.engine import LocalModel
from ctxlite.runtime.planning import Plan, plan_run
from ctxlite.runtime.templates import PromptTemplate, get_template

KIND = "score-run"
"""The ``type`` of a score log's header."""

ADAPTIVE_PLAN = (
    "adaptive search refines where the logits say; a plan computes none, so its ablations were counted "
    "on the search's shortest path: K blocks refined down to K n-grams"
)
"""What a plan of adaptive search counts."""

DESCENT_PLAN = (
    "a hierarchical search descends into the unit of largest τ_u, which a plan does not compute: its "
    "ablations were counted for the passage and sentence a dry run happened to pick, whose sentences "
    "and n-grams may be more or fewer than the real run's"
)
"""What a plan of a hierarchical search (``--unit passage|sentence --search adaptive``) counts."""

__all__ = ["ADAPTIVE_FROM_TOKENS", "ScoreRun", "plan_score", "run_score", "score_identity"]


@dataclass
class ScoreRun:
    """One score run, finished or (read from a log) partial.

    ``keys`` name the examples in input order and ``results`` hold each one's result; ``summary``
    is the data set's (None for a single example, or a partial run of fewer than two);
    ``verdict`` is the gate's (``gate`` None: reported only); ``identity`` is what the log is bound
    to; ``log`` the log as it stands (None without one). A run made now also says which examples
    it read from its log (``reused``) and what ran them (``meta``: versions, the backend's
    description, the template, the settings); ``notes`` are the lines a person was told."""

    keys: list[str]
    results: list[ExampleResult]
    summary: Summary | None
    verdict: Verdict
    identity: dict
    complete: bool = True
    log: LogState | None = None
    single: bool = False
    reused: list[str] = field(default_factory=list)
    meta: dict | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def scored(self) -> list[str]:
        """The examples this run scored (the rest it read from its log)."""
        return [k for k in self.keys if k not in self.reused]

    def check_gate_finished(self) -> None:
        """Refuse (``DataError``) a gate on a partial run (read from its log) that nothing finished so
        far trips: it may neither pass nor stay inconclusive on an unfinished run."""
        if not self.complete and self.verdict.gate is not None and not self.verdict.failures:
            raise DataError(
                f"{self.log.path} is a partial run: nothing finished so far trips the gate, but a gate needs a "
                "finished run (re-run the same command to finish it)"
            )


def score_identity(backend, template: PromptTemplate, settings: InfluenceSettings) -> dict:
    """What a score log is bound to: the backend's identity (model, software, engine settings, or
    the server's), the template text (and a chat template's system message) and the settings (the
    unit settings only when units are scored: a log of n-grams keeps the identity it had before them;
    ``copy_sources`` only for a hierarchical search with copy sources)."""
    fields = asdict(settings)
    if settings.unit == "ngram":
        del fields["unit"], fields["sentence_language"], fields["duplicate_threshold"]
    if not (settings.descends and settings.copy_sources):
        # a descent without copy sources measures what one did before the setting existed, and other
        # runs nothing it changes: their logs keep the identity they had
        del fields["copy_sources"]
    identity = {**backend.identity(), "template": template.text, "settings": fields}
    if template.chat:  # the conversation the model reads, besides the template text
        identity["chat"] = {"system": template.system}
    return identity


def gated_settings(settings: InfluenceSettings, gate: InfluenceGate | None) -> InfluenceSettings:
    """A gate needs every n-gram measured: with one, ``search="auto"`` means exhaustive search."""
    if gate is not None and settings.search == "auto":
        return replace(settings, search="exhaustive")
    return settings


class _Job:
    """The examples, settings, identity and log of one run, before any model work."""

    def __init__(self, backend, examples, settings, template, out, progress, gate, data):
        self.single = isinstance(examples, Example)
        self.examples = [examples] if self.single else list(examples)
        self.keys = [ex.id or ("example" if self.single else "") for ex in self.examples]
        if any(not k for k in self.keys) or len(set(self.keys)) != len(self.keys):
            raise InvalidParameter("every example of a data set needs an id of its own (Example.id)")
        self.examples = [replace(ex, id=k) for ex, k in zip(self.examples, self.keys)]
        self.gate = gate
        self.settings = gated_settings(settings or InfluenceSettings(), gate)
        self.template = template if isinstance(template, PromptTemplate) else get_template(template)
        self.backend, self.out, self.data = backend, out, data
        self.progress = Serialized(progress or Silent())  # ticks may come from the examples' threads
        self.notes = Notes(self.progress)
        if not isinstance(backend, LocalModel):  # a server without log-probabilities: before a log is opened
            require(backend, [TeacherForcing], "scoring")
        self.identity = score_identity(backend, self.template, self.settings)
        self.log: RecordLog | None = None
        self.reused: list[str] = []

    def open_log(self, stack: ExitStack) -> None:
        """Open ``out`` (locked for the run) and find what it holds for these inputs: a logged result is
        reused only for the identical input; a log whose finished results match none of the inputs is
        another input's and is refused; an example whose input changed is scored again."""
        version = format_of_run(self.settings.unit, self.settings.descends)
        self.log = stack.enter_context(RecordLog(self.out, self.identity, kind=KIND, schema_version=version))
        log = self.log
        finished = [ex.id for ex in self.examples if log.done(ex.id)]
        self.reused = [ex.id for ex in self.examples if log.get(ex.id, ex.input_hash()) is not None]
        if len(log) and not self.reused:
            what = f"--data {self.data}" if self.data else "this --context/--query/--response"
            raise DataError(
                f"{self.out} holds results for other inputs (none of its {len(log)} finished example(s) has the "
                f"context, query, response and source of {what}): choose another --out"
            )
        for key in finished:
            if key not in self.reused:
                self.notes(f"{key}: its input changed since it was logged; scoring it again")

    def engine(self, stack: ExitStack):
        """The backend, opened now if it is a model not loaded yet (and closed when the run ends)."""
        if isinstance(self.backend, LocalModel):
            return stack.enter_context(self.backend.open())
        return self.backend

    @property
    def todo(self) -> list[Example]:
        return [ex for ex in self.examples if ex.id not in self.reused]


def run_score(
    backend,
    examples: Example | Iterable[Example],
    settings: InfluenceSettings | None = None,
    *,
    template: str | PromptTemplate = "qa",
    out: str | os.PathLike | None = None,
    progress: Progress | None = None,
    gate: InfluenceGate | None = None,
    data: str | os.PathLike | None = None,
) -> ScoreRun:
    """Score ``examples`` (one :class:`Example`, or a data set of them, each with its own ``id``) on
    ``backend`` (an open backend, or a :class:`~ctxlite.runtime.engine.LocalModel` opened only after
    the log is checked) and return the :class:`ScoreRun`.

    ``out``: the log each result is appended to as it finishes (so Ctrl-C loses only the example
    in flight); a re-run resumes it, reusing each result whose input is unchanged. ``gate``: the
    influence gate of the verdict. ``progress`` is told the examples and ablations as they go and
    the notes (:class:`~ctxlite.runs.progress.Progress`). ``data``: the file the examples came from,
    named in messages. A single example has no data-set summary; a data set always has one.

    >>> from ctxlite import Engine                                   # doctest: +SKIP
    >>> from ctxlite.influence.dataset import load_examples
    >>> with Engine() as eng:
    ...     run = run_score(eng, load_examples("data.jsonl"), out="scores.jsonl", gate=InfluenceGate(5.0))
    >>> run.verdict.outcome
    """
    job = _Job(backend, examples, settings, template, out, progress, gate, data)
    with ExitStack() as stack:
        if out is not None:
            job.open_log(stack)
        engine = job.engine(stack)
        meta = {
            "ctxlite": job.identity["software"]["ctxlite"],
            "engine": engine.describe(),
            "template": asdict(job.template),
            "settings": job.identity["settings"],
            "identity": job.identity,
        }
        results = _score_all(engine, job)
        summary = None if job.single else summarize(results)
        if job.log is not None:
            end = {"examples": job.keys, "summary": None if summary is None else summary.to_dict()}
            finish(job.log, end, job.notes)
    verdict = score_verdict(job.keys, results, None if gate is None else gate.nats, job.identity)
    state = None if job.log is None else LogState.of(job.log, out)
    if state is not None:
        verdict.properties["log.head"] = state.head
    return ScoreRun(
        job.keys,
        results,
        summary,
        verdict,
        job.identity,
        log=state,
        single=job.single,
        reused=job.reused,
        meta=meta,
        notes=job.notes.kept,
    )


def _score_all(engine, job: _Job) -> list[ExampleResult]:
    """Each example's result: read from the log when its input is unchanged, else scored and
    appended to the log as it finishes, in input order (so Ctrl-C keeps every example before the
    first one unfinished, and the log is the same whichever examples were in flight together)."""
    todo = job.todo
    width = engine.concurrency if isinstance(engine, ConcurrentRequests) else 1
    scored = _together(engine, job, todo, width) if width > 1 and len(todo) > 1 else _one_by_one(engine, job, todo)
    results = []
    with scored as in_order:
        fresh = iter(in_order)
        for i, example in enumerate(job.examples):
            key = example.id
            if key in job.reused:
                results.append(ExampleResult.from_dict(job.log.records[key]["result"]))
                continue
            job.progress.step("examples", i, len(job.examples), key)
            result = next(fresh)
            for r in result.results:
                if r.search is not None and r.search.adaptive and r.search.measured_every_window:
                    job.notes(
                        f"ctxlite: note: {key}: --search adaptive measured all {r.search.windows} n-gram windows "
                        "(a context this short has no blocks to search): the search was exhaustive"
                    )
                    break
            _note_snapped(job, key, result)
            results.append(result)
            if job.log is not None:
                job.log.append(key, {"type": "example", "result": result.to_dict()}, input_hash=example.input_hash())
    return results


def _note_snapped(job: _Job, key: str, result: ExampleResult) -> None:
    """One note for an example whose units were snapped outwards to whole tokens (the units are the
    same tokens at every λ)."""
    snapped = [u for u in (result.results[0].units or ()) if u.snapped] if result.results else []
    if snapped:
        shown = [f"{u.label} {u.char_start}–{u.char_end} → {u.removed_start}–{u.removed_end}" for u in snapped[:3]]
        job.notes(
            f"ctxlite: note: {key}: {len(snapped)} unit(s) snapped outwards to whole tokens, removing more "
            f"characters than given ({', '.join(shown)}{', …' if len(snapped) > 3 else ''})"
        )


class _OneByOne:
    """The examples scored one after another in the calling thread (a local engine: one model)."""

    def __init__(self, scorer: InfluenceScorer, todo: list[Example]):
        self.scorer, self.todo = scorer, todo

    def __iter__(self) -> Iterator[ExampleResult]:
        return (self.scorer.score(example) for example in self.todo)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def _one_by_one(engine, job: _Job, todo: list[Example]) -> _OneByOne:
    return _OneByOne(InfluenceScorer(engine, job.template, job.settings, progress=job.progress.tick), todo)


class _Abandoned(Exception):
    """Raised in an example still in flight after the run stopped waiting for it (an earlier
    example failed, or Ctrl-C): its next request is not sent."""


def _together(engine, job: _Job, todo: list[Example], width: int) -> InOrder:
    """The examples in flight together on a backend of concurrent requests (a server): ``width``
    examples scored at once on worker threads, their requests sharing the backend's ``width``
    slots (an earlier example's requests sent first), and at most ``2 · width`` started and not yet
    logged; the results in input order (:class:`~ctxlite.runs.ordered.InOrder`). The progress
    line follows the example logged next."""
    checked = InfluenceScorer(engine, job.template, job.settings)  # refuses what it refuses before any example

    def score(k: int, example: Example) -> ExampleResult:
        def tick(label: str, done: int, total: int) -> None:
            if runner.closed:
                raise _Abandoned(example.id)
            if runner.head == k:
                job.progress.tick(label, done, total)

        scorer = copy.copy(checked)
        scorer.progress = tick
        with engine.in_turn(k):  # the earlier examples' requests first: they are logged first
            return scorer.score(example)

    runner = InOrder(score, todo, workers=width, window=2 * width)
    return runner


def plan_score(
    backend,
    examples: Example | Sequence[Example],
    settings: InfluenceSettings | None = None,
    *,
    template: str | PromptTemplate = "qa",
    out: str | os.PathLike | None = None,
    progress: Progress | None = None,
    gate: InfluenceGate | None = None,
    data: str | os.PathLike | None = None,
) -> Plan:
    """What :func:`run_score` with these arguments would cost on this machine (the forward passes
    and tokens of the examples ``out`` does not hold yet, and a time estimate), without running
    it: nothing is scored and no log is written (an existing ``out`` is only read)."""
    job = _Job(backend, examples, settings, template, out, progress, gate, data)
    with ExitStack() as stack:
        if out is not None and os.path.exists(out):
            job.open_log(stack)
        engine = job.engine(stack)
        scorer = InfluenceScorer(engine, job.template, job.settings)
        todo = job.todo

        def run():
            for ex in todo:
                scorer.score(ex)

        searched = any(job.settings.search_for(len(scorer.encode(ex).context)) == "adaptive" for ex in todo)
        estimate = ADAPTIVE_PLAN if searched and job.settings.ngram is not None else None
        estimate = DESCENT_PLAN if job.settings.descends else estimate
        return plan_run([engine], run, any(ex.response is None for ex in todo), estimate)
