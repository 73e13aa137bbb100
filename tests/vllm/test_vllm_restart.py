"""vLLM killed in the middle of a run (run last: it stops the run's shared server and starts it again)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.runtime.openai_server import OpenAIServer
from tests.vllm.common import STATS


def test_vllm_killed_mid_run_loses_nothing_and_a_rerun_completes(vllm_server, tmp_path, monkeypatch):
    """Two examples scored on vLLM, which is killed (its whole process group, as a crash) once the
    first is done: exit 9 naming --resume, with the first in the log; once the server is started again
    on the same port the same command reuses the logged example unchanged and scores the second."""
    examples = [
        {"id": "a", "context": "Dana takes 10 mg lisinopril.", "query": "What?", "response": " lisinopril"},
        {"id": "b", "context": "Lee takes insulin at night.", "query": "What?", "response": " insulin"},
    ]
    data = tmp_path / "two.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in examples), encoding="utf-8")
    out = tmp_path / "scores.jsonl"
    args = ["score", "--data", str(data), "--ngram", "4", "--template", "qa", "--backend", "openai", "-T", "1"]
    args += ["--base-url", vllm_server.url, "--model-name", vllm_server.served_name, "--retries", "1"]
    # one example at a time: "the third batch" is then example b's first (with examples in flight
    # together it could be a's; tests/server/test_concurrency.py kills a server under --concurrency 8)
    args += ["--out", str(out), "--json", "--concurrency", "1"]
    real, calls = OpenAIServer.logprobs_many, []

    def killing(self, *a, **kw):
        calls.append(1)
        if len(calls) == 3:  # example a's two batches (base + without, then its ablations) are done
            vllm_server.stop()
        return real(self, *a, **kw)

    monkeypatch.setattr(OpenAIServer, "logprobs_many", killing)
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 9, res.output
    assert "stopped sending requests" in res.output and "--resume" in res.output
    before = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line).get("key") for line in before[1:]] == ["a"]

    monkeypatch.setattr(OpenAIServer, "logprobs_many", real)
    vllm_server.start()
    STATS["s to healthy again"] = vllm_server.started_in
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["reused"] == ["a"] and report["scored"] == ["b"]
    after = out.read_text(encoding="utf-8").splitlines()
    assert after[: len(before)] == before  # nothing of the first run changed
    assert [json.loads(line).get("key") for line in after[1:-1]] == ["a", "b"] and "end" in json.loads(after[-1])
