"""``ctxlite score``: context influence of a private context on a response."""

from __future__ import annotations

import sys
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

import click

from ctxlite.cli.options import (
    TEXT,
    NumberList,
    build_engine,
    conclude,
    default,
    emit_json,
    emit_plan,
    engine_config,
    engine_kwargs,
    engine_options,
    fail_above_influence_option,
    finish_log,
    given_explicitly,
    hold_out_lock,
    json_option,
    junit_option,
    open_server,
    plan_option,
    progress,
    server_options,
    verdict_json,
    wants_json,
)
from ctxlite.cli.progress import ProgressLine, progress_line
from ctxlite.errors import DataError
from ctxlite.influence.scorer import InfluenceSettings
from ctxlite.influence.search import ADAPTIVE_FROM_TOKENS, SEARCHES
from ctxlite.outputs import refuse_same_files
from ctxlite.reporting.labels import result_label
from ctxlite.runtime.backend import require_teacher_forcing
from ctxlite.runtime.sampling import SamplingSettings


def _s(name: str):
    """A sampling default (SamplingSettings owns it)."""
    return default(SamplingSettings, name)


def _i(name: str):
    """An influence default (InfluenceSettings owns it)."""
    return default(InfluenceSettings, name)


def _settings(o):
    sampling = SamplingSettings(
        temperature=o.temperature,
        top_k=o.top_k,
        top_p=o.top_p,
        min_new_tokens=o.min_new_tokens,
        max_new_tokens=o.max_new_tokens,
        seed=o.seed,
    )
    return InfluenceSettings(
        lambdas=o.lam,
        ngram=None if o.doc else o.ngram,
        stride=None if o.doc else o.stride,
        null_ablations=o.null_ablations,
        exact=o.exact,
        epsilons=o.epsilon or (),
        sampling=sampling,
        top_spans=o.top,
        context_sizes=o.context_sizes or (),
        # a gate needs every n-gram measured: auto then means exhaustive
        search="exhaustive" if o.search == "auto" and o.fail_above_influence is not None else o.search,
        refine_ratio=o.refine_ratio,
    )


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _read_context(path: str) -> str:
    from ctxlite.records import read_text

    if path == "-":
        data = sys.stdin.buffer.read()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"standard input is not UTF-8 text (byte offset {exc.start})") from None
    return read_text(path, "context file")


def _examples(o):
    """(key, Example) pairs from --data or from --context/--query/--response."""
    from ctxlite.influence.scorer import Example
    from ctxlite.records import read_jsonl, read_text

    if o.data:
        lines = read_jsonl(
            o.data, required=("context",), strings=("id", "context", "query", "response", "source", "answer")
        )
        seen = set()
        for line in lines:
            d = line.data
            key = str(d.get("id") or f"line-{line.number}")
            if key in seen:
                raise DataError(f"{o.data}:{line.number}: duplicate id {key!r}")
            seen.add(key)
            try:
                example = Example(
                    context=d["context"],
                    query=d.get("query") or "",
                    response=d.get("response"),
                    source=d.get("source"),
                    id=key,
                    answer=d.get("answer"),
                )
            except DataError as exc:
                raise DataError(f"{o.data}:{line.number}: {exc}") from None
            yield key, example
        return
    context = _read_context(o.context)
    source = read_text(o.source, "source file") if o.source else None
    yield (
        "example",
        Example(
            context=context, query=o.query or "", response=o.response, source=source, id="example", answer=o.answer
        ),
    )


ADAPTIVE_PLAN = (
    "adaptive search refines where the logits say; a plan computes none, so its ablations were counted "
    "on the search's shortest path: K blocks refined down to K n-grams"
)
"""What a plan of adaptive search counts."""

GENERATION_ONLY = ("epsilon", "top_k", "top_p", "min_new_tokens", "max_new_tokens", "seed")
"""Options that only shape a generated response (scoring a given one ignores them)."""
NGRAM_ONLY = ("ngram", "stride", "null_ablations", "exact", "top", "fail_above_influence", "search", "refine_ratio")
"""Options that only shape the n-gram ablations (--doc has none)."""


