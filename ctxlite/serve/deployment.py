"""A deployment of ``ctxlite serve``, start to stop: what ``ctxlite serve`` runs, and what a program
embedding the server calls (:func:`run_deployment`).

It owns what the operator's settings decide before a request is answered: the private context and
the API keys read in, a non-loopback address refused without keys, the deployment's identity (the
model, ε, λ and the context's hash: a restart continues a budget log only under the same one), the
budget log read back before the model loads, and the server's life (Ctrl-C / SIGTERM drain the
requests in flight, then the log is ended and closed).
"""

from __future__ import annotations

import ipaddress
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ctxlite.errors import DataError, InvalidParameter, LogInUse
from ctxlite.identity import content_hash
from ctxlite.records import read_jsonl, read_text
from ctxlite.runtime.engine import LocalModel
from ctxlite.runtime.models import verified_entry
from ctxlite.serve.ledger import Budgets, Ledger
from ctxlite.serve.service import ServeSettings, Service

__all__ = [
    "KEYS_VARIABLE", "Deployment", "read_api_keys", "read_context", "read_replay_secret", "run_deployment",
    "serve_identity",
]  # fmt: skip

KEYS_VARIABLE = "CTXLITE_API_KEYS"


@dataclass(frozen=True)
class Deployment:
    """What the operator fixed at start (``ctxlite serve``'s options)."""

    context: str
    epsilon: float | None
    lam: float = 1.0
    budgets: Budgets = Budgets(None, None)
    api_keys: frozenset = frozenset()
    host: str = "127.0.0.1"
    port: int = 8000
    max_tokens_cap: int = 256
    max_request_bytes: int = 65536
    model_name: str | None = None
    release_realised: bool = False
    replay_secret: bytes | None = None
    public_context_tokens: int | None = None


def read_context(context_file: str | None = None, data: str | None = None) -> str:
    """The private context: a text file, or the ``text`` of each JSONL record joined by blank lines."""
    if (context_file is None) == (data is None):
        raise InvalidParameter("give the private context as exactly one of --context FILE or --data RECORDS.jsonl")
    if context_file is not None:
        text = read_text(context_file, "context file")
    else:
        text = "\n\n".join(line.data["text"] for line in read_jsonl(data, required=["text"], strings=["text"]))
    if not text.strip():
        raise InvalidParameter("the private context is empty: there is nothing to serve over")
    return text


MIN_SECRET_BYTES = 16


def read_replay_secret(path: str | None) -> bytes | None:
    """The operator's replay secret: the bytes of ``path`` (surrounding whitespace dropped), at least
    ``MIN_SECRET_BYTES`` of them; None without a path."""
    if path is None:
        return None
    secret = read_text(path, "replay secret file").strip().encode("utf-8")
    if len(secret) < MIN_SECRET_BYTES:
        raise InvalidParameter(
            f"{path} holds {len(secret)} bytes: a replay secret needs at least {MIN_SECRET_BYTES} "
            "(e.g. the output of: openssl rand -hex 32)"
        )
    return secret


def read_api_keys(path: str | None = None, environ: Mapping[str, str] = os.environ) -> frozenset:
    """API keys: one per line of ``path`` (``#`` lines skipped), else comma-separated in
    ``$CTXLITE_API_KEYS``; none: no key is asked."""
    if path is not None:
        raw = read_text(path, "API key file").splitlines()
    else:
        raw = environ.get(KEYS_VARIABLE, "").split(",")
    keys = frozenset(k.strip() for k in raw if k.strip() and not k.strip().startswith("#"))
    if path is not None and not keys:
        raise InvalidParameter(f"{path} holds no API key (one per line)")
    return keys


def serve_identity(
    model: LocalModel, epsilon: float | None, lam: float, context: str, delta: float | None = None
) -> dict:
    """The deployment's identity: the model's, and the settings a budget is spent under (the context
    by its hash only: the log never holds the private text; δ only where budgets are (ε, δ) ones)."""
    settings = {"epsilon": epsilon, "lambda": lam, "context": content_hash(context)}
    return {**model.identity(), "settings": settings | ({} if delta is None else {"delta": delta})}


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _absorb(signum, frame):
    """The signal uvicorn raises again after draining: already acted on."""


