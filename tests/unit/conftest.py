"""The model-free layer (``make test-fast``): no test under tests/unit may load a model. A load is an
error here, so a test that needs llama.cpp cannot slip into the inner loop unnoticed."""

from __future__ import annotations

import pytest

import ctxlite.runtime.engine as engine


@pytest.fixture(autouse=True)
def _no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("tests/unit is model-free: use ctxlite.runtime.fake.FakeBackend, or move the test")

    monkeypatch.setattr(engine, "_load_model", refuse)
