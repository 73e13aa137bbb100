"""``ctxlite audit``: ContextLeak canary audits of private in-context learning."""

from __future__ import annotations

import math
from dataclasses import fields
from types import SimpleNamespace

import click

from ctxlite.audit.canaries import CanaryKind
from ctxlite.audit.dataset import load_records
from ctxlite.audit.formats import Task, load_format
from ctxlite.audit.queries import QueryKind
from ctxlite.audit.settings import Attack, AuditSettings, BoundKind, DetectorKind, EstimateSettings, MechanismKind
from ctxlite.cli.options import (
    TEXT,
    NumberList,
    choice,
    conclude,
    default,
    emit_json,
    emit_plan,
    engine_options,
    fail_above_epsilon_option,
    given_explicitly,
    json_option,
    junit_option,
    local_model,
    open_server,
    plan_option,
    server_options,
    wants_json,
)
from ctxlite.cli.progress import progress_line
from ctxlite.cli.target import target_options
from ctxlite.gates import EpsilonGate
from ctxlite.outputs import refuse_same_files
from ctxlite.reporting.json_output import audit_json
from ctxlite.reporting.terminal import audit_table
from ctxlite.runs.audit import plan_audit, run_audit

_DP, _PLAIN, _QPT = AuditSettings.DP_DEFAULTS, AuditSettings.PLAIN_DEFAULTS, AuditSettings.QUERIES_PER_TRIAL


def _d(name: str):
    return default(AuditSettings, name)


def _e(name: str):
    return default(EstimateSettings, name)


def _list(values) -> str:
    return ",".join("inf" if math.isinf(v) else f"{v:g}" for v in values)


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
    default=_e("confidence"),
    show_default=True,
    help="Confidence 1 - α of the epsilon lower bound.",
)
@click.option(
    "--bound",
    type=choice(BoundKind),
    default=_e("bound"),
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
    default=_e("sampling_rate"),
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
@target_options
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
    o = SimpleNamespace(**options)
    fmt = _format(o)
    settings = _settings(o)
    gate = None if o.fail_above_epsilon is None else EpsilonGate(o.fail_above_epsilon, o.epsilon_unit)
    records = load_records(o.data_path, fmt)
    server = open_server(options)  # --backend openai: connected now, its identity names the server
    backend = server or local_model(options)
    embed = local_model(options, o.embed_model, embeddings=True) if _embeds(o) else None
    judge = local_model(options, settings.judge_model) if settings.judge_model else None
    models = dict(fmt=fmt, embedder=embed, judge=judge, search=o.search_template)
    if o.plan:
        emit_plan(plan_audit(backend, records, settings, **models), o.as_json)
        return
    line = progress_line(server)
    try:
        run = run_audit(backend, records, settings, out=o.out_path, resume=o.resume, progress=line, gate=gate, **models)
    finally:
        line.close()
    _show(run, o.as_json)
    conclude(run.verdict, o.junit)


def _show(run, as_json: bool) -> None:
    """The verdict and its basis, then the table: on stdout, or on stderr with the JSON on stdout."""
    table = "\n".join([*run.verdict.lines(), audit_table(run.report)])
    if wants_json(as_json):
        click.echo(table, err=True)
        emit_json(audit_json(run))  # the verdict first
    else:
        click.echo(table)


def _format(o):
    """The deployment's prompt format (--format, else the --task built-in), with --chat; the files
    named first checked to be distinct (an output never overwrites an input)."""
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
    return fmt.with_chat(True) if o.chat else fmt


def _settings(o) -> AuditSettings:
    """The audit's settings from the options; None (an option left out) is the library's default."""
    if o.judge_model == "audited":
        o.judge_model = None
    game = {f.name: getattr(o, f.name) for f in fields(AuditSettings) if hasattr(o, f.name)}
    estimates = EstimateSettings(**{f.name: getattr(o, f.name) for f in fields(EstimateSettings) if hasattr(o, f.name)})
    return AuditSettings(**game, estimates=estimates)


def _embeds(o) -> bool:
    """Generation audits with the canary attack score embeddings of the outputs."""
    return o.task is Task.GENERATE and o.attack is Attack.CANARY


def _check_options(o) -> None:
    """Parse the kinds into their enums and refuse what has no effect or contradicts itself (exit 2)."""
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
    _check_combination(o.task, o.mechanism, o.attack, o.detector, o.search_template)


def _check_combination(task, mechanism, attack, detector, search_template) -> None:
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
        if why and given_explicitly(name):
            flag = "--query-kind" if name == "query" else "--" + name.replace("_", "-")
            raise click.UsageError(f"{flag} has no effect here: {why}")
