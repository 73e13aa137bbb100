"""The user's manual stays true without a model: the generated references are current and build,
every link and every name a page cites exists, and every shell line either runs
(tests/test_docs_examples.py) or says why not (tests/docs_pages.py NOT_RUN).
"""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
import warnings
from functools import cache

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import click
import pytest
from cogapp import Cog

from ctxlite.cli import main
from tests.docs_pages import NOT_RUN, PAGES, REPO, blocks, commands, not_run_reason, shell_lines, vllm_lines

sys.path.insert(0, str(REPO / "tools"))
import api_reference  # noqa: E402  (tools/ is not a package)

REFRESH = "run `make docs` and commit docs/cli.md"


def _command_paths(group=main, path=()):
    yield path
    if isinstance(group, click.Group):
        for name, sub in group.commands.items():
            yield from _command_paths(sub, (*path, name))


def test_cli_reference_is_current(capsys):
    """docs/cli.md is what the commands' --help prints now (cog --check over its generator block)."""
    status = Cog().main(["cog", "-I", str(REPO / "tools"), "--check", "--diff", str(REPO / "docs" / "cli.md")])
    diff = capsys.readouterr().out
    assert status == 0, f"docs/cli.md differs from the commands' --help: {REFRESH}\n{diff}"


def test_cli_reference_covers_every_command():
    """Every command and subcommand, found by walking the click groups here, has its section."""
    page = PAGES["docs/cli.md"]
    paths = list(_command_paths())
    assert len(paths) >= 10  # ctxlite, models + 3 subcommands, score, audit, report, verify, version
    for path in paths:
        title = " ".join(("ctxlite", *path))
        assert f"$ {title} --help\n" in page and re.search(rf"^#+ {re.escape(title)}$", page, re.M), (title, REFRESH)


@pytest.fixture(scope="module")
def api_site(tmp_path_factory):
    """The API reference built by tools/api_reference.py (pdoc) into a temporary folder."""
    out = tmp_path_factory.mktemp("api")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        modules = api_reference.build(out)
    return out, modules, [str(w.message) for w in caught]