def run_deployment(model: LocalModel, deployment: Deployment, log_path: str, say: Callable[[str], None] = print):
    """Serve ``model`` over ``deployment.context`` on ``host:port`` until Ctrl-C or SIGTERM, the budgets
    kept in the hash-chained log at ``log_path``; returns the signal that stopped it.

    Refused before the model loads: a non-loopback address without API keys, a budget without ε,
    another deployment's log (or one in use by a live process)."""
    from ctxlite.serve.app import server  # FastAPI and uvicorn load when a server starts

    d = deployment
    if not d.api_keys and not _loopback(d.host):
        raise InvalidParameter(
            f"--host {d.host} is reachable from other machines: give --api-keys (or {KEYS_VARIABLE})"
        )
    if d.release_realised and not _loopback(d.host):
        raise InvalidParameter(
            f"--release-realised: --host {d.host} is reachable from other machines, and the values it releases "
            "are outside the epsilon bound: a testing server listens on loopback (127.0.0.1) only"
        )
    try:
        identity = serve_identity(model, d.epsilon, d.lam, d.context, d.budgets.delta)
        ledger = Ledger(log_path, identity, d.budgets, d.epsilon)
    except (DataError, LogInUse) as exc:  # RecordLog's advice names a run's --out: here it is --log
        raise type(exc)(str(exc).replace("--out", "--log").replace("ctxlite run", "ctxlite process")) from None
    try:
        with model.open() as eng:
            entry = verified_entry(eng.model_path)
            name = d.model_name or (entry.name if entry else eng.model_path.stem)
            settings = ServeSettings(
                name, d.epsilon, d.lam, d.max_tokens_cap, d.max_request_bytes, d.api_keys, d.release_realised,
                d.replay_secret, d.public_context_tokens,
            )  # fmt: skip
            service = Service(eng, d.context, settings, ledger)
            http = server(service, d.host, d.port)
            bound = "no bound (unbounded CID)" if d.epsilon is None else f"epsilon {d.epsilon:g} per token"
            if d.budgets.delta is not None:
                bound += f", budgets at delta {d.budgets.delta:g} (optimal composition)"
            spent = f"{ledger.responses} response(s) logged, {ledger.spent_total:g} spent"
            if d.budgets.delta is not None:
                spent += (
                    f" ({ledger.composed(ledger.tokens_total):g} composed at delta {d.budgets.delta:g}, "
                    f"{ledger.composed_neighbour(ledger.tokens_total):g} against a neighbouring context)"
                )
            if ledger.recovered:
                spent += f" ({ledger.recovered} cut off by a crash, counted at their whole reservation)"
            say(f"ctxlite serve: {name} on http://{d.host}:{d.port}/v1, {bound}; {log_path}: {spent}")
            seeds = "replay (--replay-secret-file)" if d.replay_secret else "are sampled afresh (the seed is ignored)"
            say(
                f"ctxlite serve: the private context's public length is {service.public_context_tokens} tokens "
                f"of the {service.window}-token window (what decides whether a request fits); seeded requests {seeds}"
            )
            if d.release_realised:
                say(
                    "ctxlite serve: warning: --release-realised answers lambda_t*, realised bounds and teacher-forced "
                    "log-probabilities, uncharged and outside the bound: a server for testing, not a deployment"
                )
            # uvicorn sends the signal that stopped it again once it has drained: absorbed here
            previous = {sig: signal.signal(sig, _absorb) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                http.run()
            except SystemExit:  # uvicorn exits when it cannot bind
                if http.started:
                    raise
                raise InvalidParameter(
                    f"cannot listen on {d.host}:{d.port}: the port is in use or the address is not this machine's"
                ) from None
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
            ledger.finish()  # a clean stop: the log's end line, so it reads as complete
            if http.stopped_by is not None:
                how = "Ctrl-C" if http.stopped_by == signal.SIGINT else "SIGTERM"
                say(f"ctxlite serve: stopped ({how}); requests in flight answered, {ledger.responses} response(s) "
                    f"in {log_path}, {ledger.spent_total:g} spent")  # fmt: skip
            return http.stopped_by
    finally:
        ledger.close_log()
