"""cffi build script for ``ctxlite.runtime._kernels`` (wired in setup.py via ``cffi_modules``).

Declarations come from the one public header ``csrc/ctxlite_kernels.h`` (the
part between ``CDEF BEGIN`` and ``CDEF END``); the sources are the kernel
families in ``csrc/`` (``logits.c``: the vectorised logits kernels,
``mechanisms.c``: the scalar mechanism kernels, ``status.c``: version and
status messages; ``simd.h`` is their internal header).  The package version is
stamped into the shared object as ``CTXLITE_VERSION`` so
``ctxlite.runtime.kernels`` can refuse a stale build.  No -ffast-math: the
kernels rely on IEEE -inf/NaN semantics.

Warnings are on (``-Wall -Wextra -Wconversion``, clean today) for GCC and
clang, with flags chosen per compiler as pyca/cryptography does; MSVC gets
its own. ``CTXLITE_SANITIZE=1`` builds with AddressSanitizer and
UndefinedBehaviorSanitizer (``make sanitize`` runs the kernel tests on it).
"""

import os
import re
import sys
import sysconfig
from pathlib import Path

from cffi import FFI

_ROOT = Path(__file__).resolve().parents[2]
_CSRC = _ROOT / "csrc"
_HEADER = _CSRC / "ctxlite_kernels.h"
_SOURCES = ("logits.c", "mechanisms.c", "status.c")
_INTERNAL_HEADERS = ("simd.h",)


def _cdef_text(header: Path = _HEADER) -> str:
    """The declarations between ``/* CDEF BEGIN */`` and ``/* CDEF END */`` in ``header``."""
    text = header.read_text(encoding="utf-8")
    match = re.search(r"/\* CDEF BEGIN \*/(.*?)/\* CDEF END \*/", text, re.S)
    if match is None:
        raise RuntimeError(f"{header}: CDEF BEGIN/END markers not found (cffi needs the declarations between them)")
    return match.group(1)


def _version() -> str:
    text = (_ROOT / "ctxlite" / "_version.py").read_text(encoding="utf-8")
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


def _compiler() -> str:
    """``msvc``, ``clang`` or ``gcc`` (any other Unix compiler is treated as GCC-compatible)."""
    if sys.platform == "win32" and "GCC" not in sys.version:
        return "msvc"
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return "clang" if "clang" in cc else "gcc"


def _extra_compile_args(compiler: str, sanitize: bool) -> list[str]:
    if compiler == "msvc":
        return ["/O2", "/W3"]
    args = ["-O3", "-std=gnu11", "-fno-fast-math", "-Wall", "-Wextra", "-Wconversion"]
    if compiler == "gcc":
        # the vector helpers are always inlined, so GCC's notes about the ABI of
        # 64-byte vector arguments concern nothing that is exported
        args.append("-Wno-psabi")
    if sanitize:
        args += ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", "-O1"]
    return args


_SANITIZE = os.environ.get("CTXLITE_SANITIZE") == "1"
_COMPILER = _compiler()

ffibuilder = FFI()
ffibuilder.cdef(_cdef_text())
ffibuilder.set_source(
    "ctxlite.runtime._kernels",
    '#include "ctxlite_kernels.h"',
    sources=[str(_CSRC.relative_to(_ROOT) / name) for name in _SOURCES],
    depends=[str(_CSRC.relative_to(_ROOT) / name) for name in (_HEADER.name, *_INTERNAL_HEADERS)],
    include_dirs=[str(_CSRC.relative_to(_ROOT))],
    define_macros=[("CTXLITE_VERSION", f'"{_version()}"')],
    extra_compile_args=_extra_compile_args(_COMPILER, _SANITIZE),
    extra_link_args=["-fsanitize=address,undefined"] if _SANITIZE else [],
    libraries=[] if _COMPILER == "msvc" else ["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