def _check_combination(o, examples) -> None:
    """A flag that would have no effect in this combination is a usage error, never silently ignored."""
    given = {name for name in vars(o) if given_explicitly(name)}
    if o.doc and given & set(NGRAM_ONLY):
        flags = ", ".join(_flag(n) for n in NGRAM_ONLY if n in given)
        raise click.UsageError(f"{flags}: no effect with --doc (document level only, no n-gram ablations)")
    if given_explicitly("refine_ratio") and o.search == "exhaustive":
        raise click.UsageError("--refine-ratio: no effect with --search exhaustive")
    if o.epsilon and (o.top_k or o.top_p < 1):
        raise click.UsageError(
            "--epsilon samples the full mixed distribution: --top-k / --top-p would drop tokens the "
            "empty-context distribution allows (an infinite ratio, no epsilon holds); leave them off"
        )
    if o.limit is not None and not o.data:
        raise click.UsageError("--limit: no effect without --data")
    if all(ex.response is not None for _, ex in examples) and given & set(GENERATION_ONLY):
        flags = ", ".join(_flag(n) for n in GENERATION_ONLY if n in given)
        raise click.UsageError(
            f"{flags}: no effect, every example has a response to score (these options shape a generated response only)"
        )


def _check_query_is_text(query: str | None) -> None:
    """``-q --doc`` reads ``--doc`` as the query (``-q`` takes a value): a query that is one of this
    command's own flags is refused, never scored."""
    if query is None:
        return
    flags = {opt for p in click.get_current_context().command.params for opt in p.opts}
    if query.split("=", 1)[0] in flags:
        raise click.UsageError(
            f"-q/--query took {query.split('=', 1)[0]!r}, one of this command's flags, as its query text: give the "
            "query after -q (quiet is --quiet, before the command: ctxlite --quiet score ...)"
        )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _plan(log, examples, out: str, data: str | None):
    """Which examples to compute: a logged result is reused only for the identical input.

    A log whose finished results match none of the inputs is another input's
    log and is refused; an example whose input changed since it was logged is
    computed again (and its new record supersedes the old one).
    """
    if log is None:
        return [], []
    finished = [key for key, _ in examples if log.done(key)]
    reused = [key for key, ex in examples if log.get(key, ex.input_hash()) is not None]
    if len(log) and not reused:
        what = f"--data {data}" if data else "this --context/--query/--response"
        raise DataError(
            f"{out} holds results for other inputs (none of its {len(log)} finished example(s) has the "
            f"context, query, response and source of {what}): choose another --out"
        )
    changed = [key for key in finished if key not in reused]
    return reused, changed


