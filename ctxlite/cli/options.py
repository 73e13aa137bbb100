"""Options and helpers shared by every ctxlite command (engine flags mirror llama.cpp's)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
import sys

import click

from ctxlite.cli.progress import say
from ctxlite.errors import EXIT_GATE, EXIT_INCONCLUSIVE
from ctxlite.gates import Outcome
from ctxlite.records import unencodable
from ctxlite.reporting.junit import write_junit
from ctxlite.reporting.terminal import verdict_line
from ctxlite.runtime.backend import BackendKind
from ctxlite.runtime.engine import Engine, EngineConfig, LocalModel
from ctxlite.runtime.openai_server import ServerConfig, connect
from ctxlite.runtime.server_transport import MAX_REQUEST_TIMEOUT


class NumberList(click.ParamType):
    """Comma-separated numbers, e.g. ``0,0.5,1`` or ``1,8,inf``, with a lower bound."""

    name = "LIST"

    def __init__(
        self, minimum: float = -math.inf, strict: bool = False, allow_inf: bool = False, integer: bool = False
    ):
        self.minimum, self.strict, self.allow_inf, self.integer = minimum, strict, allow_inf, integer

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            nums = tuple(float(v) for v in str(value).split(",") if v.strip())
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of numbers", param, ctx)
        if not nums:
            self.fail("give at least one number", param, ctx)
        for v in nums:
            if math.isnan(v) or (math.isinf(v) and not self.allow_inf):
                self.fail(f"{v} is not allowed", param, ctx)
            if self.integer and not float(v).is_integer():
                self.fail(f"every value must be a whole number, got {v:g}", param, ctx)
            if v < self.minimum or (self.strict and v == self.minimum):
                op = ">" if self.strict else ">="
                self.fail(f"every value must be {op} {self.minimum:g}, got {v:g}", param, ctx)
        return tuple(int(v) for v in nums) if self.integer else nums


class Text(click.ParamType):
    """Free text from the command line; bytes that are not UTF-8 are refused when the option is read."""

    name = "TEXT"

    def convert(self, value, param, ctx):
        value = value if isinstance(value, str) else str(value)
        if unencodable(value):
            self.fail("is not valid UTF-8 text (the shell passed bytes that are not UTF-8)", param, ctx)
        return value


TEXT = Text()


def choice(kind: type[enum.Enum]) -> click.Choice:
    """The CLI spellings of an enum's members: the enum is the one list of choices."""
    return click.Choice([member.value for member in kind])


def default(settings: type, name: str):
    """The default of field ``name`` of the settings dataclass, as the CLI spells it: the library's
    settings objects own every default."""
    field = {f.name: f for f in dataclasses.fields(settings)}[name]
    value = field.default_factory() if field.default is dataclasses.MISSING else field.default
    return value.value if isinstance(value, enum.Enum) else value


def given_explicitly(name: str) -> bool:
    """True if the current command's option ``name`` came from the command line or its environment variable."""
    source = click.get_current_context().get_parameter_source(name)
    return source in (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)


def engine_options(f):
    """-m/--model, -c/--n-ctx, -b/--n-batch, -t/--threads, -ngl/--n-gpu-layers, --flash-attn."""
    decorators = [
        click.option(
            "-m",
            "--model",
            envvar="CTXLITE_MODEL",
            default=None,
            metavar="NAME|PATH",
            type=TEXT,
            help="Registry name or GGUF path (env CTXLITE_MODEL) [default: gemma-3-270m]. With --backend openai: the "
            "served model's GGUF, whose tokens the server's must be (checked when ctxlite connects).",
        ),
        click.option(
            "-c",
            "--n-ctx",
            type=click.IntRange(16),
            default=2048,
            show_default=True,
            help="Context window per sequence, in tokens.",
        ),
        click.option(
            "-b",
            "--n-batch",
            type=click.IntRange(1),
            default=512,
            show_default=True,
            help="Tokens per llama_decode call.",
        ),
        click.option("-t", "--threads", type=click.IntRange(1), default=None, help="CPU threads [default: all cores]."),
        click.option(
            "-ngl",
            "--n-gpu-layers",
            type=int,
            default=0,
            show_default=True,
            help="Layers to offload to the GPU (needs a CUDA/Metal build; -1 = all).",
        ),
        click.option(
            "--flash-attn/--no-flash-attn",
            default=False,
            show_default=True,
            help="llama.cpp flash attention (changes log-probs by ~0.05 nats).",
        ),
    ]
    return functools.reduce(lambda acc, d: d(acc), reversed(decorators), f)


