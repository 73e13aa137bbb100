"""Every claim, registered on import: seed 000 (context influence), then seed 001 (ContextLeak)."""

from . import seed000, seed001  # noqa: F401
