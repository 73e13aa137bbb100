"""The llama.cpp build behind the numbers: read from llama.cpp, shown by ``ctxlite version``, part of
every run's identity (two builds round differently, so one build never resumes another's log)."""

from __future__ import annotations

import json
import subprocess
import sys

from ctxlite.identity import differences
from ctxlite.runtime.build import describe, llama_build, parse_system_info

AVX512_LINE = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 1 | OPENMP = 1 | REPACK = 1 | "
PORTABLE_LINE = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | OPENMP = 1 | REPACK = 1 | "


def test_system_info_is_parsed_per_backend():
    info = parse_system_info("CUDA : ARCHS = 890 | USE_GRAPHS = 1 | " + AVX512_LINE)
    assert info["CUDA"] == {"ARCHS": "890", "USE_GRAPHS": "1"}
    assert info["CPU"]["AVX512"] == "1" and info["CPU"]["SSE3"] == "1"
    assert parse_system_info("AVX = 0 | AVX2 = 1 |") == {"": {"AVX": "0", "AVX2": "1"}}


def test_two_builds_differ_in_their_identity():
    """An AVX-512 build and a portable AVX2 build differ at a named path, which a resume names when it refuses."""
    a = {"llama_build": {"features": parse_system_info(AVX512_LINE)}}
    b = {"llama_build": {"features": parse_system_info(PORTABLE_LINE)}}
    assert differences(a, b) == ["llama_build.features.CPU.AVX512", "llama_build.features.CPU.BMI2"]


def test_this_process_build_is_read_from_llama_cpp():
    import llama_cpp

    build = llama_build()
    raw = llama_cpp.llama_print_system_info()
    assert build["features"] == parse_system_info(raw.decode() if isinstance(raw, bytes) else raw)
    assert build["features"], "llama.cpp reported no backend features"
    assert describe(build).startswith(f"llama-cpp-python {build['llama_cpp_python']}, CPU ")


def test_an_engine_identity_carries_the_build(engine):
    identity = engine.identity()
    assert identity["software"]["llama_build"] == {"features": llama_build()["features"]}


def test_the_version_command_names_the_build():
    r = subprocess.run([sys.executable, "-m", "ctxlite", "version", "--verbose", "--json"], capture_output=True)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["features"] == llama_build()["features"] and "system_info" in info
    r = subprocess.run([sys.executable, "-m", "ctxlite", "version"], capture_output=True, text=True)
    assert r.returncode == 0 and describe(llama_build()) in r.stdout
