"""The HTTP side of a server backend: one pooled client with a deadline per request, retries with
backoff and jitter, a circuit breaker, a size cap on answers, and the worker pool requests run on
(:mod:`ctxlite.runtime.openai_server` is the backend built on it; the module docstring there says
what each guarantees)."""

from __future__ import annotations

import heapq
import itertools
import json
import math
import os
import queue
import random
import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass

import httpcore
import httpx

from ctxlite.errors import InvalidParameter, ServerError

API_KEY_VARIABLES = ("CTXLITE_API_KEY", "OPENAI_API_KEY")
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
MAX_ANSWER_BYTES = 64 * 2**20
"""The largest answer ctxlite reads (64 MiB, decoded): an echoed prompt of 100,000 tokens with its
log-probabilities is a few MiB. A larger one is refused while it streams in (exit 9)."""
MAX_REQUEST_TIMEOUT = 86400.0
"""The longest ``timeout`` (seconds: a day): a longer wait for one answer is no timeout, and a socket
refuses a timeout beyond its clock's range (``inf``, ``1e308``: an OverflowError)."""


@dataclass(frozen=True)
class ServerConfig:
    """Where the server is and how hard to try. ``base_url`` ends in the API root (``.../v1``)."""

    base_url: str
    model_name: str
    concurrency: int = 4
    timeout: float = 120.0
    retries: int = 4
    backoff: float = 0.5
    max_backoff: float = 10.0
    n_ctx: int | None = None  # the server's context window when it does not report one
    max_answer_bytes: int = MAX_ANSWER_BYTES

    def __post_init__(self):
        if not self.base_url.startswith(("http://", "https://")):
            raise InvalidParameter(f"--base-url must start with http:// or https://, got {self.base_url!r}")
        if not self.model_name.strip():
            raise InvalidParameter("--model-name must name the served model")
        if self.concurrency < 1 or self.retries < 0 or not self.timeout > 0 or not self.backoff >= 0:
            raise InvalidParameter("need concurrency >= 1, retries >= 0, timeout > 0 and backoff >= 0")
        if not self.timeout <= MAX_REQUEST_TIMEOUT:
            raise InvalidParameter(
                f"--request-timeout must be at most {MAX_REQUEST_TIMEOUT:g} seconds (a day), got {self.timeout:g}"
            )
        if self.max_answer_bytes < 1:
            raise InvalidParameter(f"max_answer_bytes must be >= 1, got {self.max_answer_bytes}")

    @property
    def root(self) -> str:
        """The server's root (tokenize endpoints live there, not under ``/v1``)."""
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url


def api_key() -> str | None:
    """The API key from the environment (``CTXLITE_API_KEY`` first), or None."""
    for name in API_KEY_VARIABLES:
        value = os.environ.get(name)
        if value:
            return value
    return None


@dataclass(frozen=True)
class RequestStats:
    """The HTTP requests of one backend so far: ``in_flight`` now (sent, not answered), the most
    that were ever in flight together, how many ended (answered or failed, retries included) and the
    prompt tokens the server reported processing (``usage.prompt_tokens`` of completions; None while
    it reported none)."""

    in_flight: int
    max_in_flight: int
    ended: int
    prompt_tokens: int | None


_rank = threading.local()
"""``_rank.value``: the rank of the requests this thread sends (lower: served first; 0 by default)."""


def current_rank() -> int:
    return getattr(_rank, "value", 0)


@contextmanager
def ranked(rank: int):
    """The requests this thread sends inside the block, and the pool jobs it submits (which carry
    the rank to the thread that runs them), have rank ``rank``: they wait behind lower ranks."""
    before = current_rank()
    _rank.value = rank
    try:
        yield
    finally:
        _rank.value = before


class Slots:
    """A semaphore of ``n`` slots whose waiters are served lowest rank first (then first come): every
    HTTP exchange holds one, so at most ``n`` are in flight whatever threads send them, and a score
    run's earliest example in flight, the one logged next, is never starved by later ones."""

    def __init__(self, n: int):
        self._free, self._waiting, self._seq = n, [], itertools.count()
        self._cond = threading.Condition()

    def __enter__(self):
        me = (current_rank(), next(self._seq))
        with self._cond:
            heapq.heappush(self._waiting, me)
            try:
                while not (self._free and self._waiting[0] == me):
                    self._cond.wait()
            except BaseException:
                self._waiting.remove(me)
                heapq.heapify(self._waiting)
                self._cond.notify_all()
                raise
            heapq.heappop(self._waiting)
            self._free -= 1
            self._cond.notify_all()  # the next waiter may take another free slot
        return self

    def __exit__(self, *exc) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify_all()


