"""The test application (rag_app.py) as a process of the tests, on a free loopback port."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.servers import ServerProcess

APP = Path(__file__).with_name("rag_app.py")


# a small record set, its canary and the question the unit tests of targets ask the app
RECORDS = [
    {"name": "Bo Chen", "note": "MRN 1001, asthma"},
    {"name": "Cy Diaz", "note": "MRN 1002, gout"},
    {"name": "Di Evans", "note": "MRN 1003, migraine"},
]
CANARY = {"name": "Ana Lopez", "note": "MRN 4417-2290, diabetes"}
QUERY = "What is Ana Lopez's MRN?"


class RagAppProcess(ServerProcess):
    """``tests/apps/rag_app.py`` with ``args`` (``--fake``, ``--redact REGEX``, ...); ``root`` is its
    base URL (the app has no ``/v1``)."""

    name = "rag-app"
    ready_path = "/health"

    def __init__(self, tmp: Path, args: list[str], port: int | None = None):
        super().__init__(tmp, port)
        self.args = list(args)

    @property
    def url(self) -> str:  # ServerProcess polls url minus /v1 + ready_path
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [sys.executable, str(APP), "--port", str(self.port), *self.args]


def target_file(tmp: Path, root: str, **extra) -> Path:
    """The app's target file (tests/apps/clinic.toml, the one docs/targets.md shows) pointed at the app
    at ``root``, with ``extra`` top-level keys (``retries=0``) set."""
    lines = APP.with_name("clinic.toml").read_text(encoding="utf-8").splitlines()
    keys = {"base_url": f'"{root}"', **{k: str(v) for k, v in extra.items()}}
    out = [ln for ln in lines if ln.split("=")[0].strip() not in keys]
    at = out.index('kind = "http"') + 1
    out[at:at] = [f"{k} = {v}" for k, v in keys.items()]
    path = tmp / "clinic.toml"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path
