"""``ctxlite score``: context influence of a private context on a response."""

from __future__ import annotations

import sys
from dataclasses import replace
from types import SimpleNamespace

import click

from ctxlite.cli.options import (
    TEXT,
    NumberList,
    conclude,
    default,
    emit_json,
    emit_plan,
    engine_options,
    fail_above_influence_option,
    given_explicitly,
    json_option,
    junit_option,
    local_model,
    open_server,
    plan_option,
    server_options,
    wants_json,
)
from ctxlite.cli.progress import progress_line, say
from ctxlite.errors import DataError
from ctxlite.gates import InfluenceGate
from ctxlite.influence.analysis import largest_units
from ctxlite.influence.dataset import load_examples
from ctxlite.influence.scorer import Example, InfluenceSettings
from ctxlite.influence.search import ADAPTIVE_FROM_TOKENS, SEARCHES
from ctxlite.influence.units import UNIT_KINDS
from ctxlite.outputs import refuse_same_files
from ctxlite.records import read_text
from ctxlite.reporting.json_output import score_json
from ctxlite.reporting.terminal import score_table, summary_lines
from ctxlite.runs.score import plan_score, run_score
from ctxlite.runtime.sampling import SamplingSettings
from ctxlite.runtime.templates import get_template


def _s(name: str):
    """A sampling default (SamplingSettings owns it)."""
    return default(SamplingSettings, name)


def _i(name: str):
    """An influence default (InfluenceSettings owns it)."""
    return default(InfluenceSettings, name)


def _settings(o) -> InfluenceSettings:
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
        search=o.search,
        refine_ratio=o.refine_ratio,
        unit=o.unit,
        sentence_language=o.sentence_language,
        duplicate_threshold=None if o.duplicate_threshold == 0 else o.duplicate_threshold,
        copy_sources=o.copy_sources,
    )


def _template(o):
    template = get_template(o.template)
    return replace(template, chat=True) if o.chat else template


def _read_context(path: str) -> str:
    if path == "-":
        data = sys.stdin.buffer.read()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"standard input is not UTF-8 text (byte offset {exc.start})") from None
    return read_text(path, "context file")


def _examples(o) -> Example | list[Example]:
    """The data set of --data (its first --limit), or the one example of --context/--query/--response."""
    if o.data:
        return load_examples(o.data, o.limit)
    source = read_text(o.source, "source file") if o.source else None
    context = _read_context(o.context)
    return Example(
        context=context, query=o.query or "", response=o.response, source=source, id="example", answer=o.answer
    )


GENERATION_ONLY = ("epsilon", "top_k", "top_p", "min_new_tokens", "max_new_tokens", "seed")
"""Options that only shape a generated response (scoring a given one ignores them)."""
NGRAM_ONLY = ("ngram", "stride", "null_ablations", "exact", "top", "fail_above_influence", "search", "refine_ratio")
"""Options that only shape the n-gram ablations (--doc has none)."""
WINDOW_ONLY = ("ngram", "stride", "search", "refine_ratio", "context_sizes")
"""Options of n-gram windows that a --unit other than ngram does not use."""
DESCENT_USES = ("ngram", "stride", "search")
"""The window options a hierarchical search (``--search adaptive`` with --unit passage or sentence) uses."""


def _check_usage(o) -> None:
    """Refuse what cannot be read one way only, before any input is read."""
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


