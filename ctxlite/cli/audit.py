"""``ctxlite audit``: ContextLeak canary audits of private in-context learning."""

from __future__ import annotations

import math
from types import SimpleNamespace

import click

from ctxlite.audit.canaries import CanaryKind
from ctxlite.audit.formats import Task
from ctxlite.audit.queries import QueryKind
from ctxlite.audit.settings import Attack, AuditSettings, BoundKind, DetectorKind, MechanismKind
from ctxlite.cli.options import (
    TEXT,
    NumberList,
    build_engine,
    choice,
    conclude,
    default,
    emit_json,
    emit_plan,
    engine_config,
    engine_kwargs,
    engine_options,
    fail_above_epsilon_option,
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
from ctxlite.cli.progress import progress_line
from ctxlite.outputs import refuse_same_files

_DP, _PLAIN, _QPT = AuditSettings.DP_DEFAULTS, AuditSettings.PLAIN_DEFAULTS, AuditSettings.QUERIES_PER_TRIAL


def _d(name: str):
    return default(AuditSettings, name)


def _list(values) -> str:
    return ",".join("inf" if math.isinf(v) else f"{v:g}" for v in values)


def _jsonable(obj):
    """inf -> "inf" so stdout stays strict JSON."""
    if isinstance(obj, float) and math.isinf(obj):
        return "inf" if obj > 0 else "-inf"
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


@click.command()
@click.option(
    "--data",
    "data_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Private set (JSONL), one record per line with the fields the format uses "
    "(built-ins: text/label for classify, dialogue/summary for generate).",
)
@click.option(
    "--format",
    "format_spec",
    type=TEXT,
    default=None,
    metavar="NAME|FILE",
    help="The deployment's prompt format: a .toml/.json file (fields, labels, instruction, record "
    "layout, chat) or a built-in name [default: the --task built-in].",
)
@click.option(
    "--task",
    type=choice(Task),
    default=_d("task"),
    show_default=True,
    help="Built-in format when --format is not given: classify (subjectivity labels) or generate (dialogue summaries).",
)
@click.option(
    "--chat",
    is_flag=True,
    default=False,
    help="Prompt through the model's own chat template (records in the system message); the format's "
    "chat = true does the same.",
)
@click.option(
    "--mechanism",
    type=choice(MechanismKind),
    default=_d("mechanism"),
    show_default=True,
    help="Private ICL method under audit.",
)
@click.option(
    "--epsilon",
    "epsilons",
    type=NumberList(minimum=0, strict=True, allow_inf=True),
    default=None,
    help=f"Theoretical per-query epsilons for rnm/esa, e.g. 1,8,inf [default: {_list(_DP['epsilons'])}].",
)
@click.option(
    "--delta",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=_d("delta"),
    show_default=True,
    help="δ of the theoretical ε and of the empirical ε estimates.",
)
@click.option(
    "--canary",
    type=choice(CanaryKind),
    default=_d("canary"),
    show_default=True,
    help="Canary kind: random hex string, rare tokens of the model's vocabulary, or a curated sentence.",
)
@click.option(
    "--query-kind",
    "query",
    type=choice(QueryKind),
    default=_d("query"),
    show_default=True,
    help="The audit query asked about the canary.",
)
@click.option(
    "--query", "query_alias", type=choice(QueryKind), default=None, hidden=True, help="Old name of --query-kind."
)
@click.option(
    "--template-index",
    type=click.IntRange(0),
    default=_d("template_index"),
    show_default=True,
    help="Which candidate query template of that kind to use.",
)
@click.option("--search-template", is_flag=True, help="Pick the query template by held-out audit accuracy first.")
@click.option(
    "--attack",
    type=choice(Attack),
    default=_d("attack"),
    show_default=True,
    help="injection = the prompt-injection baseline (asks the model to print the examples).",
)
@click.option(
    "--detector",
    type=choice(DetectorKind),
    default=_d("detector"),
    show_default=True,
    help="direction: project onto the IN-minus-OUT direction of reference runs; count: frequency of "
    "the canary's label (classify).",
)
@click.option(
    "--trials",
    type=click.IntRange(4),
    default=_d("trials"),
    show_default=True,
    help="Trials of the membership game per epsilon (Z drawn with probability 1/2 each).",
)
@click.option(
    "--queries-per-trial",
    type=click.IntRange(1),
    default=None,
    help=f"Queries per trial [default: {_QPT['dp']} for rnm/esa, {_QPT['classify']} classify, "
    f"{_QPT['generate']} generate].",
)
@click.option(
    "--shots",
    type=click.IntRange(1),
    default=None,
    help=f"Records per prompt (per ensemble for rnm/esa) [default: {_PLAIN['shots']}, or {_DP['shots']} for rnm/esa].",
)
@click.option(
    "--ensembles", type=click.IntRange(1), default=None, help=f"Ensembles m for rnm/esa [default: {_DP['ensembles']}]."
)
@click.option(
    "--reference-runs",
    type=click.IntRange(1),
    default=_d("reference_runs"),
    show_default=True,
    help="Paired reference runs per epsilon for the direction detector.",
)
@click.option(
    "--temperature",
    type=click.FloatRange(0),
    default=_d("temperature"),
    show_default=True,
    help="Sampling temperature of the audited model (0 = greedy).",
)
@click.option(
    "--max-new-tokens",
    type=click.IntRange(1),
    default=_d("max_new_tokens"),
    show_default=True,
    help="Longest sampled answer, in tokens (text outputs: generate, injection).",
)
@click.option(
    "--clip-norm",
    type=click.FloatRange(0, min_open=True),
    default=_d("clip_norm"),
    show_default=True,
    help="ESA clip norm C of the unit-normalised embeddings.",
)
@click.option(
    "--utility-queries",
    type=click.IntRange(0),
    default=_d("utility_queries"),
    show_default=True,
    help="Held-out records queried to measure utility (0 = none).",
)
@click.option(
    "--confidence",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=_d("confidence"),
    show_default=True,
    help="Confidence 1 - α of the epsilon lower bound.",
)
@click.option(
    "--bound",
    type=choice(BoundKind),
    default=_d("bound"),
    show_default=True,
    help="How the epsilon lower bound picks its threshold: corner-grid (most power), split, multi-split, "
    "bonferroni (all valid at the confidence).",
)
@click.option(
    "--accounting-queries",
    type=click.IntRange(1),
    default=None,
    metavar="T",
    help="Also report each sigma's epsilon subsampled over T queries (rnm/esa; PLD accountant).",
)
@click.option(
    "--sampling-rate",
    type=click.FloatRange(0, 1, min_open=True),
    default=_d("sampling_rate"),
    show_default=True,
    help="Poisson rate q at which each of those T queries samples a record.",
)
@click.option(
    "--resample-data",
    is_flag=True,
    default=_d("resample_data"),
    help="Re-draw the private set every trial (average-case audit).",
)
@click.option(
    "--embed-model",
    type=TEXT,
    default=None,
    metavar="NAME|PATH",
    help="GGUF for embeddings [default: the audited model].",
)
@click.option(
    "--judge-model",
    type=TEXT,
    default=_d("judge_model"),
    show_default=True,
    metavar="NAME|PATH|audited",
    help="Model that judges outputs for --mechanism judge (asked through its chat template when it has "
    "one); 'audited' lets the audited model judge itself.",
)
@click.option(
    "--seed",
    type=click.IntRange(0),
    default=_d("seed"),
    show_default=True,
    help="Seed of the whole game: private set, canary, trials, noise.",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append every trial to this JSONL log (resumable).",
)
@click.option("--resume", is_flag=True, help="Continue the run in --out (same parameters).")
@fail_above_epsilon_option
@junit_option
@plan_option
@json_option
@server_options
@engine_options
def audit(**options):
    """Audit private in-context learning with canaries (ContextLeak).

    Each trial swaps a canary record into the private set with probability
    1/2, asks the fixed audit query and scores what the mechanism releases;
    the scores give audit accuracy, TPR/FPR and empirical epsilon (point,
    Clopper-Pearson lower bound, GDP estimate) per theoretical epsilon. JSON
    report on stdout, a table and progress on stderr (on a terminal the table
    goes to stdout instead of the JSON: --json for JSON there too).

    \b
    Examples:
      ctxlite audit --data private.jsonl --mechanism none --trials 200 --out none.jsonl
      ctxlite audit --data private.jsonl --mechanism rnm --epsilon 1,8,inf --temperature 0
      ctxlite audit --data dialogues.jsonl --task generate --mechanism esa --epsilon 1,inf --trials 40
      ctxlite audit --data dialogues.jsonl --mechanism judge --attack injection --task generate --trials 40
      ctxlite audit --data tickets.jsonl --format tickets.toml --trials 100 --model smollm2-135m-instruct --chat
      ctxlite audit --data private.jsonl --mechanism rnm --epsilon 1,8 --fail-above-epsilon 1 --junit audit.xml
      ctxlite audit --data private.jsonl --mechanism none --trials 200 --plan
    """
    from dataclasses import fields, replace

    from ctxlite.audit import settings as audit_settings
    from ctxlite.audit.dataset import load_records, resolve_format
    from ctxlite.audit.formats import load_format
    from ctxlite.audit.game import run_audit
    from ctxlite.audit.template_search import search_template
    from ctxlite.gates import audit_verdict, check_epsilon_unit
    from ctxlite.records import RecordLog

    o = SimpleNamespace(**options)
    refuse_same_files(
        [("--data", o.data_path), ("--format", o.format_spec), ("--model", o.model)]
        + [("--embed-model", o.embed_model), ("--judge-model", o.judge_model)],
        [("--out", o.out_path), ("--junit", o.junit)],
    )
    fmt = load_format(o.format_spec if o.format_spec is not None else Task(o.task))
    if o.format_spec is not None and given_explicitly("task") and Task(o.task) is not fmt.task:
        raise click.UsageError(f"--task {o.task} contradicts --format {o.format_spec}, a {fmt.task.value} format")
    o.task = fmt.task
    _check_options(o)
    lock = hold_out_lock(o.out_path) if o.out_path and not o.plan else None  # one writer per log, for the whole run
    if o.out_path and not o.resume and _nonempty(o.out_path):  # checked under the lock: not another run's log
        raise click.BadParameter(
            f"{o.out_path} exists: pass --resume to continue it or choose another file", param_hint="--out"
        )
    if o.judge_model == "audited":
        o.judge_model = None
    # None = the library's default for this mechanism: AuditSettings is the one source of truth
    settings = audit_settings.AuditSettings(
        **{f.name: getattr(o, f.name) for f in fields(audit_settings.AuditSettings) if hasattr(o, f.name)}
    )
    if o.fail_above_epsilon is not None:  # a budget in another unit than the audit's is refused before any work
        check_epsilon_unit(o.epsilon_unit, settings.queries_per_trial)
    records = load_records(o.data_path, fmt)
    fmt = resolve_format(fmt, records)
    if o.chat:
        fmt = fmt.with_chat(True)
    ekw = engine_kwargs(vars(o))
    server = open_server(vars(o))  # --backend openai: connected now, its identity names the server
    identity = _identity(o, ekw, settings, records, fmt, server)
    if o.out_path and o.resume:  # refuse a mismatched log before any model work (the search may change the template)
        ignore = ("settings.template_index",) if o.search_template else ()
        RecordLog.check_existing(o.out_path, identity, kind="audit", ignore=ignore)
    engine = server or build_engine(**ekw, kv_slots=4)
    embedder = build_engine(**{**ekw, "model": o.embed_model or ekw["model"]}, embeddings=True) if _embeds(o) else None
    judge = build_engine(**{**ekw, "model": settings.judge_model}) if settings.judge_model else None
    if o.plan:
        _plan(o, engine, embedder, judge, records, settings, fmt)
        return
    if o.search_template:
        found = search_template(engine, records, settings, embedder=embedder, fmt=fmt)
        accuracies = [round(a, 3) for a in found.accuracies]
        progress(f"template search ({found.kind}): accuracies {accuracies} -> template {found.best_index}")
        settings = replace(settings, template_index=found.best_index)
        identity = _identity(o, ekw, settings, records, fmt, server)
    log = RecordLog(o.out_path, identity, kind="audit", lock=lock) if o.out_path else None
    line = progress_line(server)
    try:
        report = run_audit(engine, records, settings, log, embedder=embedder, progress=line.tick, fmt=fmt, judge=judge)
        if report.rereport_warning:
            progress(f"ctxlite: warning: {report.rereport_warning}")
        for note in report.notes:
            if note.startswith(("answers: sampled by the server", "texts: sampled by the server")):
                progress(f"ctxlite: note: {note}")  # the table does not show the notes
        result = _jsonable(report.to_dict())
        if log is not None:
            finish_log(log, {"report": result})
    finally:
        line.close()
        if log is not None:
            log.close()
    verdict = audit_verdict(result, o.fail_above_epsilon, identity, o.epsilon_unit)
    if log is not None:
        verdict.properties["log.head"] = log.head
    table = "\n".join([*verdict.lines(), report.table()])  # the verdict and its basis first
    if wants_json(o.as_json):
        click.echo(table, err=True)
        head = {"log_head": log.head} if log is not None else {}
        emit_json({**verdict_json(verdict), **result, **head})  # the verdict first
    else:
        click.echo(table)
    conclude(verdict, o.junit)


def _embeds(o) -> bool:
    """Generation audits with the canary attack score embeddings of the outputs."""
    return o.task is Task.GENERATE and o.attack is Attack.CANARY


def _check_options(o) -> None:
    """Parse the kinds into their enums and refuse what has no effect or contradicts itself (exit 2)."""
    if o.query_alias is not None:
        if given_explicitly("query"):
            raise click.UsageError("give --query-kind only (--query is its old name)")
        o.query = o.query_alias
    o.mechanism = MechanismKind(o.mechanism)
    o.attack, o.detector = Attack(o.attack), DetectorKind(o.detector)
    if o.epsilons is not None and not o.mechanism.is_dp:
        raise click.BadParameter(f"--mechanism {o.mechanism.value} has no privacy parameter", param_hint="--epsilon")
    if o.ensembles is not None and not o.mechanism.is_dp:
        raise click.BadParameter("only rnm/esa use ensembles", param_hint="--ensembles")
    if o.resume and not o.out_path:
        raise click.BadParameter("--resume needs --out", param_hint="--resume")
    if given_explicitly("epsilon_unit") and o.fail_above_epsilon is None:
        raise click.UsageError("--epsilon-unit is the unit of the --fail-above-epsilon budget: give that too")
    _check_combination(o.task, o.mechanism, o.attack, o.detector, o.search_template, o.query_alias is not None)


def _identity(o, ekw: dict, settings, records, fmt, server=None) -> dict:
    """The trial log's identity, computed without loading a model (the model files are hashed; a
    server's identity is the server's)."""
    from ctxlite.audit.settings import audit_identity
    from ctxlite.identity import engine_part
    from ctxlite.runtime.models import model_identity, resolve_model

    config = engine_config(**{k: v for k, v in ekw.items() if k != "model"}, kv_slots=4)
    embed = model_identity(resolve_model(o.embed_model or ekw["model"])) if _embeds(o) else None
    judge = model_identity(resolve_model(settings.judge_model)) if settings.judge_model else None
    runtime = server.identity() if server else engine_part(resolve_model(ekw["model"]), config)
    return audit_identity(runtime, settings, records, embed, fmt, judge)


def _nonempty(path: str) -> bool:
    from pathlib import Path

    p = Path(path)
    return p.is_file() and p.stat().st_size > 0


def _plan(o, engine, embedder, judge, records, settings, fmt) -> None:
    """What the audit (the template search included) would cost: every trial, none read from a log."""
    from dataclasses import replace

    from ctxlite.audit.game import run_audit
    from ctxlite.audit.settings import Attack, Task
    from ctxlite.audit.template_search import search_template
    from ctxlite.runtime.planning import plan_run

    def job():
        s = settings
        if o.search_template:
            s = replace(s, template_index=search_template(engine, records, s, embedder=embedder, fmt=fmt).best_index)
        run_audit(engine, records, s, None, embedder=embedder, fmt=fmt, judge=judge)

    sampled = settings.task is Task.GENERATE or settings.attack is Attack.INJECTION
    emit_plan(plan_run([engine, embedder, judge], job, sampled), o.as_json)


def _check_combination(task, mechanism, attack, detector, search_template, old_query_flag) -> None:
    """An option that has no effect in this combination is a usage error, never silently ignored."""
    injection = attack is Attack.INJECTION
    text_outputs = task is Task.GENERATE or injection
    unused = {
        "embed_model": None
        if task is Task.GENERATE and not injection
        else "embeddings are used by generation audits with --attack canary only",
        "max_new_tokens": None if text_outputs else "classification answers are read from one forward pass",
        "clip_norm": None if mechanism is MechanismKind.ESA else "only esa clips embeddings",
        "judge_model": None if mechanism is MechanismKind.JUDGE else "only the judge mechanism has a judge",
        "reference_runs": (
            "the injection baseline needs no reference runs"
            if injection
            else "the count detector needs no reference runs"
            if detector is DetectorKind.COUNT
            else None
        ),
        "detector": "the injection baseline scores the leaked text itself" if injection else None,
        "query": "the injection baseline asks its own question" if injection else None,
        "template_index": (
            "the injection baseline asks its own question"
            if injection
            else "--search-template chooses the template"
            if search_template
            else None
        ),
        "search_template": "the injection baseline asks its own question" if injection else None,
    }
    for name, why in unused.items():
        if why and (given_explicitly(name) or (name == "query" and old_query_flag)):
            flag = "--query-kind" if name == "query" else "--" + name.replace("_", "-")
            raise click.UsageError(f"{flag} has no effect here: {why}")
