"""The package's shape, checked: one order of layers that every module keeps, no import cycle, no
import hidden in a function to dodge one, the privacy mathematics free of any model, the methods
reaching a model only through the backend's capability Protocols, and no private name imported
across modules.

The order, top to bottom (a module imports only from layers below its own, or from its own
package; side by side means neither imports the other)::

    ctxlite (the package's lazy re-exports) | __main__ (``python -m ctxlite``)
    cli
    reporting
    runs | serve
    gates
    influence | audit
    targets (the black-box systems an audit queries: their HTTP reuses the runtime's transport)
    privacy | runtime
    records, logformat, chain, lock, outputs, identity, visible, choices, errors, _version
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ctxlite"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()

LAYERS = [
    ("package root, entry point", ("ctxlite", "ctxlite.__main__")),
    ("cli", ("ctxlite.cli",)),
    ("reporting", ("ctxlite.reporting",)),
    ("runs, serve", ("ctxlite.runs", "ctxlite.serve")),
    ("gates", ("ctxlite.gates",)),
    ("methods", ("ctxlite.influence", "ctxlite.audit")),
    ("targets", ("ctxlite.targets",)),
    ("models and mathematics", ("ctxlite.privacy", "ctxlite.runtime")),
    (
        "leaves",
        (
            "ctxlite.records",
            "ctxlite.logformat",
            "ctxlite.chain",
            "ctxlite.lock",
            "ctxlite.outputs",
            "ctxlite.identity",
            "ctxlite.visible",
            "ctxlite.choices",
            "ctxlite.errors",
            "ctxlite._version",
        ),
    ),
]
"""Top to bottom. Within a layer each name is a group of its own (a package, or a module); only the
leaves form one group, whose modules may import each other (without a cycle)."""

LAZY_IMPORTS = {
    ("ctxlite.__main__", "ctxlite.cli"): "a Ctrl-C that lands while the command line is imported exits 130 too",
    ("ctxlite.serve.deployment", "ctxlite.serve.app"): "cost: FastAPI and uvicorn (~0.3 s) load when a server starts",
}
"""The imports made inside a function, each with why: only for cost or a process's exit, never to
dodge an import cycle (the package root's and ctxlite.audit's ``_WHERE`` re-exports are read as
imports below: lazy so that ``import ctxlite`` stays free of llama.cpp)."""


def _where(path: Path) -> list[str]:
    """The modules a package ``__init__`` re-exports lazily (its ``_WHERE`` table's values)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_WHERE" for t in node.targets):
            prefix = "ctxlite.audit." if path.parent.name == "audit" else ""
            return [prefix + v.value for v in node.value.values if isinstance(v, ast.Constant)]
    return []


def _imports(path: Path) -> list[tuple[str, tuple[str, ...], bool]]:
    """(module, imported names, inside a function) of every ctxlite import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nested = {
        id(node)
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(fn)
    }
    found = []
    for node in ast.walk(tree):
        inner = id(node) in nested
        if isinstance(node, ast.Import):
            found += [(a.name, (), inner) for a in node.names if a.name.startswith("ctxlite")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ctxlite") and not node.level:
            found.append((node.module, tuple(a.name for a in node.names), inner))
    return found + [(m, (), False) for m in _where(path)]


def _graph() -> dict[str, set[str]]:
    """module -> the ctxlite modules it imports (``from pkg import mod`` counts as an import of pkg.mod)."""
    graph = {}
    for name, path in MODULES.items():
        edges = set()
        for module, names, _ in _imports(path):
            subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
            edges.update(subs or ([module] if module in MODULES else []))
        graph[name] = edges - {name}
    return graph


def _place(module: str) -> tuple[int, str]:
    """(layer index, group) of a module: the group is the layer's name it falls under."""
    for index, (_, groups) in enumerate(LAYERS):
        for group in groups:
            if module == group or (group != "ctxlite" and module.startswith(group + ".")):
                return index, ("leaves" if LAYERS[index][0] == "leaves" else group)
    raise KeyError(module)


def _against_the_order(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    bad = []
    for module, deps in graph.items():
        layer, group = _place(module)
        for dep in deps:
            dep_layer, dep_group = _place(dep)
            if not (dep_layer > layer or dep_group == group):
                bad.append((module, dep))
    return sorted(bad)


def _order() -> str:
    return "\n".join(" | ".join(g.removeprefix("ctxlite.") for g in groups) for _, groups in LAYERS)


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


def test_every_module_has_its_place_in_the_order_and_no_import_goes_against_it():
    print("the layers of ctxlite, top to bottom:\n" + _order())
    unplaced = []
    for module in MODULES:
        try:
            _place(module)
        except KeyError:
            unplaced.append(module)
    assert unplaced == []
    assert _against_the_order(_graph()) == []


def test_the_order_test_sees_an_import_against_it():
    """Each rule, broken once: upwards, sideways between the methods and between the runtime and the
    privacy mathematics, and a leaf importing a method."""
    graph = _graph()
    for module, dep in [
        ("ctxlite.influence.analysis", "ctxlite.reporting.terminal"),  # upwards (what this layout removed)
        ("ctxlite.gates", "ctxlite.runs.score"),
        ("ctxlite.influence.scorer", "ctxlite.audit.game"),  # sideways: one method into the other
        ("ctxlite.privacy.estimators", "ctxlite.runtime.backend"),  # the mathematics needs no model
        ("ctxlite.identity", "ctxlite.runtime.engine"),  # the identity.engine_part cycle this layout removed
        ("ctxlite.targets.http", "ctxlite.audit.game"),  # a target knows nothing of the game that queries it
    ]:
        broken = {**graph, module: graph[module] | {dep}}
        assert _against_the_order(broken) == [(module, dep)]


def test_the_import_graph_has_no_cycle():
    assert _cycle(_graph()) is None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_is_hidden_in_a_function_but_the_listed_ones():
    """A ctxlite import inside a function body is how a cycle hides from the module graph: none is
    allowed but :data:`LAZY_IMPORTS`, each for a reason that is not a cycle."""
    nested = sorted((name, module) for name, path in MODULES.items() for module, _, inner in _imports(path) if inner)
    assert nested == sorted(LAZY_IMPORTS)


def test_the_walker_sees_an_import_in_a_function(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import os\n\ndef f():\n    from ctxlite.runs import run_score\n    return run_score\n")
    assert _imports(path) == [("ctxlite.runs", ("run_score",), True)]


def test_the_methods_reach_a_model_only_through_the_backend_protocols():
    """influence and audit import from the runtime its capability Protocols and model-independent
    parts, never the llama.cpp engine or the server client themselves."""
    graph = _graph()
    engines = ("ctxlite.runtime.engine", "ctxlite.runtime.openai_server", "ctxlite.runtime.server_transport")
    engines += ("ctxlite.runtime.kv", "ctxlite.runtime.server_dialects")
    bad = [
        (m, d)
        for m, deps in graph.items()
        if m.startswith(("ctxlite.influence", "ctxlite.audit"))
        for d in deps
        if d in engines
    ]
    assert bad == []


def test_no_module_imports_a_private_name_of_another():
    bad = [
        (name, module, n)
        for name, path in MODULES.items()
        for module, names, _ in _imports(path)
        for n in names
        if n.startswith("_") and module != name and n != "__version__"
    ]
    assert bad == []


def test_no_backend_is_probed_with_getattr_or_hasattr():
    """Capabilities are ``isinstance`` checks of the Protocols in ``ctxlite.runtime.backend``: no
    module asks a backend for an attribute it might lack (``prompt_logprobs``, ``logprobs_many``,
    ``tokens_decoded``, ``sampled_answers``, ``dry_run`` were)."""
    probes = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr"):
                target = ast.unparse(node.args[0]) if node.args else ""
                if any(word in target for word in ("engine", "backend", "oracle", "server", "judge", "embedder")):
                    probes.append((name, ast.unparse(node)))
    assert probes == []


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


def test_the_engine_has_every_capability_but_embeddings_and_a_server_only_what_it_offers():
    """Checked on the classes, without loading a model or connecting: the engine's capabilities are
    members of its class, the server client's are teacher forcing and sampled completions, and none
    of them has a member that only raises."""
    from ctxlite.runtime import backend as b
    from ctxlite.runtime.engine import EmbeddingEngine, Engine
    from ctxlite.runtime.openai_server import OpenAIServer, ServedModel

    def members(protocol):
        return {n for n in vars(protocol) if not n.startswith("_")} | set(getattr(protocol, "__annotations__", {}))

    def has(cls, protocol):
        return all(
            hasattr(cls, n) or n in ("n_vocab", "dry_run", "decode_calls", "tokens_decoded") for n in members(protocol)
        )

    everything = (b.Backend, b.TeacherForcing, b.Vocabulary, b.LogitRows, b.PrefixReuse, b.Streams, b.ChatModel)
    assert all(has(Engine, p) for p in everything) and not has(Engine, b.Embeddings)
    assert has(EmbeddingEngine, b.Embeddings) and not has(Engine, b.SampledCompletions)
    assert has(ServedModel, b.Backend) and has(ServedModel, b.SampledCompletions)
    assert not any(has(ServedModel, p) for p in (b.TeacherForcing, b.LogitRows, b.PrefixReuse, b.Streams))
    assert has(OpenAIServer, b.TeacherForcing) and not has(OpenAIServer, b.LogitRows)
    # several threads may call a server at once; the engine is one model, used by one thread
    assert has(ServedModel, b.ConcurrentRequests) and not has(Engine, b.ConcurrentRequests)


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


def test_every_command_is_a_thin_layer_over_the_library():
    """``cli/`` parses, builds settings, calls the run layer and renders: no command function (from
    ``def`` to its end, its docstring included) is longer than 40 lines."""
    long = {}
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            decorators = [d.func for d in getattr(node, "decorator_list", ()) if isinstance(d, ast.Call)]
            if any(getattr(d, "attr", getattr(d, "id", None)) in ("command", "group") for d in decorators):
                if node.end_lineno - node.lineno + 1 > 40:
                    long[f"{path.name}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert len(list((PACKAGE / "cli").glob("*.py"))) > 5 and not long, long