@click.command()
@click.option("--context", type=str, metavar="PATH", help="Private context: a UTF-8 text file, or - for stdin.")
@click.option("--query", "-q", type=TEXT, help="The query x filled into the template's query slot.")
@click.option("--response", "-r", type=TEXT, help="Score this response instead of generating one with CID.")
@click.option("--source", type=click.Path(dir_okay=False), help="Untruncated source for the regurgitation metrics.")
@click.option(
    "--answer",
    type=TEXT,
    default=None,
    help="A reference answer: each response's utility is its ROUGE-L against it (in --data: an answer field).",
)
@click.option(
    "--data", type=click.Path(dir_okay=False), help="JSONL dataset: context, query, [response], [source], [id]."
)
@click.option(
    "--out", type=click.Path(dir_okay=False), help="Append one JSON record per example here; re-running resumes."
)
@click.option("--limit", type=click.IntRange(1), default=None, help="Score only the first N examples of --data.")
@click.option(
    "--template",
    type=TEXT,
    default="qa",
    show_default=True,
    help="Built-in name (qa, qa_inline, summarize, pubmedqa, notes), a file (text, or .toml/.json with "
    "template, chat, system), or a literal with {context}.",
)
@click.option(
    "--chat",
    is_flag=True,
    default=False,
    help="Prompt through the model's own chat template: the template is the user turn, the response "
    "the assistant's (a template file's chat = true does the same).",
)
@click.option(
    "--ngram", "-n", type=click.IntRange(1), default=_i("ngram"), show_default=True, help="n-gram size in model tokens."
)
@click.option(
    "--stride",
    type=click.IntRange(1),
    default=None,
    help="Step between n-gram starts [default: n, disjoint]; 1 = the reference's overlapping windows.",
)
@click.option("--doc", is_flag=True, help="Document level only (no n-gram ablations).")
@click.option(
    "--context-sizes",
    type=NumberList(minimum=1, integer=True),
    default=None,
    help="Context-size analysis: score the first k tokens of the context for each k, e.g. 32,128,256.",
)
@click.option(
    "--lam",
    type=NumberList(minimum=0),
    default=",".join(f"{v:g}" for v in _i("lambdas")),
    show_default=True,
    help="CID mixing λ >= 0, comma-separated sweep.",
)
@click.option(
    "--epsilon",
    type=NumberList(minimum=0, strict=True),
    default=None,
    help="ε-bounded CID generation, comma-separated sweep (one response per λ and ε): per-step "
    "λ* = min(λ, ε / (2·max|pmi|)) [default: unbounded].",
)
@click.option(
    "--temperature",
    "-T",
    type=click.FloatRange(min=0, min_open=True),
    default=_s("temperature"),
    show_default=True,
    help="Temperature T of the scored distributions (and of CID sampling).",
)
@click.option(
    "--top-k",
    type=click.IntRange(0),
    default=_s("top_k"),
    show_default=True,
    help="Top-k filter of CID sampling (generation only); 0 = off.",
)
@click.option(
    "--top-p",
    type=click.FloatRange(min=0, max=1, min_open=True),
    default=_s("top_p"),
    show_default=True,
    help="Nucleus (top-p) filter of CID sampling (generation only); 1 = off.",
)
@click.option(
    "--min-new-tokens",
    type=click.IntRange(0),
    default=_s("min_new_tokens"),
    show_default=True,
    help="EOS/EOG banned before this many generated tokens.",
)
@click.option(
    "--max-new-tokens",
    type=click.IntRange(1),
    default=_s("max_new_tokens"),
    show_default=True,
    help="Longest generated response, in tokens.",
)
@click.option(
    "--seed",
    type=click.IntRange(0),
    default=_s("seed"),
    show_default=True,
    help="Sampling seed (numpy Generator), >= 0.",
)
@click.option(
    "--null-ablations",
    type=click.IntRange(0),
    default=_i("null_ablations"),
    show_default=f"at most {_i('null_ablations')}",
    help="The most noise-floor probe pairs per response (decodes repeated in another batch tiling; as many "
    "as fit in a tenth of the run, at least 2; 0: no floor); the record's search.null_ablations says how "
    "many a run made.",
)
@click.option("--exact", is_flag=True, help="Decode every ablation from scratch (no KV reuse; slower).")
@plan_option
@click.option(
    "--top",
    type=click.IntRange(0),
    default=_i("top_spans"),
    show_default=True,
    help="Most influential spans to list per example (with adaptive search: the K spans it finds).",
)
@click.option(
    "--search",
    type=click.Choice(SEARCHES),
    default=_i("search"),
    show_default=True,
    help=f"Which n-grams to ablate: all (exhaustive), or a coarse-to-fine search for the --top most "
    f"influential, each with its exact τ (adaptive; on a context of few windows it measures them all, "
    f"and says so); auto = adaptive from {ADAPTIVE_FROM_TOKENS} context tokens on, exhaustive below and "
    "with --fail-above-influence (a gate on adaptive search is inconclusive where it skipped windows).",
)
@click.option(
    "--refine-ratio",
    type=click.FloatRange(min=0, min_open=True),
    default=_i("refine_ratio"),
    show_default=True,
    help="Adaptive search: refine a block while its influence is >= this times the K-th best n-gram's "
    "(smaller = more careful, more ablations).",
)
@fail_above_influence_option
@junit_option
@json_option
@server_options
@engine_options
def score(**options):
    """Score how much a private context influences a model's response.

    For each n-gram of the context: how much removing it changes the
    log-probability of the response (τ_i, summed over response tokens), plus
    the document-level influence, the PMI of each response token, a measured
    noise floor and regurgitation metrics. JSON goes to stdout (a table when
    stdout is a terminal: --json for JSON there too).

    \b
    Examples:
      ctxlite score --context note.txt -q "What was prescribed?"
      ctxlite score --context note.txt -q "Summarize." -r "Jane takes insulin." --ngram 4
      ctxlite score --data examples.jsonl --lam 0,0.5,1,1.5 --out runs/scores.jsonl
      ctxlite score --context note.txt -q "What was prescribed?" --model smollm2-135m-instruct --chat
      ctxlite score --data examples.jsonl --fail-above-influence 5 --junit influence.xml
      ctxlite score --data examples.jsonl --lam 0,0.5,1,1.5 --plan
      ctxlite score --context note.txt -q "Who is the patient?" --search adaptive --top 3
      ctxlite score --context note.txt -q "What was prescribed?" --lam 1,1.5 --epsilon 1,4 --answer "Lisinopril."
    """
    from ctxlite.gates import score_verdict
    from ctxlite.identity import engine_part
    from ctxlite.influence.analysis import score_table, summarize
    from ctxlite.influence.scorer import InfluenceScorer
    from ctxlite.records import RecordLog
    from ctxlite.runtime.models import resolve_model
    from ctxlite.runtime.planning import plan_run
    from ctxlite.runtime.templates import get_template

    o = SimpleNamespace(**options)
    refuse_same_files(
        [("--data", o.data), ("--context", o.context), ("--source", o.source), ("--template", o.template)]
        + [("--model", o.model)],
        [("--out", o.out), ("--junit", o.junit)],
    )
    _check_query_is_text(o.query)
    if bool(o.data) == bool(o.context):
        raise click.UsageError("give exactly one of --context (one example) or --data (a JSONL dataset)")
    if o.data and (o.query or o.response or o.source or o.answer):
        raise click.UsageError(
            "--query/--response/--source/--answer go with --context; in --data they are fields of each line"
        )
    settings = _settings(o)
    template = get_template(o.template)
    if o.chat:
        template = replace(template, chat=True)
    examples = list(_examples(o))[: o.limit]  # validate the whole input before loading the model
    _check_combination(o, examples)
    ekw = engine_kwargs(vars(o))
    server = open_server(vars(o))  # --backend openai: connected now, its identity names the server
    if server is not None:  # refused before a log is opened
        require_teacher_forcing(server, "scoring")
    config = engine_config(**{k: v for k, v in ekw.items() if k != "model"})
    runtime = server.identity() if server else engine_part(resolve_model(ekw["model"]), config)
    identity = {**runtime, "template": template.text, "settings": asdict(settings)}
    if template.chat:  # the conversation the model reads, besides the template text
        identity["chat"] = {"system": template.system}
    planning_only = o.plan and not (o.out and Path(o.out).exists())  # a plan writes no new log
    lock = hold_out_lock(o.out) if o.out and not planning_only else None  # one writer per log, for the whole run
    log = RecordLog(o.out, identity, kind="score-run", lock=lock) if lock else None  # before the model
    try:
        reused, changed = _plan(log, examples, o.out, o.data)
        for key in changed:
            progress(f"{key}: its input changed since it was logged; scoring it again")
        engine = server or build_engine(**ekw)
        if o.plan:
            scorer = InfluenceScorer(engine, template, settings)
            todo = [ex for key, ex in examples if key not in reused]
            job = lambda: [scorer.score(ex) for ex in todo]  # noqa: E731
            searched = any(settings.search_for(len(scorer.encode(ex).context)) == "adaptive" for ex in todo)
            estimate = ADAPTIVE_PLAN if searched and settings.ngram is not None else None
            emit_plan(plan_run([engine], job, any(ex.response is None for ex in todo), estimate), o.as_json)
            return
        meta = {
            "ctxlite": identity["software"]["ctxlite"],
            "engine": engine.describe(),
            "template": asdict(template),
            "settings": identity["settings"],
            "identity": identity,
        }
        line = progress_line(server)
        try:
            records = _score_all(
                InfluenceScorer(engine, template, settings, progress=line.tick), examples, log, reused, line
            )
        finally:
            line.close()
        summary = summarize(records) if o.data else None
        if log is not None:
            finish_log(log, {"examples": [key for key, _ in examples], "summary": summary})
    finally:
        if log is not None:
            log.close()
    keys = [key for key, _ in examples]
    verdict = score_verdict(keys, records, o.fail_above_influence, identity)
    if log is not None:
        verdict.properties["log.head"] = log.head
    if summary is not None:
        _say_summary(summary)
    if not wants_json(o.as_json):
        click.echo("\n".join([*verdict.lines(), score_table(keys, records)]))  # the verdict and its basis first
    elif not o.data:
        head = {"log_head": log.head} if log is not None else {}
        emit_json({**verdict_json(verdict), "run": meta, "result": records[0], **head})
    else:
        scored = [key for key in keys if key not in reused]  # scored by this run; the rest read from the log
        emit_json(
            {
                **verdict_json(verdict),  # first: what a reader of the JSON needs before the numbers
                "run": meta,
                "summary": summary,
                "examples": len(records),
                "scored": scored,
                "reused": [key for key in keys if key in reused],
                "out": o.out,
                "log_head": log.head if log is not None else None,
            }
        )
    conclude(verdict, o.junit)


