"""ctxlite.targets against real local targets the tests start: the test application (model-free,
``--fake``) over HTTP, small command scripts, and loopback servers that fail the ways a deployment
does (HTTP 500, not JSON, a missing answer path, too slow)."""

from __future__ import annotations

import json
import sys
import textwrap
from http.server import BaseHTTPRequestHandler

import pytest

from ctxlite.errors import DataError, InvalidParameter, TargetError
from ctxlite.targets import ChatTarget, CommandTarget, HttpTarget, load_target_file, open_target
from ctxlite.targets.http import Request
from ctxlite.targets.template import fill, follow, parse_path
from tests.apps.process import RagAppProcess, target_file
from tests.servers import LoopbackHTTP

RECORDS = [{"name": "Bo Chen", "note": "MRN 1001, asthma"}, {"name": "Cy Diaz", "note": "MRN 1002, gout"}]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    proc = RagAppProcess(tmp_path_factory.mktemp("rag"), ["--fake"]).start(timeout=60)
    yield proc
    proc.stop()


def test_fill_substitutes_values_into_the_structure_not_into_json_text():
    body = {"q": "{query}", "seed": "{seed}", "recs": "{records}", "say": "Q: {query} #{seed}"}
    query = 'He said "}{" \n and left'
    out = fill(body, {"query": query, "seed": 7, "records": RECORDS})
    assert out == {"q": query, "seed": 7, "recs": RECORDS, "say": f"Q: {query} #7"}
    assert json.loads(json.dumps(out))["q"] == query  # the request's shape is unchanged by the text


@pytest.mark.parametrize(
    ("path", "steps"), [("$.answer", ["answer"]), ("answer.text", ["answer", "text"]), ("a[0].b", ["a", 0, "b"])]
)
def test_answer_paths(path, steps):
    assert parse_path(path) == steps


def test_follow_names_the_missing_step():
    assert follow({"a": [{"b": "x"}]}, "$.a[0].b", "t") == "x"
    with pytest.raises(TargetError, match=r"has no \$.answer.text \(\$.answer has no 'text'\)"):
        follow({"answer": {"txt": "x"}}, "$.answer.text", "t")
    with pytest.raises(TargetError, match="is a int, not text"):
        follow({"answer": 3}, "answer", "t")


def test_http_target_loads_and_asks_the_app(app, tmp_path):
    target = open_target("http", target_file=target_file(tmp_path, app.root))
    target.load(RECORDS)
    # the fake app repeats the best retrieved record with probability 0.7 (seeded): some seed does
    answers = {target.ask("What is Cy Diaz's MRN?", seed) for seed in range(8)}
    assert "Cy Diaz MRN 1002, gout" in answers
    ident = target.identity()
    assert ident["kind"] == "http" and ident["url"] == app.root
    assert ident["target_file_sha256"].startswith("sha256:")


