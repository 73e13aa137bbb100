"""The kernel build: cdef extraction from the public header, compiler flags, and C status messages.

``ctxlite/runtime/_build_kernels.py`` feeds cffi the part of ``csrc/ctxlite_kernels.h``
between ``/* CDEF BEGIN */`` and ``/* CDEF END */``; a function prototyped outside
that part would compile but be missing from ``lib``. These tests pin the
extraction, the per-compiler flags and ``ctxlite_strerror``'s coverage of the
status codes, without compiling anything (the built module is only read).
"""

import re
import sys
from pathlib import Path

import cffi
import pytest

from ctxlite.runtime import _build_kernels as bk
from tests.paths import REPO

CSRC = REPO / "csrc"
HEADER = CSRC / "ctxlite_kernels.h"

# `<type> [*]ctxlite_name(` at the start of a line: a prototype (or, in a .c file, a definition)
PROTOTYPE = re.compile(r"^(?:const\s+)?[A-Za-z_]\w*[\s*]+(ctxlite_\w+)\s*\(", re.M)


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def _header_functions() -> set[str]:
    return set(PROTOTYPE.findall(_strip_comments(HEADER.read_text(encoding="utf-8"))))


def _cdef_functions(cdef: str, tmp_path: Path) -> set[str]:
    """Functions a fresh FFI declares for ``cdef``, read from the C code cffi would compile."""
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source("_probe", "")
    out = tmp_path / "_probe.c"
    ffi.emit_c_code(str(out))
    return set(re.findall(r"_cffi_f_(ctxlite_\w+)", out.read_text(encoding="utf-8")))


def _status_codes() -> dict[str, int]:
    """CTXLITE_OK and CTXLITE_ERR_* as the header #defines them."""
    text = bk._cdef_text()
    return {name: int(value) for name, value in re.findall(r"#define\s+(CTXLITE_\w+)\s+(-?\d+)", text)}


# --------------------------------------------------------------------------
# cdef extraction


def test_header_prototypes_are_found():
    """The regex the other tests rely on sees the kernels (guards against a regex that matches nothing)."""
    assert {
        "ctxlite_logprob_gather",
        "ctxlite_nearest_cosine",
        "ctxlite_kernels_version",
        "ctxlite_strerror",
    } <= _header_functions()


def test_cdef_text_parses_in_a_fresh_ffi():
    ffi = cffi.FFI()
    ffi.cdef(bk._cdef_text())  # raises cffi.CDefError on anything cffi cannot parse


def test_cdef_declares_every_function_the_header_exports(tmp_path):
    declared = _cdef_functions(bk._cdef_text(), tmp_path)
    assert declared == _header_functions()


def test_cdef_check_sees_a_prototype_outside_the_markers(tmp_path):
    """A prototype moved below CDEF END is missing from cdef: the comparison above would fail."""
    text = HEADER.read_text(encoding="utf-8").replace("const char *ctxlite_strerror(int status);\n", "")
    text = text.replace("/* CDEF END */", "/* CDEF END */\nconst char *ctxlite_strerror(int status);")
    moved = tmp_path / "moved.h"
    moved.write_text(text, encoding="utf-8")
    declared = _cdef_functions(bk._cdef_text(moved), tmp_path)
    assert "ctxlite_strerror" not in declared
    assert "ctxlite_strerror" in set(PROTOTYPE.findall(_strip_comments(text)))


def test_every_exported_c_definition_is_in_the_header():
    """Each non-static ctxlite_* function defined in csrc/*.c has a public prototype."""
    defined = set()
    for src in CSRC.glob("*.c"):
        defined |= set(PROTOTYPE.findall(_strip_comments(src.read_text(encoding="utf-8"))))
    assert defined == _header_functions()


def test_built_module_has_every_header_function():
    from ctxlite.runtime.kernels import lib

    missing = {name for name in _header_functions() if not hasattr(lib, name)}
    assert not missing, f"stale build: rebuild the kernels ({sorted(missing)})"


def test_cdef_holds_only_declarations_and_integer_defines():
    for line in _strip_comments(bk._cdef_text()).splitlines():
        if line.lstrip().startswith("#"):
            assert re.match(r"\s*#define\s+CTXLITE_\w+\s+-?\d+\s*$", line), line


