"""Which llama.cpp build computes the numbers: its version and the instruction sets it was compiled for.

llama.cpp's CPU kernels round differently with different instruction sets (an AVX-512
build sums in other orders than an AVX2 one), so two builds of the same version give
log-probabilities that differ in their last bits, and an argmax or a greedy token can
flip. The build is therefore part of a run's identity: a log made by one build is not
resumed by another, and a golden log reproduces bit for bit only on the build that made it.

The features are read from llama.cpp itself (``llama_print_system_info``: each
backend's compile-time features, e.g. ``AVX2 = 1``), not from the host CPU: a portable
build run on an AVX-512 machine still reports ``AVX512`` absent.
"""

from __future__ import annotations

import re
from functools import lru_cache

#: instruction-set features whose presence changes llama.cpp's CPU arithmetic (and so rounding)
ARITHMETIC_FEATURES = (
    "SSE3", "SSSE3", "AVX", "AVX_VNNI", "AVX2", "F16C", "FMA", "BMI2", "AVX512", "AVX512_VBMI",
    "AVX512_VNNI", "AVX512_BF16", "AMX_INT8", "NEON", "ARM_FMA", "FP16_VA", "MATMUL_INT8", "SVE", "SME",
    "DOTPROD", "LLAMAFILE", "REPACK", "KLEIDIAI",
)  # fmt: skip


def parse_system_info(text: str) -> dict[str, dict[str, str]]:
    """``{"CPU": {"AVX2": "1", ...}, ...}`` from llama.cpp's ``"CPU : AVX2 = 1 | FMA = 1 | ..."`` line.

    Each ``NAME : k = v | k = v |`` section is one backend; a bare ``k = v`` before any
    backend name is filed under ``""``.
    """
    out: dict[str, dict[str, str]] = {}
    backend = ""
    for piece in text.split("|"):
        piece = piece.strip()
        if not piece:
            continue
        m = re.match(r"^([^:=]+?)\s*:\s*(.*)$", piece)
        if m and "=" not in m.group(1):
            backend, piece = m.group(1).strip(), m.group(2).strip()
        if "=" in piece:
            key, _, value = piece.partition("=")
            out.setdefault(backend, {})[key.strip()] = value.strip()
        elif piece:
            out.setdefault(backend, {})[piece] = "1"
    return out


@lru_cache(maxsize=1)
def llama_build() -> dict:
    """The llama.cpp build of this process: ``{"llama_cpp_python": version, "features": {...}, "system_info": str}``.

    ``features`` holds, per backend, the compile-time features that llama.cpp reports;
    ``cpu_features`` is the sorted list of arithmetic features present in the CPU backend
    (what makes two builds round alike), the short form shown to people.
    """
    from importlib.metadata import PackageNotFoundError, version

    import llama_cpp

    try:
        ver = version("llama-cpp-python")
    except PackageNotFoundError:  # pragma: no cover - a source checkout of llama-cpp-python
        ver = getattr(llama_cpp, "__version__", None)
    raw = llama_cpp.llama_print_system_info()
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    features = parse_system_info(text)
    cpu = features.get("CPU", features.get("", {}))
    present = sorted(k for k, v in cpu.items() if k in ARITHMETIC_FEATURES and v not in ("0", ""))
    return {"llama_cpp_python": ver, "features": features, "cpu_features": present, "system_info": text.strip()}


def describe(build: dict | None) -> str:
    """One line naming a build: ``llama-cpp-python 0.3.36, CPU AVX AVX2 F16C FMA ...`` (or ``unknown build``)."""
    if not build:
        return "unknown build (the log records none)"
    isa = " ".join(build.get("cpu_features") or ()) or "no SIMD features reported"
    return f"llama-cpp-python {build.get('llama_cpp_python')}, CPU {isa}"
