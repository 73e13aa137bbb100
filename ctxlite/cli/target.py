"""``ctxlite audit --target KIND``: the black-box audit of a system ctxlite can only query
(docs/targets.md). The options are added to ``ctxlite audit``; :func:`run_target_command` runs
them when ``--target`` is given, and refuses every option of the model audit that would have no
effect."""

from __future__ import annotations

import functools
import json

import click

from ctxlite.audit.settings import EstimateSettings
from ctxlite.audit.target_game import TargetSettings
from ctxlite.cli.options import TEXT, conclude, emit_json, emit_plan, given_explicitly, wants_json
from ctxlite.cli.progress import progress_line
from ctxlite.errors import DataError
from ctxlite.gates import EpsilonGate
from ctxlite.outputs import refuse_same_files
from ctxlite.records import read_jsonl, read_text
from ctxlite.reporting.target_page import target_json, target_table
from ctxlite.runs.target_audit import plan_target_audit, run_target_audit
from ctxlite.targets import open_target
from ctxlite.targets.spec import KINDS

TARGET_OPTIONS = ("target", "target_file", "canary_record", "secrets", "queries", "query_file", "markers", "labels")
ALLOWED = {
    *TARGET_OPTIONS,
    "data_path",
    "trials",
    "seed",
    "delta",
    "confidence",
    "bound",
    "out_path",
    "resume",
    "fail_above_epsilon",
    "epsilon_unit",
    "junit",
    "as_json",
    "plan",
    "resample_data",
    "shots",
    "reference_runs",
}
CHAT = {"base_url", "model_name", "request_timeout", "retries", "concurrency", "temperature", "max_new_tokens"}
FLAGS = {
    "data_path": "--data",
    "format_spec": "--format",
    "epsilons": "--epsilon",
    "query": "--query-kind",
    "secrets": "--secret",
    "queries": "--query",
    "markers": "--marker",
    "labels": "--label",
    "out_path": "--out",
    "as_json": "--json",
}


def target_options(f):
    """--target, --target-file, --canary-record, --secret, --query, --marker, added to the command
    ``f`` (``ctxlite audit``), which runs as before unless one of them is given: then
    :func:`run_target_command` runs instead (and refuses a target option without ``--target``)."""

    @functools.wraps(f)
    def dispatch(**options):
        if any(options[name] for name in TARGET_OPTIONS):
            return run_target_command(options)
        return f(**options)

    decorators = [
        click.option(
            "--target",
            type=click.Choice(KINDS),
            default=None,
            help="Audit a system by its answers only (docs/targets.md): chat (an OpenAI-compatible "
            "/v1/chat/completions at --base-url, the records in the system message), http (your application, "
            "--target-file) or command (--target-file). Each trial loads --data with or without the "
            "--canary-record and asks each --query.",
        ),
        click.option(
            "--target-file",
            type=click.Path(dir_okay=False),
            default=None,
            metavar="FILE",
            help="--target http|command: the TOML file saying how to load records and ask (docs/targets.md).",
        ),
        click.option(
            "--canary-record",
            type=click.Path(dir_okay=False),
            default=None,
            metavar="FILE",
            help="--target: the canary, one JSON record in the data's own shape, holding the --secret.",
        ),
        click.option(
            "--secret",
            "secrets",
            type=TEXT,
            multiple=True,
            metavar="TEXT",
            help="--target: text of the canary that must not come back (repeatable).",
        ),
        click.option(
            "--query",
            "queries",
            type=TEXT,
            multiple=True,
            metavar="TEXT",
            help="--target: an audit question, asked once per trial (repeatable).",
        ),
        click.option(
            "--query-file",
            type=click.Path(dir_okay=False),
            default=None,
            metavar="FILE",
            help="--target: more audit questions, one JSON value a line: a text, or a list of texts (the turns "
            "of a multi-turn question, asked as one conversation).",
        ),
        click.option(
            "--marker",
            "markers",
            type=TEXT,
            multiple=True,
            metavar="REGEX",
            help="--target: a pattern the detector counts in the answers, e.g. a redaction token (repeatable).",
        ),
        click.option(
            "--label",
            "labels",
            type=TEXT,
            multiple=True,
            metavar="TEXT",
            help="--target: the canary's label, for a classifier: the detector counts the answers that start "
            "with it (repeatable).",
        ),
    ]
    for d in reversed(decorators):
        dispatch = d(dispatch)
    return dispatch


