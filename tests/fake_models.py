"""The command line on the FakeBackend: every model a command would load (``LocalModel``, the one seam
of ``ctxlite.cli``) is a :class:`~ctxlite.runtime.fake.FakeBackend` instead, in this process.

For tests of the command line's own logic (its options, exit codes, logs, reports) that need no real
numbers: ``use_fake_models(monkeypatch)`` before ``CliRunner().invoke(main, ...)``. Each model name
gets its own seeded tables (a judge or an embedding model differs from the audited one), an embedding
model has :class:`~ctxlite.runtime.backend.Embeddings`, and no model file is read."""

from __future__ import annotations

import zlib

from ctxlite.runtime.backend import Embeddings
from ctxlite.runtime.engine import LocalModel
from ctxlite.runtime.fake import FakeBackend


def fake_for(model: LocalModel) -> FakeBackend:
    """The fake that stands for ``model``: seeded by its name, with the engine's window."""
    seed = zlib.crc32(str(model.model or "default").encode())
    if model.embeddings:
        return FakeBackend(seed, capabilities=(Embeddings,), n_ctx=model.config.n_ctx)
    return FakeBackend(seed, n_ctx=model.config.n_ctx)


def use_fake_models(monkeypatch) -> None:
    """Make every ``LocalModel`` of this test open (and identify itself as) its fake."""
    monkeypatch.setattr(LocalModel, "open", fake_for)
    monkeypatch.setattr(LocalModel, "identity", lambda self: fake_for(self).identity())
