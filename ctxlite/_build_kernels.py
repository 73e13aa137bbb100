"""cffi build script for ``ctxlite._kernels`` (wired in setup.py via ``cffi_modules``).

Declarations come from the real header ``csrc/ctxlite_kernels.h`` (the part
between ``CDEF BEGIN`` and ``CDEF END``); the package version is stamped into
the shared object as ``CTXLITE_VERSION`` so ``ctxlite.kernels`` can refuse a
stale build.  No -ffast-math: the kernels rely on IEEE -inf/NaN semantics.
"""
import re
from pathlib import Path

from cffi import FFI

_ROOT = Path(__file__).resolve().parent.parent
_CSRC = _ROOT / "csrc"
_HEADER = _CSRC / "ctxlite_kernels.h"


def _cdef_text() -> str:
    text = _HEADER.read_text(encoding="utf-8")
    match = re.search(r"/\* CDEF BEGIN \*/(.*?)/\* CDEF END \*/", text, re.S)
    if match is None:
        raise RuntimeError(f"{_HEADER}: CDEF BEGIN/END markers not found")
    return match.group(1)


def _version() -> str:
    text = (_ROOT / "ctxlite" / "_version.py").read_text(encoding="utf-8")
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


ffibuilder = FFI()
ffibuilder.cdef(_cdef_text())
ffibuilder.set_source(
    "ctxlite._kernels",
    '#include "ctxlite_kernels.h"',
    sources=[str(_CSRC.relative_to(_ROOT) / "ctxlite_kernels.c")],
    include_dirs=[str(_CSRC.relative_to(_ROOT))],
    define_macros=[("CTXLITE_VERSION", f'"{_version()}"')],
    # -Wno-psabi: the vector helpers are always inlined, so GCC's notes about
    # the ABI of 64-byte vector arguments concern nothing that is exported.
    extra_compile_args=["-O3", "-std=gnu11", "-fno-fast-math", "-Wno-psabi"],
    libraries=["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