def _flag(name: str) -> str:
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def _check(options: dict) -> None:
    """Refuse target options without --target, and with it every option that has no effect."""
    kind = options["target"]
    if kind is None:
        given = [n for n in TARGET_OPTIONS[1:] if given_explicitly(n)]
        if given:
            flag = _flag(given[0])
            hint = " (a model audit's kind of query is --query-kind)" if flag == "--query" else ""
            raise click.UsageError(f"{flag} is an option of --target audits: give --target too{hint}")
        return
    if options["plan"] and (options["out_path"] or options["resume"]):
        raise click.UsageError("--plan writes no log: it has no --out or --resume")
    allowed = ALLOWED | (CHAT if kind == "chat" else set())
    for name in options:
        if name not in allowed and given_explicitly(name):
            why = "it is an option of the model audit" if name not in CHAT else "the target file says it"
            raise click.UsageError(f"{_flag(name)} has no effect with --target {kind}: {why}")
    if kind != "chat" and options["target_file"] is None:
        raise click.UsageError(f"--target {kind} needs --target-file")
    if options["canary_record"] is None:
        raise click.UsageError("--target needs --canary-record (one JSON record in the data's own shape)")
    if options["resample_data"] != (options["shots"] is not None):
        raise click.UsageError(
            "--target with --resample-data loads --shots N records drawn anew every trial: give both, or neither"
        )
    if given_explicitly("epsilon_unit") and options["fail_above_epsilon"] is None:
        raise click.UsageError("--epsilon-unit is the unit of the --fail-above-epsilon budget: give that too")
    if options["resume"] and not options["out_path"]:
        raise click.BadParameter("--resume needs --out", param_hint="--resume")


def _questions(path: str | None) -> list:
    """The questions of a --query-file: one JSON text, or list of texts (a conversation's turns), a line."""
    if path is None:
        return []
    out = []
    for number, raw in enumerate(read_text(path, "query file").split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise DataError(f"{path}:{number}: malformed JSON ({exc})") from None
        if not (
            isinstance(value, str) or (isinstance(value, list) and value and all(isinstance(t, str) for t in value))
        ):
            raise DataError(f"{path}:{number}: a question is a text or a list of texts (its turns)")
        out.append(value if isinstance(value, str) else tuple(value))
    return out


def _canary(path: str) -> dict:
    text = read_text(path, "canary record")
    try:
        canary = json.loads(text)
    except ValueError as exc:
        raise DataError(f"{path}: the canary record is not JSON ({exc})") from None
    if not isinstance(canary, dict):
        raise DataError(f"{path}: the canary record must be one JSON object")
    return canary


def run_target_command(options: dict) -> None:
    """``ctxlite audit --target ...``: the run, the verdict and table (stderr with JSON on stdout), the gate."""
    _check(options)
    o = options
    refuse_same_files(
        [("--data", o["data_path"]), ("--target-file", o["target_file"]), ("--canary-record", o["canary_record"])]
        + [("--query-file", o["query_file"])],
        [("--out", o["out_path"]), ("--junit", o["junit"])],
    )
    estimates = EstimateSettings(confidence=o["confidence"], bound=o["bound"])
    settings = TargetSettings(
        queries=[*o["queries"], *_questions(o["query_file"])],
        secrets=o["secrets"],
        markers=o["markers"],
        labels=o["labels"],
        trials=o["trials"],
        delta=o["delta"],
        seed=o["seed"],
        resample_size=o["shots"] if o["resample_data"] else None,
        reference_runs=o["reference_runs"] if given_explicitly("reference_runs") else 0,
        estimates=estimates,
    )
    records = [line.data for line in read_jsonl(o["data_path"])]
    canary = _canary(o["canary_record"])
    gate = None if o["fail_above_epsilon"] is None else EpsilonGate(o["fail_above_epsilon"], o["epsilon_unit"])
    chat = {}
    if o["target"] == "chat":
        chat = {"temperature": o["temperature"], "max_tokens": o["max_new_tokens"]}
        chat.update(
            {
                k: o[n]
                for k, n in (("timeout", "request_timeout"), ("retries", "retries"), ("concurrency", "concurrency"))
                if o[n] is not None
            }
        )
    target = open_target(
        o["target"], target_file=o["target_file"], base_url=o["base_url"], model_name=o["model_name"], **chat
    )
    if o["plan"]:
        try:
            emit_plan(plan_target_audit(target, records, settings, canary=canary), o["as_json"])
        finally:
            target.close()
        return
    line = progress_line()
    try:
        run = run_target_audit(
            target, records, settings, canary=canary, out=o["out_path"], resume=o["resume"], progress=line, gate=gate
        )
    finally:
        line.close()
        target.close()
    table = "\n".join([*run.verdict.lines(), target_table(run)])
    if wants_json(o["as_json"]):
        click.echo(table, err=True)
        emit_json(target_json(run))
    else:
        click.echo(table)
    conclude(run.verdict, o["junit"])