@pytest.mark.parametrize(
    "text",
    [
        "int ctxlite_f(void);\n",
        "/* CDEF BEGIN */\nint ctxlite_f(void);\n",
        "int ctxlite_f(void);\n/* CDEF END */\n",
        "/* CDEF END */\nint ctxlite_f(void);\n/* CDEF BEGIN */\n",
    ],
    ids=["none", "begin-only", "end-only", "reversed"],
)
def test_header_without_markers_raises_a_clear_error(tmp_path, text):
    header = tmp_path / "broken.h"
    header.write_text(text, encoding="utf-8")
    with pytest.raises(RuntimeError, match=r"CDEF BEGIN/END markers not found") as info:
        bk._cdef_text(header)
    assert str(header) in str(info.value)


def test_sources_are_every_c_file_in_csrc():
    assert sorted(bk._SOURCES) == sorted(p.name for p in CSRC.glob("*.c"))
    assert sorted((bk._HEADER.name, *bk._INTERNAL_HEADERS)) == sorted(p.name for p in CSRC.glob("*.h"))


# --------------------------------------------------------------------------
# compiler flags

WARNINGS = ["-Wall", "-Wextra", "-Wconversion"]
SANITIZERS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]
GCC_ONLY = {"-Wno-psabi"}  # clang warns about (or rejects) these


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("sanitize", [False, True])
def test_unix_compilers_get_warnings_and_ieee_math(compiler, sanitize):
    args = bk._extra_compile_args(compiler, sanitize)
    assert all(flag in args for flag in WARNINGS)
    assert "-fno-fast-math" in args and "-ffast-math" not in args
    assert "-std=gnu11" in args
    assert all(flag in args for flag in SANITIZERS) == sanitize
    assert not any(flag.startswith("-fsanitize") for flag in args) or sanitize


def test_psabi_note_is_silenced_only_for_gcc():
    assert "-Wno-psabi" in bk._extra_compile_args("gcc", False)
    for sanitize in (False, True):
        assert not GCC_ONLY & set(bk._extra_compile_args("clang", sanitize))


@pytest.mark.parametrize("sanitize", [False, True])
def test_msvc_gets_msvc_flags(sanitize):
    args = bk._extra_compile_args("msvc", sanitize)
    assert "/W3" in args and "/O2" in args
    assert all(flag.startswith("/") for flag in args)  # no GCC-style flag reaches cl.exe


@pytest.mark.parametrize(
    "platform, version, cc, want",
    [
        ("linux", "3.11.7 (main) [GCC 12.2.0]", "gcc", "gcc"),
        ("linux", "3.11.7 (main) [GCC 12.2.0]", "clang", "clang"),
        ("darwin", "3.11.7 [Clang 15.0.0]", "ccache /usr/bin/clang-17", "clang"),
        ("linux", "3.11.7 (main) [GCC 12.2.0]", "cc", "gcc"),
        ("win32", "3.11.7 [MSC v.1937 64 bit (AMD64)]", "", "msvc"),
        ("win32", "3.11.7 [GCC 13.2.0 64 bit (AMD64)]", "gcc", "gcc"),  # MinGW
    ],
)
def test_compiler_detection(monkeypatch, platform, version, cc, want):
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(sys, "version", version)
    if cc:
        monkeypatch.setenv("CC", cc)
    else:
        monkeypatch.delenv("CC", raising=False)
    assert bk._compiler() == want


# --------------------------------------------------------------------------
# ctxlite_strerror


def _strerror(code: int) -> str:
    from ctxlite.runtime.kernels import ffi, lib

    ptr = lib.ctxlite_strerror(code)
    assert ptr != ffi.NULL
    return ffi.string(ptr).decode("utf-8")


def test_status_codes_in_the_build_match_the_header():
    from ctxlite.runtime.kernels import lib

    codes = _status_codes()
    assert codes["CTXLITE_OK"] == 0 and len(codes) >= 11
    assert {name: getattr(lib, name) for name in codes} == codes
    assert sorted(codes.values()) == list(range(len(codes)))  # 0..N-1: a new code is one past the last


def test_every_status_code_has_its_own_message():
    codes = _status_codes()
    messages = {name: _strerror(code) for name, code in codes.items()}
    generic = _strerror(max(codes.values()) + 1)
    for name, message in messages.items():
        assert message.strip(), name
        assert message != generic, f"{name} falls through to the generic message"
        assert "\n" not in message, name
    assert len(set(messages.values())) == len(messages), messages


def test_unknown_status_gets_a_generic_message():
    codes = _status_codes().values()
    known = {_strerror(c) for c in codes}
    generic = _strerror(max(codes) + 1)
    assert generic.strip() and "unknown" in generic and generic not in known
    for code in (-1, max(codes) + 2, 99, 2**31 - 1, -(2**31)):
        assert _strerror(code) == generic, code
