"""The package's shape, checked: no import cycles, the privacy mathematics needs no model runtime,
both methods reach a model only through the backend Protocol, and no module imports another's
private names."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ctxlite"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module, imported names) of every ctxlite import in ``path``, function-level ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, ()) for a in node.names if a.name.startswith("ctxlite")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ctxlite") and not node.level:
            found.append((node.module, tuple(a.name for a in node.names)))
    return found


def _graph() -> dict[str, set[str]]:
    """module -> the ctxlite modules it imports (``from pkg import mod`` counts as an import of pkg.mod)."""
    graph = {}
    for name, path in MODULES.items():
        edges = set()
        for module, names in _imports(path):
            subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
            edges.update(subs or ([module] if module in MODULES else []))
        graph[name] = edges - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_import_graph_has_no_cycle():
    assert _cycle(_graph()) is None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_the_old_audit_queries_cycle():
    """The walker reads function-level imports too: the cycle this layout removed would be found."""
    graph = _graph()
    graph["ctxlite.audit.queries"] = graph["ctxlite.audit.queries"] | {"ctxlite.audit.game"}
    assert _cycle(graph) is not None


LAYERS = {
    "ctxlite.privacy": ("ctxlite.runtime", "ctxlite.influence", "ctxlite.audit", "ctxlite.cli"),
    "ctxlite.runtime": ("ctxlite.influence", "ctxlite.audit", "ctxlite.cli"),
    "ctxlite.influence": ("ctxlite.audit", "ctxlite.cli", "ctxlite.runtime.engine"),
    "ctxlite.audit": ("ctxlite.influence", "ctxlite.cli", "ctxlite.runtime.engine"),
    "ctxlite.reporting": ("ctxlite.runtime", "ctxlite.cli"),
}


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_each_part_imports_only_what_is_below_it(package):
    """privacy needs no model; the runtime knows neither method; the two methods are independent
    and reach a model only through ``ctxlite.runtime.backend``, never the llama.cpp engine itself."""
    graph = _graph()
    bad = [
        (m, d)
        for m, deps in graph.items()
        if m == package or m.startswith(package + ".")
        for d in deps
        for f in LAYERS[package]
        if d == f or d.startswith(f + ".")
    ]
    assert bad == []


def test_no_module_imports_a_private_name_of_another():
    bad = [
        (name, module, n)
        for name, path in MODULES.items()
        for module, names in _imports(path)
        for n in names
        if n.startswith("_") and module != name and n != "__version__"
    ]
    assert bad == []


def test_the_privacy_mathematics_imports_without_llama_cpp():
    """``import ctxlite.privacy.*`` (and ``import ctxlite``) in an interpreter where llama_cpp cannot load."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('llama_cpp', 'cffi'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import ctxlite, ctxlite.privacy.estimators as e, ctxlite.privacy.calibration as c\n"
        "print(round(e.clopper_pearson_epsilon(tp=250, n_in=500, fp=50, n_out=500, alpha=0.05), 3))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('llama_cpp', 'ctxlite.runtime'))))\n"
        "import ctxlite.runtime.engine\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = r.stdout.splitlines()
    assert lines[:2] == ["1.256", "[]"], r.stdout + r.stderr
    assert "blocked: llama_cpp" in r.stderr  # the blocker really blocks


def test_the_engine_has_every_member_of_the_backend_protocol():
    from ctxlite.runtime.backend import Backend
    from ctxlite.runtime.engine import Engine

    members = [n for n in vars(Backend) if not n.startswith("_")] + list(Backend.__annotations__)
    missing = [n for n in members if not hasattr(Engine, n) and n != "n_vocab"]
    assert members and missing == []


def test_every_curated_mutant_still_applies():
    """``make mutants`` finds each mutant's snippet exactly once (a refactor or a reformat that
    moves one would silently retire it)."""
    import importlib.util

    root = PACKAGE.parent
    spec = importlib.util.spec_from_file_location("ctxlite_mutants", root / "tools" / "mutants.py")
    mutants = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mutants
    spec.loader.exec_module(mutants)
    counts = {m.id: (root / m.path).read_text(encoding="utf-8").count(m.old) for m in [*mutants.MUTANTS, mutants.PROBE]}
    assert len(counts) > 40 and {k: n for k, n in counts.items() if n != 1} == {}