def _score_all(scorer, examples, log, reused: list[str], line: ProgressLine) -> list[dict]:
    """Each example's result: read from the log when its input is unchanged, else scored and
    appended to the log as it finishes (so Ctrl-C keeps it)."""
    records = []
    for i, (key, example) in enumerate(examples):
        if key in reused:
            records.append(log.records[key]["result"])
            continue
        line.step("examples", i, len(examples), key)
        result = scorer.score(example).to_dict(scorer.settings.top_spans)
        _say_exhaustive(key, result)
        records.append(result)
        if log is not None:
            log.append(key, {"type": "example", "result": result}, input_hash=example.input_hash())
    return records


def _say_exhaustive(key: str, result: dict) -> None:
    """A note when adaptive search measured every n-gram window (a context too short for blocks)."""
    for r in result["results"]:
        search = r.get("search") or {}
        if search.get("method") == "adaptive" and search.get("measured_every_window"):
            progress(
                f"ctxlite: note: {key}: --search adaptive measured all {search['windows']} n-gram windows (a "
                "context this short has no blocks to search): the search was exhaustive"
            )
            return


def _say_summary(summary: dict) -> None:
    """One line per λ (and context size and ε) on stderr: the data set's mean document influence with
    its bootstrap CI, and the mean utility where the data has answers."""
    for s in summary.values():
        d, u = s["document_influence"], s.get("utility")
        utility = "" if not u else f", ROUGE-L F {u['mean']:.3f} (95% CI {u['ci'][0]:.3f}–{u['ci'][1]:.3f})"
        progress(
            f"{result_label(s)}: document influence {d['mean']:.2f} (95% CI {d['ci'][0]:.2f}–{d['ci'][1]:.2f}), "
            f"n-gram max-of-mean {_fmt(s['ngram_influence']['max_of_mean'])}, "
            f"Repeat {s['regurgitation']['repeat']}, Rouge {s['regurgitation']['rouge']} of {s['examples']}{utility}"
        )
