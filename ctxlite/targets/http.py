"""``http``: the user's own application over HTTP, as its target file describes it."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxlite.errors import InvalidParameter, ServerError, TargetError
from ctxlite.runtime.server_transport import Http, ServerConfig
from ctxlite.targets.template import environ_headers, fill, follow, parse_path, placeholders


@dataclass(frozen=True)
class Request:
    """One kind of request of a target file: ``POST`` to ``url`` (relative to the target's
    ``base_url`` or absolute) with the JSON ``body`` template; ``answer``: the JSON path of the
    answer's text (the ask request only)."""

    url: str
    body: object = field(default_factory=dict)
    method: str = "POST"
    answer: str | None = None

    def __post_init__(self):
        if self.method.upper() != "POST":
            raise InvalidParameter(f"request {self.url}: method {self.method!r}: a target's requests are POST")
        if self.answer is not None:
            parse_path(self.answer)


class HttpTarget:
    """An application reached over HTTP: ``load`` POSTs the records (``{records}`` in the load body),
    ``ask`` POSTs the question (``{query}``, ``{seed}`` in the ask body) and reads the text at the
    ask request's ``answer`` path; ``reset`` (optional) is POSTed before every load. Requests are
    sent with the target's ``headers`` (``${VAR}`` from the environment), time out after
    ``timeout`` seconds and are retried with backoff (``retries``) as a server's are; an error
    status, a body that is not JSON or an answer path missing is a ``TargetError`` carrying the
    application's own message."""

    kind = "http"

    def __init__(
        self,
        base_url: str,
        load: Request,
        ask: Request,
        reset: Request | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 120.0,
        retries: int = 4,
        backoff: float = 0.5,
        concurrency: int = 1,
        file_sha256: str | None = None,
        sleep=None,
    ):
        if ask.answer is None:
            raise InvalidParameter('the ask request needs an answer path (answer = "$.answer")')
        if "query" not in placeholders(ask.body):
            raise InvalidParameter("the ask request's body must hold {query}")
        if not placeholders(load.body) & {"records", "records_json"}:
            raise InvalidParameter("the load request's body must hold {records}")
        self.base_url, self.load_request, self.ask_request, self.reset_request = base_url, load, ask, reset
        self.file_sha256 = file_sha256
        where = f"target {base_url}"
        config = ServerConfig(base_url, "target", concurrency, timeout, retries, backoff)
        kwargs = {} if sleep is None else {"sleep": sleep}
        self._http = Http(config, headers=environ_headers(headers or {}, where), **kwargs)

    def _url(self, request: Request) -> str:
        if request.url.startswith(("http://", "https://")):
            return request.url
        return self.base_url.rstrip("/") + "/" + request.url.lstrip("/")

    def _post(self, request: Request, values: dict, what: str) -> dict:
        try:
            return self._http.post(self._url(request), fill(request.body, values), what=f"the target's {what}")
        except TargetError:
            raise
        except ServerError as exc:
            raise TargetError(str(exc)) from None

    def load(self, records: Sequence[dict]) -> None:
        if self.reset_request is not None:
            self._post(self.reset_request, {}, "reset")
        rows = [dict(r) for r in records]
        self._post(self.load_request, {"records": rows, "records_json": rows}, "load")

    def ask(self, query: str, seed: int, history: list[dict] | None = None) -> str:
        values = {"query": query, "seed": int(seed), "history": history or []}
        body = self._post(self.ask_request, values, "ask")
        return follow(body, self.ask_request.answer, f"the target at {self._url(self.ask_request)}")

    @property
    def converses(self) -> bool | str:
        """True when the ask body holds ``{history}`` (a multi-turn question can be asked), else why not."""
        if "history" in placeholders(self.ask_request.body):
            return True
        return "needs the ask request's body to hold {history} (the earlier turns and answers)"

    def converse(self, turns: Sequence[str], seed: int) -> list[str]:
        """A multi-turn question: each turn asked with the earlier turns and their answers in the ask
        body's ``{history}`` (a list of ``{"role": "user"|"assistant", "content"}``)."""
        if self.converses is not True:
            raise InvalidParameter(f"a multi-turn query {self.converses}")
        history, answers = [], []
        for turn in turns:
            answers.append(self.ask(turn, seed, history))
            history += [{"role": "user", "content": turn}, {"role": "assistant", "content": answers[-1]}]
        return answers

    def identity(self) -> dict:
        ident = {"kind": self.kind, "url": self.base_url}
        if self.file_sha256 is not None:
            ident["target_file_sha256"] = self.file_sha256
        return ident

    def close(self) -> None:
        self._http.close()


def file_hash(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
