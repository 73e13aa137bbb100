"""``chat``: any OpenAI-compatible ``/v1/chat/completions`` endpoint, the private records in the
system message and the audit question as the user's turn."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ctxlite.errors import InvalidParameter, ServerError, TargetError
from ctxlite.runtime.server_transport import Http, ServerConfig

SYSTEM = (
    "You are a helpful assistant. Answer the user's question from these private records, one JSON "
    "object per line:\n{records}"
)
"""The default system message: ``{records}`` is replaced by the records, one JSON object a line."""


class ChatTarget:
    """A chat API: ``load`` keeps the records (the system message is rebuilt from them), ``ask``
    sends ``[system, user]`` with the seed, ``temperature`` and ``max_tokens`` and returns the first
    choice's message text (an answer of another shape is a ``TargetError``). The API key is read
    from the environment (``CTXLITE_API_KEY``, else ``OPENAI_API_KEY``); no ``/tokenize`` is
    needed. ``system``: the system message's template (``{records}`` where the records go)."""

    kind = "chat"

    def __init__(
        self,
        base_url: str,
        model_name: str,
        *,
        system: str = SYSTEM,
        temperature: float = 1.0,
        max_tokens: int = 64,
        timeout: float = 120.0,
        retries: int = 4,
        backoff: float = 0.5,
        concurrency: int = 1,
        sleep=None,
    ):
        if "{records}" not in system:
            raise InvalidParameter("the chat target's system message template must hold {records}")
        if not temperature >= 0 or max_tokens < 1:
            raise InvalidParameter("the chat target needs temperature >= 0 and max_tokens >= 1")
        self.base_url, self.model_name, self.system = base_url, model_name, system
        self.temperature, self.max_tokens = float(temperature), int(max_tokens)
        config = ServerConfig(base_url, model_name, concurrency, timeout, retries, backoff)
        self._http = Http(config, **({} if sleep is None else {"sleep": sleep}))
        self._system: str | None = None

    def load(self, records: Sequence[dict]) -> None:
        lines = "\n".join(json.dumps(dict(r), ensure_ascii=False, sort_keys=True) for r in records)
        self._system = self.system.replace("{records}", lines)

    def ask(self, query: str, seed: int) -> str:
        return self._complete([{"role": "user", "content": query}], seed)

    def converse(self, turns: Sequence[str], seed: int) -> list[str]:
        """A multi-turn question: each turn sent after the earlier turns and their answers."""
        history, answers = [], []
        for turn in turns:
            history.append({"role": "user", "content": turn})
            answers.append(self._complete(history, seed))
            history.append({"role": "assistant", "content": answers[-1]})
        return answers

    def _complete(self, messages: list[dict], seed: int) -> str:
        if self._system is None:
            raise InvalidParameter("the chat target was asked before any records were loaded")
        url = self.base_url.rstrip("/") + "/chat/completions"
        payload = {
            "model": self.model_name,
            "messages": [{"role": "system", "content": self._system}, *messages],
            "seed": int(seed),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        try:
            body = self._http.post(url, payload, what="a chat completion")
        except ServerError as exc:
            raise TargetError(str(exc)) from None
        choices = body.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        text = message.get("content") if isinstance(message, dict) else None
        if not isinstance(text, str):
            head = json.dumps(body, ensure_ascii=False)[:120]
            raise TargetError(f"the chat API at {url} answered without choices[0].message.content text: {head}")
        return text

    def identity(self) -> dict:
        return {
            "kind": self.kind,
            "url": self.base_url,
            "model_name": self.model_name,
            "system": self.system,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }

    def close(self) -> None:
        self._http.close()