def local_model(kwargs: dict, model: str | None = None, *, embeddings: bool = False) -> LocalModel:
    """The llama.cpp model of the engine options in a command's ``kwargs`` (``model`` for another one,
    e.g. the embedding model), not loaded yet: the engine's settings are the library's defaults but
    for what the options set, the same as a library caller's ``Engine()`` gets."""
    config = EngineConfig(
        n_ctx=kwargs["n_ctx"],
        n_batch=kwargs["n_batch"],
        n_threads=kwargs["threads"],
        n_gpu_layers=kwargs["n_gpu_layers"],
        flash_attn=kwargs["flash_attn"],
    )
    return LocalModel(model or kwargs["model"], config, embeddings)


def emit_json(obj) -> None:
    """Machine-readable result on stdout (progress and messages go to stderr)."""
    click.echo(json.dumps(obj, indent=2, default=float, allow_nan=False))


def json_option(f):
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print the full JSON result on stdout (the default when stdout is not a terminal; on a "
        "terminal a table is printed instead).",
    )(f)


def wants_json(as_json: bool) -> bool:
    """JSON on stdout when asked for or when stdout is a pipe or file; a table for a person at a terminal."""
    return as_json or not sys.stdout.isatty()


def fail_above_influence_option(f):
    return click.option(
        "--fail-above-influence",
        type=click.FloatRange(min=0),
        default=None,
        metavar="NATS",
        help="Gate (score), after writing all output: exit 8 if some n-gram's τ_i minus its noise floor "
        "exceeds NATS, 0 only if every n-gram and its floor were measured (probes: an estimate, not a bound) "
        "and τ_i plus the floor is <= NATS, else 10 (inconclusive; so is any run without a floor: a server "
        "backend, --null-ablations 0). With --unit other than ngram: each unit's τ_u instead, and each "
        "near-duplicate pair's τ_pair (the two removed together) and each cluster's τ_cluster (three or more "
        "near-duplicates removed together) likewise.",
    )(f)


def fail_above_epsilon_option(f):
    """--fail-above-epsilon EPS and the unit of EPS, --epsilon-unit trial|query."""
    f = click.option(
        "--epsilon-unit",
        type=click.Choice(["trial", "query"]),
        default="trial",
        show_default=True,
        help="Unit of the --fail-above-epsilon budget: one trial's release (its queries composed, what "
        "the audit measures), or one query (accepted only where a trial is one query).",
    )(f)
    return click.option(
        "--fail-above-epsilon",
        type=click.FloatRange(min=0),
        default=None,
        metavar="EPS",
        help="Gate (audit), after writing all output: exit 8 if an ε row's certified lower bound or the "
        "audited pair's ε surely exceeds EPS (its exact value, or the lower end of its grid bracket), 0 only "
        "if the pair's exact ε, an upper bound on it or the mechanism's DP guarantee is <= EPS, else 10 "
        "(inconclusive).",
    )(f)


def junit_option(f):
    return click.option(
        "--junit",
        type=click.Path(dir_okay=False),
        default=None,
        help="Also write a JUnit XML file: one test case per example / per ε row, failed where the gate trips.",
    )(f)


def conclude(verdict, junit: str | None) -> None:
    """Write the JUnit file, say the gate's verdict on stderr, and exit with its code: 8 (fail),
    10 (inconclusive) or 0 (pass).

    Called after every other output is written, so a tripped gate loses nothing.
    """
    if junit:
        write_junit(junit, verdict)
    if verdict.gate is None:
        return
    if verdict.outcome is Outcome.FAIL:
        click.echo(f"ctxlite: gate tripped: {verdict_line(verdict)}", err=True)
        sys.exit(EXIT_GATE)
    if verdict.outcome is Outcome.INCONCLUSIVE:
        click.echo(f"ctxlite: gate inconclusive: {verdict_line(verdict)}", err=True)
        sys.exit(EXIT_INCONCLUSIVE)
    say(verdict_line(verdict))


def plan_option(f):
    return click.option(
        "--plan",
        is_flag=True,
        help="Print the forward passes and tokens the run needs and a time estimate for this machine "
        "(a short calibration), without running it or writing --out.",
    )(f)


def emit_plan(plan, as_json: bool) -> None:
    """The plan on stdout: JSON (asked for, or stdout is not a terminal) or one line."""
    if wants_json(as_json):
        emit_json({"plan": plan.to_dict()})
    else:
        click.echo(plan.summary())