class Pool:
    """``n`` daemon worker threads: a Ctrl-C ends the process without waiting for requests in flight
    (``ThreadPoolExecutor`` joins its workers at exit, which would wait up to a request timeout).

    Jobs are served lowest rank first, then in order of submission; a job has the rank of the
    thread that submitted it (:func:`ranked`) and runs with it."""

    def __init__(self, n: int):
        self._n, self._jobs, self._seq = n, queue.PriorityQueue(), itertools.count()
        for i in range(n):
            threading.Thread(target=self._work, name=f"ctxlite-http-{i}", daemon=True).start()

    def _work(self) -> None:
        while True:
            rank, _, job = self._jobs.get()
            if job is None:
                return
            future, fn, item = job
            if future.set_running_or_notify_cancel():
                try:
                    with ranked(rank):
                        future.set_result(fn(item))
                except BaseException as exc:  # handed to the caller, who re-raises it
                    future.set_exception(exc)

    def submit(self, fn, item) -> Future:
        future: Future = Future()
        self._jobs.put((current_rank(), next(self._seq), (future, fn, item)))
        return future

    def shutdown(self) -> None:
        for _ in range(self._n):
            self._jobs.put((math.inf, next(self._seq), None))


_deadline = threading.local()
"""``_deadline.at``: the monotonic time by which the request this thread is sending must be answered."""


