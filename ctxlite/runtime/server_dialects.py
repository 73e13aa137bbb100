"""What each OpenAI-compatible server spells its own way: the tokenizer endpoints, how the prompt of a
completion is sent, how its echoed log-probabilities line up with the prompt's tokens, which
settings turn its sampling filters off, and where it reports its version and context window.

The completions API itself (``/v1/completions`` with ``echo`` and ``logprobs``) is common to all;
:class:`~ctxlite.runtime.openai_server.OpenAIServer` speaks it, asking its :class:`Dialect` for
the rest. :func:`probe_dialect` finds the dialect once, on connecting:

* llama-cpp-python (``/extras/tokenize``, text prompts only, always adds BOS, drops the BOS from
  the echoed entries): :class:`LlamaCppPython`, the dialect the test suite runs against a real
  server;
* llama.cpp's server (``/tokenize`` with ``content``, ``/props``): :class:`LlamaCpp`;
* vLLM (``/tokenize`` with ``prompt``, answering ``max_model_len``; ``/v1/models``): :class:`Vllm`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from ctxlite.errors import InvalidParameter, ServerError
from ctxlite.runtime.server_transport import Http, ServerConfig


def answer_field(body: dict, path: Sequence, url: str, what: str):
    """``body[path[0]][path[1]]...`` or a ServerError naming what is missing."""
    node = body
    for key in path:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            shown = ".".join(str(k) for k in path)
            raise ServerError(f"{what}: the answer of {url} has no {shown}") from None
    return node


def token_ids(tokens, url: str, what: str) -> list[int]:
    """A tokenizer's answer as token ids, or a ServerError: a list of whole numbers >= 0."""
    if not isinstance(tokens, list) or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in tokens):
        shown = str(tokens)[:80]
        raise ServerError(f"{what}: the answer of {url} has tokens that are not a list of token ids: {shown}")
    return tokens


class Dialect(ABC):
    """One server's spelling (the base: a server that takes token ids as the prompt and echoes one
    log-probability entry per prompt token). ``bos``: the BOS token its tokenizer adds (None: none)."""

    name = ""
    takes_token_ids = True
    """The prompt of a completion may be token ids (else text, which must tokenize back to them)."""
    echo_offset = 0
    """The echoed entry j scores prompt token j + ``echo_offset``."""
    first_entry_null = True
    """The echoed entry 0 scores the first token the server saw, which has no context: it must be
    null (a number there is a misaligned echo, refused)."""
    sampling_off: dict = {}
    """The settings that turn the server's own sampling filters off (plain softmax(logits / T))."""

    def __init__(self, config: ServerConfig, http: Http, bos: int | None):
        self.config, self.http, self.bos = config, http, bos

    @abstractmethod
    def tokenize(self, text: str, add_bos: bool, special: bool) -> list[int]:
        """The server's token ids of ``text`` (a leading BOS only if ``add_bos``; ``special``: a text
        that spells a special token tokenizes as it)."""

    @abstractmethod
    def detokenize_request(self, tokens: list[int]) -> tuple[str, dict, str]:
        """(url, payload, the answer's key holding the text) of a detokenize request."""

    def check_echo(self, tokens: Sequence[int]) -> None:
        """Refuse a prompt whose echoed log-probabilities would not line up with its tokens (none here)."""

    def server_info(self) -> tuple[str | None, int | None]:
        """(version, context window) where the server reports them (``/version``; else None)."""
        info = self.http.get_json(f"{self.config.root}/version")
        return (str(info["version"]) if info and "version" in info else None), None

    def _tokens(self, path: str, payload: dict) -> list[int]:
        url, what = f"{self.config.root}{path}", "tokenizing"
        return token_ids(answer_field(self.http.post(url, payload, what=what), ["tokens"], url, what), url, what)


