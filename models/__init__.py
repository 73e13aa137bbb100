"""Registry of known GGUF models (installed as the ``ctxlite.registry`` package).

The data is ``registry.json`` beside this file; ``ctxlite.runtime.models`` reads it.
"""