def _check_combination(o, examples) -> None:
    """A flag that would have no effect in this combination is a usage error, never silently ignored."""
    given = {name for name in vars(o) if given_explicitly(name)}
    if o.doc and given & set(NGRAM_ONLY):
        flags = ", ".join(_flag(n) for n in NGRAM_ONLY if n in given)
        raise click.UsageError(f"{flags}: no effect with --doc (document level only, no n-gram ablations)")
    descends = o.unit in ("passage", "sentence") and o.search == "adaptive"
    if o.unit in ("field", "span") and o.search == "adaptive":
        raise click.UsageError(
            f"--search adaptive: unit {o.unit} has no finer units to descend into (the hierarchy descends from "
            "--unit passage or sentence)"
        )
    unused = [n for n in WINDOW_ONLY if n in given and not (descends and n in DESCENT_USES)]
    if o.unit != "ngram" and (o.doc or unused):
        flags = ", ".join(["--doc"] * o.doc + [_flag(n) for n in unused])
        how = "a hierarchical search measures every unit, then n-grams" if descends else "one ablation per unit"
        raise click.UsageError(f"{flags}: no effect with --unit {o.unit} ({how}, no n-gram search)")
    if given_explicitly("duplicate_threshold") and o.unit == "ngram":
        raise click.UsageError("--duplicate-threshold: no effect without --unit (n-grams have no near-duplicates)")
    if given_explicitly("sentence_language") and o.unit != "sentence" and not (o.unit == "passage" and descends):
        raise click.UsageError(
            "--sentence-language: no effect without --unit sentence (or --unit passage --search adaptive)"
        )
    if given_explicitly("copy_sources") and not descends:
        raise click.UsageError(
            "--copy-sources: no effect without a hierarchical search (--unit passage or sentence --search adaptive)"
        )
    if given_explicitly("refine_ratio") and o.search == "exhaustive":
        raise click.UsageError("--refine-ratio: no effect with --search exhaustive")
    if o.epsilon and (o.top_k or o.top_p < 1):
        raise click.UsageError(
            "--epsilon samples the full mixed distribution: --top-k / --top-p would drop tokens the "
            "empty-context distribution allows (an infinite ratio, no epsilon holds); leave them off"
        )
    if o.limit is not None and not o.data:
        raise click.UsageError("--limit: no effect without --data")
    examples = [examples] if isinstance(examples, Example) else examples
    if all(ex.response is not None for ex in examples) and given & set(GENERATION_ONLY):
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
    "with --fail-above-influence (a gate on adaptive search is inconclusive where it skipped windows). "
    "With --unit passage or sentence, adaptive descends the hierarchy: every unit, then the sentences of "
    "the passage of largest τ_u (per λ), then the n-grams of the sentence of largest τ_u and those holding "
    "copy sources of the response (--no-copy-sources: not), each exactly.",
)
@click.option(
    "--refine-ratio",
    type=click.FloatRange(min=0, min_open=True),
    default=_i("refine_ratio"),
    show_default=True,
    help="Adaptive search: refine a block while its influence is >= this times the K-th best n-gram's "
    "(smaller = more careful, more ablations).",
)
@click.option(
    "--unit",
    type=click.Choice(UNIT_KINDS),
    default=_i("unit"),
    show_default=True,
    help="What is removed: n-gram windows, or each passage (a line's passages, else blank-line separated), "
    "sentence, field (Name: value lines) or given span (a line's spans) once, exactly (τ_u, ranked).",
)
@click.option(
    "--sentence-language",
    type=TEXT,
    default=_i("sentence_language"),
    show_default=True,
    help="Language of --unit sentence's rule-based segmenter (sentencex): one of the codes it has rules for "
    "(docs/scoring.md#sentence-languages); another is refused, never segmented as English.",
)
@click.option(
    "--duplicate-threshold",
    type=click.FloatRange(0, 1),
    default=_i("duplicate_threshold"),
    show_default=True,
    help="With --unit: a unit whose most similar other unit is at least this similar (Jaccard of "
    "lowercased word 3-gram shingles) is also removed together with it (τ_pair: a fact both hold, "
    "which leave-one-out misses), and each cluster of three or more such units whole (τ_cluster: a "
    "fact stated three times, which every pair misses), as are units sharing 8 words in a row; 0 = off.",
)
@click.option(
    "--copy-sources/--no-copy-sources",
    default=_i("copy_sources"),
    show_default=True,
    help="--search adaptive with --unit passage or sentence: also remove each n-gram window holding a copy "
    "source of the response (a context token after the same token as in the response), wherever it is.",
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
      ctxlite score --data ctxlite/data/examples/rag_passages.jsonl --unit passage --out runs/rag.jsonl
      ctxlite score --context note.txt -q "What was prescribed?" --answer Lisinopril --epsilon 1,4 --out runs/eps.jsonl
    """
    o = SimpleNamespace(**options)
    _check_usage(o)
    settings, template = _settings(o), _template(o)
    examples = _examples(o)  # the whole input validated before the model is loaded
    _check_combination(o, examples)
    server = open_server(options)  # --backend openai: connected now, its identity names the server
    backend = server or local_model(options)
    gate = None if o.fail_above_influence is None else InfluenceGate(o.fail_above_influence)
    args = dict(template=template, out=o.out, gate=gate, data=o.data)
    if o.plan:
        emit_plan(plan_score(backend, examples, settings, progress=progress_line(), **args), o.as_json)
        return
    line = progress_line(server)
    try:
        run = run_score(backend, examples, settings, progress=line, **args)
    finally:
        line.close()
    _show(run, o.as_json)
    conclude(run.verdict, o.junit)


def _show(run, as_json: bool) -> None:
    """The data set's summary on stderr; the JSON, or the verdict and its basis then the table, on stdout."""
    largest = largest_units(run.keys, run.results)
    for text in summary_lines(run.summary, largest) if run.summary is not None else ():
        say(text)
    if wants_json(as_json):
        emit_json(score_json(run))
    else:
        click.echo("\n".join([*run.verdict.lines(), score_table(run.keys, run.results, ansi=sys.stdout.isatty())]))
