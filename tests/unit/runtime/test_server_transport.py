"""The HTTP side of a server backend (ctxlite/runtime/server_transport.py), without a model."""

from __future__ import annotations

import math
import socket
from http.server import BaseHTTPRequestHandler

import pytest

from ctxlite.errors import InvalidParameter, ServerError
from ctxlite.runtime.server_transport import MAX_REQUEST_TIMEOUT, Http, ServerConfig
from tests.servers import LoopbackHTTP


@pytest.mark.parametrize("timeout", [math.inf, 1e308, 1e100, math.nan, MAX_REQUEST_TIMEOUT * 2])
def test_a_timeout_that_no_socket_takes_is_refused_by_the_config(timeout):
    """The Python API's path to the same OverflowError as the CLI's: refused in one line."""
    with pytest.raises(InvalidParameter, match="timeout"):
        ServerConfig("http://127.0.0.1:9/v1", "m", timeout=timeout)
    assert ServerConfig("http://127.0.0.1:9/v1", "m", timeout=MAX_REQUEST_TIMEOUT).timeout == MAX_REQUEST_TIMEOUT


class _CutServer(LoopbackHTTP):
    """Answers every POST with HTTP 200 and a chunked body (or one with a Content-Length) that it
    cuts after ``sent`` bytes, closing the connection as a crashed server would."""

    def __init__(self, chunked: bool, sent: int = 7):
        body = b'{"choices": [{"text": "a long answer"}]}'

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                if chunked:
                    self.send_header("transfer-encoding", "chunked")
                else:
                    self.send_header("content-length", str(len(body)))
                self.end_headers()
                if chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (sent, body[:sent]) + b"%x\r\n" % (len(body) - sent))
                else:
                    self.wfile.write(body[:sent])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

        self.serve(Handler)


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
def test_an_answer_cut_mid_body_is_reported_as_cut_not_as_no_connection(chunked):
    """The server connected and began its answer: a body cut short is "cut off after 7 bytes",
    not "cannot connect" (which sent the reader to the network instead of the server)."""
    with _CutServer(chunked) as cut:
        http = Http(ServerConfig(cut.url, "m", retries=1, backoff=0.0))
        try:
            with pytest.raises(ServerError) as raised:
                http.post(cut.url + "/completions", {}, what="teacher forcing")
        finally:
            http.close()
    message = str(raised.value)
    assert "answer was cut off after 7 bytes" in message and "HTTP 200" in message, message
    assert "cannot connect" not in message and "failed 2 attempt(s)" in message, message