SERVER_OPTIONS = ("backend", "base_url", "model_name", "concurrency", "request_timeout", "retries")
LOCAL_ONLY = ("model", "n_ctx", "n_batch", "threads", "n_gpu_layers", "flash_attn")


def _a_number_of_seconds(ctx, param, value):
    """Refuse ``nan`` (a float range lets it through: every comparison with it is false)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of seconds", ctx, param)
    return value


def server_options(f):
    """--backend local|openai, --base-url, --model-name, --concurrency, --request-timeout, --retries."""
    decorators = [
        click.option(
            "--backend",
            type=choice(BackendKind),
            default="local",
            show_default=True,
            help="local: llama.cpp in this process; openai: an OpenAI-compatible server at --base-url (vLLM or "
            "llama-cpp-python's; llama.cpp's llama-server returns no prompt log-probabilities, so it cannot "
            "score); its API key from env CTXLITE_API_KEY or OPENAI_API_KEY.",
        ),
        click.option(
            "--base-url", type=TEXT, default=None, metavar="URL", help="openai: the API root, e.g. http://host:8000/v1."
        ),
        click.option("--model-name", type=TEXT, default=None, metavar="NAME", help="openai: the served model's name."),
        click.option(
            "--concurrency",
            type=click.IntRange(1, 256),
            default=4,
            show_default=True,
            help="openai: requests in flight at once, across a run's examples and ablations or an audit's prompts.",
        ),
        click.option(
            "--request-timeout",
            type=click.FloatRange(min=0, min_open=True, max=MAX_REQUEST_TIMEOUT),
            callback=_a_number_of_seconds,
            default=120.0,
            show_default=True,
            metavar="SECONDS",
            help="openai: the longest one whole request may take (connecting, sending, the whole answer; "
            "a day at most).",
        ),
        click.option(
            "--retries",
            type=click.IntRange(0, 20),
            default=4,
            show_default=True,
            help="openai: retries of a request on 429/5xx/timeouts/connection errors (exponential backoff, jitter).",
        ),
    ]
    return functools.reduce(lambda acc, d: d(acc), reversed(decorators), f)


def open_server(kwargs: dict):
    """Pop the server options out of a command's kwargs; the connected server for ``--backend openai``
    (:func:`~ctxlite.runtime.openai_server.connect`: an ``OpenAIServer``, or a ``ServedModel`` where its
    completions carry no log-probabilities), else None.

    Refuses (usage error) server options without ``--backend openai`` and local engine options with it,
    but for ``--model``: with a server it names the served model's local GGUF, whose tokenizer the server's
    must equal (:meth:`~ctxlite.runtime.openai_server.OpenAIServer.check_tokenizer`, exit 2 otherwise)."""
    opts = {k: kwargs.pop(k) for k in SERVER_OPTIONS}
    server_flags = [f"--{k.replace('_', '-')}" for k in SERVER_OPTIONS[1:] if given_explicitly(k)]
    if BackendKind.parse(opts["backend"]) is not BackendKind.OPENAI:
        if server_flags:
            raise click.UsageError(f"{', '.join(server_flags)}: no effect without --backend openai")
        return None
    if kwargs.get("plan"):
        raise click.UsageError("--plan counts llama.cpp decodes: it has no meaning with --backend openai")
    source = click.get_current_context().get_parameter_source
    local = [k for k in LOCAL_ONLY if k != "model" and source(k) is click.core.ParameterSource.COMMANDLINE]
    if local:
        flags = ", ".join(f"--{k.replace('_', '-')}" for k in local)
        raise click.UsageError(f"{flags}: no effect with --backend openai (the server chooses its model and settings)")
    if not opts["base_url"] or not opts["model_name"]:
        raise click.UsageError("--backend openai needs --base-url and --model-name")
    config = ServerConfig(
        opts["base_url"],
        opts["model_name"],
        concurrency=opts["concurrency"],
        timeout=opts["request_timeout"],
        retries=opts["retries"],
    )
    if source("model") is not click.core.ParameterSource.COMMANDLINE:
        server = connect(config)
    else:
        server = _server_checked_against(config, click.get_current_context().params["model"])
    click.get_current_context().call_on_close(server.close)  # its request pool and connections, at the end
    return server


def _server_checked_against(config, model: str):
    """The server of ``config``, connected once its tokenizer is found to be ``model``'s (the GGUF's
    vocabulary; its weights are mapped, not computed with)."""
    with Engine(model, EngineConfig(n_ctx=16, kv_slots=1)) as local:
        return connect(config, tokenizer=local, tokenizer_name=local.model_path.name)