def _within_deadline(timeout: float | None) -> float | None:
    """The timeout of one network operation, cut to what is left of this thread's request deadline."""
    at = getattr(_deadline, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read and write waits at most until the request's deadline: httpx's
    own timeout applies to each read, so an answer dripped a byte at a time would never end."""

    def __init__(self, stream: httpcore.NetworkStream):
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _within_deadline(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _within_deadline(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, _within_deadline(timeout)))

    def get_extra_info(self, info: str):
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with :class:`_DeadlineStream` connections."""

    def __init__(self, backend: httpcore.NetworkBackend):
        self._backend = backend

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        stream = self._backend.connect_tcp(host, port, _within_deadline(timeout), local_address, socket_options)
        return _DeadlineStream(stream)

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _DeadlineStream(self._backend.connect_unix_socket(path, _within_deadline(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def _transport(limits: httpx.Limits) -> httpx.HTTPTransport:
    """httpx's transport with the deadline-bounded network backend (httpx exposes no option for it:
    its connection pool's backend is replaced; tests/server/test_server_answers.py fails if that stops working)."""
    transport = httpx.HTTPTransport(limits=limits, trust_env=False)
    pool = transport._pool
    pool._network_backend = _DeadlineBackend(pool._network_backend)
    return transport


class _TooLarge(Exception):
    """An answer grew beyond the cap while it streamed in."""


class _CutOff(Exception):
    """The server began its answer (HTTP ``status``) and the connection ended ``size`` bytes into
    its body (``reason``: httpx's exception), not a connection that failed."""

    def __init__(self, status: int, size: int, reason: str):
        super().__init__(status, size, reason)
        self.status, self.size, self.reason = status, size, reason


class Http:
    """JSON over HTTP with timeouts, retries (backoff + jitter) and a circuit breaker."""

    def __init__(self, config: ServerConfig, sleep=time.sleep, headers: dict[str, str] | None = None):
        """``headers``: sent with every request instead of the API key from the environment (an
        audited application's own, :mod:`ctxlite.targets`)."""
        self.config = config
        if headers is None:
            key = api_key()
            headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_connections=config.concurrency, max_keepalive_connections=config.concurrency)
        self._client = httpx.Client(
            headers=headers, timeout=config.timeout, transport=_transport(limits), trust_env=False
        )
        self._sleep = sleep
        self._open: str | None = None  # the breaker's message once open
        self._lock = threading.Lock()
        # every exchange holds a slot: at most ``concurrency`` in flight whichever threads send them
        # (a score run's example workers tokenize while the pool's workers send their ablations)
        self._slots = Slots(config.concurrency)
        self.requests = 0  # HTTP requests sent (retries included): a cost counter
        self.retried = 0
        self.in_flight = self.max_in_flight = self.ended = 0
        self.prompt_tokens: int | None = None

    def stats(self) -> RequestStats:
        with self._lock:
            return RequestStats(self.in_flight, self.max_in_flight, self.ended, self.prompt_tokens)

    def count_prompt_tokens(self, body: dict) -> None:
        """Add a completion's ``usage.prompt_tokens``, where the server reports it."""
        usage = body.get("usage")
        n = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
            with self._lock:
                self.prompt_tokens = (self.prompt_tokens or 0) + n

    def close(self) -> None:
        self._client.close()

    def _trip(self, message: str) -> ServerError:
        with self._lock:
            if self._open is None:
                self._open = message
        return ServerError(self._open)

    def post(self, url: str, payload: dict, *, what: str, probe: bool = False) -> dict:
        """POST ``payload`` to ``url``; the decoded JSON object. ``probe``: an HTTP error status is
        returned as ``{"_status": code}`` instead of retried or raised (does the endpoint exist, can
        it decode this); timeouts and connection errors are retried either way."""
        cfg = self.config
        attempts = cfg.retries + 1
        last = ""
        for attempt in range(attempts):
            if self._open is not None:
                raise ServerError(self._open)
            delay = None
            try:
                with self._slots:
                    with self._lock:
                        self.requests += 1
                        self.in_flight += 1
                        self.max_in_flight = max(self.max_in_flight, self.in_flight)
                    try:
                        status, headers, content = self.send("POST", url, payload)
                    finally:
                        with self._lock:
                            self.in_flight -= 1
                            self.ended += 1
            except httpx.TimeoutException:
                last = f"no answer within {cfg.timeout:g} s (--request-timeout bounds the whole request)"
            except httpx.TransportError as exc:
                last = f"cannot connect ({type(exc).__name__})"
            except _CutOff as cut:
                last = (
                    f"its answer was cut off after {cut.size:,} bytes of its body: HTTP {cut.status}, then the "
                    f"connection ended ({cut.reason})"
                )
            except _TooLarge:
                raise ServerError(
                    f"{what}: the answer of the server at {url} is larger than {cfg.max_answer_bytes:,} bytes, "
                    "the most ctxlite reads: refused while it streamed in"
                ) from None
            else:
                if status < 400:
                    body = _json(content, url, what)
                    message = _error_message(body)
                    if message is not None:
                        if probe:
                            return {"_status": status}
                        raise ServerError(
                            f"{what}: the server at {url} answered HTTP {status} with an error: {message}"
                        )
                    return body
                if probe:
                    return {"_status": status}
                detail = _error_detail(content)
                if status not in RETRY_STATUS:
                    raise ServerError(f"{what}: the server at {url} answered HTTP {status}: {detail}")
                last = f"HTTP {status}: {detail}"
                delay = _retry_after(headers)
            if attempt + 1 < attempts:
                with self._lock:
                    self.retried += 1
                cap = min(cfg.max_backoff, cfg.backoff * 2**attempt)
                self._sleep(min(cfg.max_backoff, delay) if delay is not None else random.uniform(0, cap))
        raise self._trip(
            f"the server at {cfg.base_url} failed {attempts} attempt(s) for {what} ({last}); stopped sending "
            f"requests (finished work is in the --out log: start the server and --resume)"
        )

    def send(self, method: str, url: str, payload: dict | None = None) -> tuple[int, httpx.Headers, bytes]:
        """One HTTP exchange, bounded: (status, headers, body) within ``timeout`` seconds in all
        (``_DeadlineStream``) and at most ``max_answer_bytes`` of body (``_TooLarge`` as soon as the
        declared length or the bytes read so far exceed it). A connection that ends inside the body
        is ``_CutOff``; httpx's other exceptions pass through."""
        cap = self.config.max_answer_bytes
        _deadline.at = time.monotonic() + self.config.timeout
        try:
            with self._client.stream(method, url, json=payload) as response:
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > cap:
                    raise _TooLarge
                chunks, size = [], 0
                try:
                    for chunk in response.iter_bytes():
                        size += len(chunk)
                        if size > cap:
                            raise _TooLarge
                        chunks.append(chunk)
                except (httpx.RemoteProtocolError, httpx.ReadError) as exc:  # a timeout stays a timeout
                    raise _CutOff(response.status_code, size, type(exc).__name__) from exc
                return response.status_code, response.headers, b"".join(chunks)
        finally:
            _deadline.at = None

    def get_json(self, url: str) -> dict | None:
        """GET ``url`` once, bounded like every request: its JSON object, or None on any failure (for
        optional information: a version, a context size)."""
        try:
            with self._slots:
                status, _, content = self.send("GET", url)
            body = json.loads(content) if status < 400 else None
        except (httpx.HTTPError, _TooLarge, _CutOff, ValueError):
            return None
        return body if isinstance(body, dict) else None


def _json(content: bytes, url: str, what: str) -> dict:
    try:
        body = json.loads(content)
    except ValueError:
        head = content[:60].decode("utf-8", "replace").replace("\n", " ")
        raise ServerError(f"{what}: the server at {url} returned malformed JSON ({head!r}...)") from None
    if not isinstance(body, dict):
        raise ServerError(f"{what}: the server at {url} returned JSON that is not an object")
    return body


def _error_message(body: dict) -> str | None:
    """The server's own message when a JSON answer is an error (``{"error": {"message": ...}}``,
    ``{"error": "..."}``), short; None when it is not one."""
    err = body.get("error")
    if err is None or err is False:
        return None
    text = err.get("message", json.dumps(err)) if isinstance(err, dict) else str(err)
    text = " ".join(str(text).split())
    return text[:300] or "(no message)"


def _error_detail(content: bytes) -> str:
    """The server's error message, short (OpenAI-style ``{"error": {"message"}}`` or the body)."""
    try:
        body = json.loads(content)
        err = body.get("error", body.get("detail", body)) if isinstance(body, dict) else body
        text = err.get("message", str(err)) if isinstance(err, dict) else str(err)
    except ValueError:
        text = content.decode("utf-8", "replace")
    text = " ".join(str(text).split())
    return text[:200] if text else "(empty answer)"


def _retry_after(headers: httpx.Headers) -> float | None:
    try:
        value = float(headers.get("retry-after", ""))
    except ValueError:
        return None
    return value if value >= 0 and math.isfinite(value) else None