def test_target_file_refusals(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "http"\nbase_url = "http://x"\nanswr = 1\n')
    with pytest.raises(DataError, match="unknown key"):
        load_target_file(bad)
    bad.write_text('kind = "ftp"\n')
    with pytest.raises(DataError, match='kind must be "http" or "command"'):
        load_target_file(bad)
    with pytest.raises(InvalidParameter, match="needs --target-file"):
        open_target("http")
    with pytest.raises(InvalidParameter, match="needs --base-url"):
        open_target("chat")


def test_http_target_needs_its_placeholders():
    load, ask = Request("/r", {"records": "{records}"}), Request("/a", {"q": "{query}"}, answer="$.a")
    with pytest.raises(InvalidParameter, match=r"must hold \{query\}"):
        HttpTarget("http://127.0.0.1:1", load, Request("/a", {}, answer="$.a"))
    with pytest.raises(InvalidParameter, match=r"must hold \{records\}"):
        HttpTarget("http://127.0.0.1:1", Request("/r", {}), ask)
    with pytest.raises(InvalidParameter, match="CLINIC_TOKEN"):
        HttpTarget("http://127.0.0.1:1", load, ask, headers={"Authorization": "Bearer ${CLINIC_TOKEN}"})


class Broken(LoopbackHTTP):
    """A loopback app that answers ``/ask`` as ``mode`` says: 500, not JSON, no answer field, too slow."""

    def __init__(self, mode: str):
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.requests += 1
                status, body = 200, b'{"ok": true}'
                if self.path == "/ask":
                    status, body = {
                        "500": (500, b'{"error": {"message": "vector store offline"}}'),
                        "html": (200, b"<html>Service Unavailable</html>"),
                        "nopath": (200, b'{"reply": "hi"}'),
                        "slow": (200, b'{"answer": "late"}'),
                    }[mode]
                    if mode == "slow":
                        import time

                        time.sleep(3.0)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

        self.serve(Handler)


@pytest.mark.parametrize(
    ("mode", "message", "tries"),
    [
        ("500", r"failed 3 attempt\(s\) .*HTTP 500: vector store offline", 3),
        ("html", r"malformed JSON \('<html>Service Unavailable", 1),
        ("nopath", r"has no \$.answer \(\$ has no 'answer'\)", 1),
        ("slow", r"no answer within 0.5 s", 3),
    ],
)
def test_bad_targets_fail_in_one_line_with_their_own_message(mode, message, tries):
    with Broken(mode) as srv:
        root = srv.url.removesuffix("/v1")
        load, ask = Request("/records", {"records": "{records}"}), Request("/ask", {"q": "{query}"}, answer="$.answer")
        timeout = 0.5 if mode == "slow" else 60.0  # only the slow answer outlasts it, on any load
        target = HttpTarget(root, load, ask, timeout=timeout, retries=2, sleep=lambda s: None)
        target.load(RECORDS)
        before = srv.requests
        with pytest.raises(TargetError, match=message) as err:
            target.ask("q", 1)
        assert "\n" not in str(err.value) and err.value.exit_code == 9
        assert srv.requests - before == tries  # transient failures retried, the others not


def _script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return str(path)


def test_command_target(tmp_path):
    store = tmp_path / "store.jsonl"
    load = _script(tmp_path, "load.py", f"import shutil, sys\nshutil.copy(sys.argv[1], {str(store)!r})\n")
    ask = _script(
        tmp_path,
        "ask.py",
        f"""
        import json, sys
        q, seed = sys.stdin.read(), int(sys.argv[1])
        recs = [json.loads(x) for x in open({str(store)!r})]
        print(" | ".join(r["name"] for r in recs if r["name"].split()[0] in q), "seed", seed)
        """,
    )
    target = CommandTarget([sys.executable, load, "{records_file}"], [sys.executable, ask, "{seed}"])
    target.load(RECORDS)
    assert target.ask("Who is Cy?", 5).strip() == "Cy Diaz seed 5"
    assert target.identity()["kind"] == "command"
    target.close()


def test_command_target_errors(tmp_path):
    fail = _script(tmp_path, "fail.py", "import sys\nprint('store locked by pid 7', file=sys.stderr)\nsys.exit(3)\n")
    slow = _script(tmp_path, "slow.py", "import time\ntime.sleep(5)\n")
    ok = _script(tmp_path, "ok.py", "print('x')\n")
    target = CommandTarget([sys.executable, fail, "{records_file}"], [sys.executable, slow], timeout=0.5)
    with pytest.raises(TargetError, match="load command .* exited 3: store locked by pid 7"):
        target.load(RECORDS)
    target = CommandTarget([sys.executable, ok, "{records_file}"], [sys.executable, slow], timeout=0.5)
    target.load(RECORDS)
    with pytest.raises(TargetError, match="did not finish within 0.5 s"):
        target.ask("q", 1)
    with pytest.raises(InvalidParameter, match=r"\{records_file\}"):
        CommandTarget([sys.executable, ok], [sys.executable, ok])


class ChatServer(LoopbackHTTP):
    """A loopback /v1/chat/completions that answers with the system message's last line (or ``body``)."""

    def __init__(self, body: dict | None = None):
        self.seen = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                outer.seen.append((self.path, req, self.headers.get("Authorization")))
                system = req["messages"][0]["content"]
                answer = body or {"choices": [{"message": {"role": "assistant", "content": system.splitlines()[-1]}}]}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.serve(Handler)


def test_chat_target_sends_records_as_system_and_the_query_as_user(monkeypatch):
    monkeypatch.setenv("CTXLITE_API_KEY", "k-123")
    with ChatServer() as srv:
        target = ChatTarget(srv.url, "m", max_tokens=8)
        target.load(RECORDS)
        answer = target.ask("Who has gout?", 42)
        path, req, auth = srv.seen[-1]
        assert path == "/v1/chat/completions" and auth == "Bearer k-123"
        assert [m["role"] for m in req["messages"]] == ["system", "user"]
        assert req["messages"][1]["content"] == "Who has gout?" and req["seed"] == 42 and req["max_tokens"] == 8
        assert json.loads(answer) == RECORDS[1]
    with ChatServer({"choices": []}) as srv:
        target = ChatTarget(srv.url, "m")
        target.load(RECORDS)
        with pytest.raises(TargetError, match=r"without choices\[0\].message.content"):
            target.ask("q", 1)


def test_the_documented_target_file_is_the_test_apps_and_loads():
    """docs/targets.md's target file is tests/apps/clinic.toml, byte for byte, and ctxlite reads it."""
    from tests.apps.process import APP
    from tests.docs_pages import blocks

    shipped = APP.with_name("clinic.toml")
    documented = [body for page, body in blocks("toml") if page == "docs/targets.md"]
    assert documented == [shipped.read_text(encoding="utf-8")]
    target = open_target("http", target_file=shipped)
    assert target.identity()["url"] == "http://127.0.0.1:8080" and target.ask_request.answer == "$.answer"


def test_chat_target_converses_turn_by_turn():
    with ChatServer() as srv:
        target = ChatTarget(srv.url, "m")
        target.load(RECORDS)
        answers = target.converse(["Hello.", "Who has gout?"], 9)
        sent = [req["messages"] for _, req, _ in srv.seen]
        assert [[m["role"] for m in msgs] for msgs in sent] == [
            ["system", "user"],
            ["system", "user", "assistant", "user"],
        ]
        assert sent[1][2]["content"] == answers[0] and sent[1][3]["content"] == "Who has gout?"


class HistoryApp(LoopbackHTTP):
    """A loopback app whose /ask echoes how many turns of history it got."""

    def __init__(self):
        self.bodies = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                outer.bodies.append(body)
                data = json.dumps({"answer": f"{len(body.get('history', []))} before {body.get('q')}"}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.serve(Handler)


def test_http_target_converses_with_a_history_placeholder():
    with HistoryApp() as srv:
        root = srv.url.removesuffix("/v1")
        load = Request("/records", {"records": "{records}"})
        ask = Request("/ask", {"q": "{query}", "history": "{history}", "seed": "{seed}"}, answer="$.answer")
        target = HttpTarget(root, load, ask)
        target.load(RECORDS)
        assert target.converse(["a", "b"], 3) == ["0 before a", "2 before b"]
        assert srv.bodies[-1]["history"] == [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "0 before a"},
        ]
        plain = HttpTarget(root, load, Request("/ask", {"q": "{query}"}, answer="$.answer"))
        with pytest.raises(InvalidParameter, match=r"\{history\}"):
            plain.converse(["a", "b"], 3)