class LlamaCppPython(Dialect):
    """llama-cpp-python's server: its tokenize endpoint always adds BOS and parses special tokens, its
    completions take text only, and its echoed entries start after a leading BOS (entry j is token
    j + 1; without a leading BOS they pair the logits after token j with token j)."""

    name = "llama-cpp-python"
    takes_token_ids = False
    echo_offset = 1
    first_entry_null = False  # entry 0 is token 1, after the BOS its echo leaves out
    sampling_off = {"top_k": 0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0}

    def tokenize(self, text: str, add_bos: bool, special: bool) -> list[int]:
        toks = self._tokens("/extras/tokenize", {"input": text})
        if not add_bos and self.bos is not None and toks[:1] == [self.bos]:
            return toks[1:]
        if add_bos and self.bos is not None and toks[:1] != [self.bos]:
            return [self.bos, *toks]
        return toks

    def detokenize_request(self, tokens: list[int]) -> tuple[str, dict, str]:
        return f"{self.config.root}/extras/detokenize", {"tokens": tokens}, "text"

    def check_echo(self, tokens: Sequence[int]) -> None:
        """Refuse a prompt whose echoed entries would be misaligned (no leading BOS)."""
        if self.bos is None or tokens[0] != self.bos:
            raise InvalidParameter(
                "llama-cpp-python's server pairs echoed log-probabilities with the wrong tokens unless the "
                "prompt starts with BOS: serve a model that adds BOS, or use vLLM (not llama.cpp's llama-server: "
                "it returns no prompt log-probabilities, so it cannot score)"
            )


class LlamaCpp(Dialect):
    """llama.cpp's own server: ``/tokenize`` with ``content``, ``/detokenize``, ``/props`` for its build
    and context window."""

    name = "llama.cpp"
    sampling_off = {"top_k": 0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0}

    def tokenize(self, text: str, add_bos: bool, special: bool) -> list[int]:
        return self._tokens("/tokenize", {"content": text, "add_special": add_bos, "parse_special": special})

    def detokenize_request(self, tokens: list[int]) -> tuple[str, dict, str]:
        return f"{self.config.root}/detokenize", {"tokens": tokens}, "content"

    def server_info(self) -> tuple[str | None, int | None]:
        version, _ = super().server_info()
        props = self.http.get_json(f"{self.config.root}/props") or {}
        settings = props.get("default_generation_settings")
        return version or props.get("build_info"), (settings.get("n_ctx") if isinstance(settings, dict) else None)


class Vllm(Dialect):
    """vLLM: ``/tokenize`` with ``prompt`` (its answer has ``max_model_len``), ``/detokenize``, the
    context window in ``/v1/models``."""

    name = "vllm"
    sampling_off = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}

    def tokenize(self, text: str, add_bos: bool, special: bool) -> list[int]:
        return self._tokens(
            "/tokenize", {"model": self.config.model_name, "prompt": text, "add_special_tokens": add_bos}
        )

    def detokenize_request(self, tokens: list[int]) -> tuple[str, dict, str]:
        return f"{self.config.root}/detokenize", {"model": self.config.model_name, "tokens": tokens}, "prompt"

    def server_info(self) -> tuple[str | None, int | None]:
        version, _ = super().server_info()
        models = (self.http.get_json(f"{self.config.base_url.rstrip('/')}/models") or {}).get("data")
        mine = [m for m in models or () if isinstance(m, dict) and m.get("id") == self.config.model_name]
        lens = [m.get("max_model_len") for m in mine]
        return version, (lens[0] if lens else None)


def probe_dialect(config: ServerConfig, http: Http) -> Dialect:
    """The server's dialect, from how it answers an empty tokenize request (llama-cpp-python's
    ``/extras/tokenize`` first, then ``/tokenize``); a server with neither is refused."""
    root, what = config.root, "probing the tokenizer"
    body = http.post(f"{root}/extras/tokenize", {"input": ""}, what=what, probe=True)
    if "tokens" in body:
        return LlamaCppPython(config, http, body["tokens"][0] if body["tokens"] else None)
    probe = {"content": "", "prompt": "", "model": config.model_name, "add_special": True, "add_special_tokens": True}
    body = http.post(f"{root}/tokenize", probe, what=what, probe=True)
    if "tokens" not in body:
        raise InvalidParameter(
            f"the server at {root} has no tokenize endpoint (/extras/tokenize or /tokenize): ctxlite "
            "needs the server's own tokens for n-gram scoring and labels and will not guess them"
        )
    kind = Vllm if "max_model_len" in body else LlamaCpp
    return kind(config, http, body["tokens"][0] if body["tokens"] else None)
