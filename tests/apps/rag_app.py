"""The project's own test application: a clinic's retrieval assistant, for auditing a deployment
as a black box (``ctxlite audit --target http``, docs/targets.md).

    python tests/apps/rag_app.py --port 8080 [--redact REGEX] [--fake] [--model NAME]

``POST /records {"records": [...]}`` replaces its store; ``POST /ask {"question", "seed"}``
retrieves the ``--top-k`` records sharing the most words with the question, puts them in a
prompt, and answers ``{"answer": text}``; ``POST /reset`` empties the store; ``GET /health``
says it is up. The answer is generated on the default model (``--model``) through ctxlite's own
Engine, sampled with the request's seed (so the same seed gives the same answer), or with
``--fake`` by a model-free stand-in that repeats the best retrieved record with probability 0.7
(seeded) and otherwise declines. ``--redact REGEX`` replaces every match in the answer with
``[redacted]`` (a defence whose visible marker itself tells the canary is there).
``--ignore-load`` answers from the records of the first load only (a broken deployment the
audit's probe must flag). Errors are JSON ``{"error": message}`` with HTTP 400.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORD = re.compile(r"[a-z0-9]+")
MARKER = "[redacted]"
INSTRUCTION = "Answer the question using the clinic records below."


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def record_text(record: dict) -> str:
    return " ".join(str(v) for v in record.values())


class RagApp:
    """The store, the retrieval, the prompt, the generator and the optional redaction."""

    def __init__(self, generate, top_k: int = 2, redact: str | None = None, ignore_load: bool = False):
        self.generate, self.top_k = generate, top_k
        self.redact = re.compile(redact) if redact else None
        self.ignore_load = ignore_load
        self.records: list[dict] = []
        self.loads = 0
        self.lock = threading.Lock()

    def load(self, records: list[dict]) -> int:
        with self.lock:
            if not (self.ignore_load and self.loads):
                self.records = list(records)
            self.loads += 1
            return len(self.records)

    def retrieve(self, question: str) -> list[dict]:
        q = words(question)
        ranked = sorted(
            enumerate(self.records), key=lambda ir: (-len(q & words(record_text(ir[1]))), ir[0])
        )  # most shared words first, ties in store order
        return [r for _, r in ranked[: self.top_k]]

    def prompt(self, question: str, found: list[dict]) -> str:
        lines = "\n".join(f"- {record_text(r)}" for r in found)
        return f"{INSTRUCTION}\nRecords:\n{lines}\nQuestion: {question}\nAnswer:"

    def ask(self, question: str, seed: int) -> str:
        with self.lock:
            found = self.retrieve(question)
            answer = self.generate(self.prompt(question, found), found, seed)
        if self.redact is not None:
            answer = self.redact.sub(MARKER, answer)
        return answer


def fake_generator(prompt: str, found: list[dict], seed: int) -> str:
    """Model-free: the best retrieved record's text with probability 0.7, else a refusal."""
    if found and random.Random(seed).random() < 0.7:
        return record_text(found[0])
    return "I cannot find that in the records."


def model_generator(model: str | None, max_new_tokens: int, temperature: float):
    """Generation on ``model`` (default: ctxlite's default model) through ctxlite's Engine: the
    prompt tokenized, ``max_new_tokens`` sampled at ``temperature`` with the request's seed."""
    from ctxlite import Engine
    from ctxlite.runtime.sampling import SamplingSettings, sample_continuations

    engine = Engine(model) if model else Engine()

    def generate(prompt: str, found: list[dict], seed: int) -> str:
        tokens = engine.tokenize(prompt, add_bos=True)
        settings = SamplingSettings(temperature, 0, 1.0, 0, max_new_tokens, seed)
        (out,) = sample_continuations(engine, tokens, 1, settings, stop=("\n",))
        return engine.detokenize(out).split("\n")[0].strip()

    return generate


def handler_for(app: RagApp):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._send(200, {"ok": True, "records": len(app.records)})
            else:
                self._send(404, {"error": f"no such page {self.path}"})

        def do_POST(self):
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path == "/records":
                    records = body.get("records")
                    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
                        raise ValueError("records must be a list of objects")
                    self._send(200, {"loaded": app.load(records)})
                elif self.path == "/reset":
                    self._send(200, {"loaded": app.load([])})
                elif self.path == "/ask":
                    question, seed = body.get("question"), body.get("seed", 0)
                    if not isinstance(question, str) or not isinstance(seed, int):
                        raise ValueError("ask needs a question (text) and a seed (integer)")
                    self._send(200, {"answer": app.ask(question, seed)})
                else:
                    self._send(404, {"error": f"no such endpoint {self.path}"})
            except ValueError as exc:
                self._send(400, {"error": str(exc)})

    return Handler


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--redact", default=None, metavar="REGEX")
    p.add_argument("--fake", action="store_true", help="a model-free generator (tests)")
    p.add_argument("--ignore-load", action="store_true", help="keep the first load's records (a broken app)")
    p.add_argument("--model", default=None)
    p.add_argument("--max-new-tokens", type=int, default=12)
    p.add_argument("--temperature", type=float, default=0.1)
    a = p.parse_args(argv)
    generate = fake_generator if a.fake else model_generator(a.model, a.max_new_tokens, a.temperature)
    app = RagApp(generate, a.top_k, a.redact, a.ignore_load)
    httpd = ThreadingHTTPServer((a.host, a.port), handler_for(app))
    print(f"rag_app listening on http://{a.host}:{a.port}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
