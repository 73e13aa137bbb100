"""A deployment's life (ctxlite.serve.deployment.run_deployment) on the FakeBackend, the HTTP server
replaced by a stand-in that serves one request and stops as a signal would stop uvicorn."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from pathlib import Path

import pytest

from ctxlite.records import read_run_log
from ctxlite.runtime.fake import FakeBackend
from ctxlite.serve import app
from ctxlite.serve.deployment import Deployment, run_deployment
from ctxlite.serve.ledger import Budgets

CONTEXT = "Dana Whitcombe takes lisinopril 10 mg daily."


class FakeModel:
    """What run_deployment asks of a LocalModel: its identity and an engine to open."""

    def identity(self) -> dict:
        return {"software": {"ctxlite": "test"}, "model": None}

    @contextmanager
    def open(self):
        engine = FakeBackend(seed=2)
        engine.model_path = Path("fake.gguf")
        yield engine


class StoppedServer:
    """uvicorn's Server as run_deployment sees it: ``run`` answers one completion through the
    service, then returns as a drained server does after ``sig``."""

    def __init__(self, service, sig):
        self.service, self.sig, self.started, self.stopped_by = service, sig, False, None

    def run(self):
        self.started = True
        req = self.service.completion_request({"prompt": "The dose is", "max_tokens": 3})
        *_, (_, outcome) = self.service.generate("anonymous", req)
        assert outcome is not None
        self.stopped_by = self.sig


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_clean_stop_ends_the_budget_log(tmp_path, monkeypatch, sig):
    """Issue 46: a server stopped by SIGTERM (or Ctrl-C) left its log without an end line, so it read
    as a partial run. The drained stop now ends it with what was served; a second run appends after
    it and ends it again."""
    monkeypatch.setattr(app, "server", lambda service, host, port: StoppedServer(service, sig))
    said = []
    deployment = Deployment(CONTEXT, 1.0, budgets=Budgets(total=20.0, delta=1e-5))
    assert run_deployment(FakeModel(), deployment, str(tmp_path / "serve.jsonl"), said.append) == sig
    run = read_run_log(tmp_path / "serve.jsonl")
    assert run.complete and run.end["served"]["responses"] == 1 and run.end["served"]["cut_off"] == 0
    assert any("stopped" in line for line in said)
    assert run_deployment(FakeModel(), deployment, str(tmp_path / "serve.jsonl"), said.append) == sig
    run = read_run_log(tmp_path / "serve.jsonl")
    assert run.complete and run.end["served"]["responses"] == 2
    assert "against a neighbouring context" in said[-3]  # the start-up line: the neighbour's composed ε
