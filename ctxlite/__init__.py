"""ctxlite: how much a language model leaks from the private text in its prompt.

Public API (everything else is an implementation detail)::

    from ctxlite import Engine, InfluenceScorer, InfluenceSettings, Example
    with Engine("gemma-3-270m") as eng:
        result = InfluenceScorer(eng, "qa", InfluenceSettings(lambdas=(1.0,), ngram=8)).score(
            Example(context=open("note.txt").read(), query="What was prescribed?"))
"""

from ctxlite._version import __version__
from ctxlite.errors import (
    ContextOverflow,
    CtxliteError,
    DataError,
    DecodeError,
    InvalidParameter,
    ModelError,
    OutputError,
)

__all__ = [
    "__version__",
    "CtxliteError",
    "ContextOverflow",
    "DataError",
    "DecodeError",
    "InvalidParameter",
    "ModelError",
    "OutputError",
    "Engine",
    "EngineConfig",
    "Example",
    "InfluenceScorer",
    "InfluenceSettings",
    "SamplingSettings",
]


def __getattr__(name):
    # Lazy imports keep `import ctxlite` cheap and free of llama.cpp for the
    # estimators-only users (compliance tools that just post-process logs).
    if name in ("Engine", "EngineConfig"):
        from ctxlite.runtime import engine

        return getattr(engine, name)
    if name in ("Example", "InfluenceScorer", "InfluenceSettings"):
        from ctxlite.influence import scorer as influence

        return getattr(influence, name)
    if name == "SamplingSettings":
        from ctxlite.runtime.sampling import SamplingSettings

        return SamplingSettings
    raise AttributeError(f"module 'ctxlite' has no attribute {name!r}")