def _has_docstring(obj) -> bool:
    doc = obj.__doc__ if inspect.isclass(obj) else inspect.getdoc(obj)
    # a dataclass without a docstring gets its signature as one
    return bool(doc and doc.strip()) and not (inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("))


def test_api_reference_builds_a_page_per_public_module(api_site):
    out, modules, caught = api_site
    assert "ctxlite" in modules and "ctxlite.audit" in modules and len(modules) >= 40
    unresolved = [m for m in caught if "does not resolve" in m or "Couldn't import" in m]
    assert unresolved == [], unresolved  # a public name or module pdoc could not import
    for name in modules:
        page = out.joinpath(*name.split(".")).with_suffix(".html")
        assert page.is_file(), name
        assert (importlib.import_module(name).__doc__ or "").strip(), f"{name} has no module docstring"
    index = (out / "index.html").read_text(encoding="utf-8")
    assert all(f'href="{api_reference.page(name)}"' in index for name in modules)


def test_every_declared_public_name_has_a_docstring_and_a_section(api_site):
    """Every name in the ``__all__`` of a public module (``ctxlite.__all__`` first) is documented: a
    docstring of its own, and a section of that module's page."""
    out, modules, _ = api_site
    declared = [m for m in modules if hasattr(importlib.import_module(m), "__all__")]
    assert "ctxlite" in declared
    missing = []
    for name in declared:
        module = importlib.import_module(name)
        page = out.joinpath(*name.split(".")).with_suffix(".html").read_text(encoding="utf-8")
        for member in module.__all__:
            obj = getattr(module, member)
            if f'id="{member}"' not in page:
                missing.append(f"{name}.{member}: no section in the API reference")
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and not _has_docstring(obj):
                missing.append(f"{name}.{member}: no docstring")
    assert missing == []


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[`*_\[\]]|\]\([^)]*\)", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: str) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", PAGES[page], flags=re.S), re.M)}


def test_every_link_between_pages_resolves():
    """A relative link names a file that exists and, with #anchor, a heading of that page."""
    broken = []
    for page, text in PAGES.items():
        here = (REPO / page).parent
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not checked offline
            path, _, anchor = target.partition("#")
            file = (here / path).resolve() if path else REPO / page
            if not file.exists():
                broken.append(f"{page}: {target} (no such file)")
                continue
            rel = file.relative_to(REPO).as_posix()
            if anchor and rel in PAGES and anchor not in _anchors(rel):
                broken.append(f"{page}: {target} (no heading #{anchor} in {rel})")
    assert broken == []


def test_every_docs_page_is_on_the_map():
    index = PAGES["docs/index.md"]
    for page in PAGES:
        if page.startswith("docs/") and page != "docs/index.md":
            assert f"]({page.removeprefix('docs/')})" in index, f"{page} is not linked from docs/index.md"


def test_the_readme_stays_a_short_manual():
    """What ctxlite is, the two commands, a walkthrough, the verdicts and links: the rest is in docs/."""
    assert len(PAGES["README.md"].splitlines()) <= 250


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_every_cited_python_name_exists():
    """A name like `ctxlite.audit.continuations.ContinuationTree` in a page imports."""
    not_python = {"ctxlite.inconclusive"}  # the JUnit error type of an inconclusive case (docs/gates.md)
    cited = {(page, n) for page, text in PAGES.items() for n in re.findall(r"`(ctxlite(?:\.\w+)+)", text)}
    cited = {(page, n) for page, n in cited if n not in not_python}
    assert len(cited) >= 10
    assert [f"{page}: {n}" for page, n in sorted(cited) if not _resolves(n)] == []


def _classes() -> dict[str, list[type]]:
    """Every class defined in a public ctxlite module, by name."""
    out: dict[str, list[type]] = {}
    for name in api_reference.public_modules():
        for obj in vars(importlib.import_module(name)).values():
            if inspect.isclass(obj) and obj.__module__ == name:
                out.setdefault(obj.__name__, []).append(obj)
    return out


def _has_member(cls: type, name: str) -> bool:
    """A class attribute, a dataclass field, or an instance attribute its code sets (``self.name =``)."""
    if hasattr(cls, name) or name in getattr(cls, "__dataclass_fields__", {}):
        return True
    return re.search(rf"self\.{name}\s*(:[^=]+)?=", inspect.getsource(cls)) is not None


def test_every_cited_method_or_field_exists():
    """A `Class.member` in a page whose Class is one of ctxlite's (`Engine.held_logits`,
    `ServerConfig.max_answer_bytes`) names a member that class has."""
    classes = _classes()
    cited = {(p, c, m) for p, text in PAGES.items() for c, m in re.findall(r"`(_?[A-Z]\w*)\.(\w+)`", text)}
    checked = [(p, c, m) for p, c, m in sorted(cited) if c in classes]
    assert len(checked) >= 5
    missing = [f"{p}: {c}.{m}" for p, c, m in checked if not any(_has_member(k, m) for k in classes[c])]
    assert missing == []


def test_every_cited_file_exists():
    """A repository path in backticks (`tests/unit/influence/test_search.py`, `bench/bench_floor.py`, ...) exists."""
    roots = ("bench/", "ctxlite/", "csrc/", "docs/", "models/", "tests/", "tools/")
    cited = set()
    for page, text in PAGES.items():
        for path in re.findall(r"`([\w./-]+)`", text):
            if path.startswith(roots) and not path.endswith("/"):
                cited.add((page, path.split("#")[0]))
    assert len(cited) >= 20
    assert [f"{page}: {path}" for page, path in sorted(cited) if not (REPO / path).exists()] == []


def test_every_shell_line_runs_or_says_why_not():
    """A shell line is a `ctxlite` command (tests/test_docs_examples.py runs it; those of the vLLM
    section, tests/vllm/test_vllm_docs.py) or is listed in NOT_RUN; every NOT_RUN entry still matches a
    line."""
    lines = shell_lines()
    unexplained = [
        f"{page}: {line}" for page, line in lines if not line.startswith("ctxlite ") and not not_run_reason(line)
    ]
    assert unexplained == [], "run it as a `ctxlite` line, or add it to tests/docs_pages.py NOT_RUN with the reason"
    for pattern, _ in NOT_RUN:
        assert any(re.match(pattern, line) for _, line in lines), f"NOT_RUN entry {pattern!r} matches no line"


def test_the_vllm_sections_commands_are_left_to_the_vllm_tests():
    """docs/servers.md's vLLM section has its `ctxlite` commands and its server command, which
    tests/vllm/test_vllm_docs.py runs and compares; the suite's own examples leave them out."""
    lines = vllm_lines()
    assert sum(line.startswith("ctxlite ") for line in lines) >= 2
    assert any("vllm.entrypoints.openai.api_server" in line for line in lines)
    assert not set(lines) & set(commands())


@cache
def _bench_help(script: str) -> str:
    r = subprocess.run([sys.executable, script, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (script, r.stderr)
    return r.stdout


def test_every_benchmark_command_names_a_script_and_its_options():
    """The benchmark commands are not run (hours of model time), but each names a bench script that
    exists and only options that script accepts."""
    benches = [line for _, line in shell_lines() if re.match(r"python (-u )?bench/", line)]
    assert len(benches) >= 8
    for line in benches:
        script = re.search(r"bench/\w+\.py", line).group(0)
        assert (REPO / script).is_file(), line
        for option in re.findall(r"(?<!\S)(--[\w-]+)", line):
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", _bench_help(script)), (option, line)


def test_every_toml_example_is_a_format_that_loads(tmp_path):
    """The documented format file is the shipped example, and ctxlite loads it."""
    from ctxlite.audit import load_format

    shipped_path = REPO / "ctxlite" / "data" / "examples" / "support_tickets.toml"
    shipped = tomllib.loads(shipped_path.read_text(encoding="utf-8"))
    examples = blocks("toml")
    assert examples
    for i, (page, body) in enumerate(examples):
        doc = tomllib.loads(body)
        if "record" in doc:  # a format file
            assert doc == shipped, f"{page}: the format differs from {shipped_path.relative_to(REPO)}"
            path = tmp_path / f"format{i}.toml"
            path.write_text(body, encoding="utf-8")
            assert load_format(str(path)).labels == tuple(shipped["labels"])


def test_every_exit_code_is_documented():
    """docs/errors.md's table lists exactly the exit codes of ctxlite.errors."""
    import ctxlite.errors as errors

    documented = {int(c) for c in re.findall(r"^\| (\d+) \|", PAGES["docs/errors.md"], re.M)}
    in_code = {int(c) for c in re.findall(r"^(\d+)\s{2,}", errors.__doc__, re.M)}
    assert documented == in_code and {0, 1, 2, 4, 8, 10, 130} <= documented
