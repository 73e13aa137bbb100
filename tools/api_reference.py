"""The API reference: one HTML page per public module, from the docstrings, by pdoc (https://pdoc.dev).

``make docs`` writes it to build/api/ (``python tools/api_reference.py [OUT]``); tests/test_docs.py
builds it into a temporary folder on every run and checks that each public module has a page and
each public name a docstring. It is not committed: the build is the check, and a committed copy
would only drift or churn.

Public means: every module under ``ctxlite`` none of whose dotted parts starts with ``_``, found by
walking the package (so a new module is documented without editing this file), and the names of
``ctxlite.__all__`` and each package's ``__all__`` (resolved first: ``ctxlite`` and ``ctxlite.audit``
import them lazily, which pdoc cannot follow).
"""

from __future__ import annotations

import html
import importlib
import pkgutil
import sys
import warnings
from pathlib import Path

import ctxlite

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "build" / "api"


def public_modules() -> list[str]:
    """Every public module of the package, ``ctxlite`` first, in import-name order."""
    names = ["ctxlite"]
    for info in pkgutil.walk_packages(ctxlite.__path__, prefix="ctxlite."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(names)


def resolve_lazy_names(modules: list[str]) -> None:
    """Bind each name of a package's ``__all__`` that it imports lazily (a module ``__getattr__``:
    ``ctxlite``, ``ctxlite.audit``) in the package, as ``from PACKAGE import NAME`` finds it."""
    for name in modules:
        module = importlib.import_module(name)
        for member in getattr(module, "__all__", ()):
            if member not in vars(module):
                setattr(module, member, getattr(module, member))


def build(out: Path = DEFAULT_OUT) -> list[str]:
    """Write the HTML reference of every public module to ``out``; return the modules documented."""
    import pdoc
    import pdoc.render

    modules = public_modules()
    resolve_lazy_names(modules)
    pdoc.render.configure(docformat="restructuredtext", show_source=False)
    with warnings.catch_warnings():
        # pdoc expands a package spec into its submodules itself; naming them too is harmless
        warnings.filterwarnings("ignore", message="The module specification .* has already been added")
        pdoc.pdoc(*modules, output_directory=Path(out))
    write_index(Path(out), modules)
    return modules


def page(name: str) -> str:
    """A module's page, relative to the output folder (``ctxlite/audit/report.html``)."""
    return "/".join(name.split(".")) + ".html"


def write_index(out: Path, modules: list[str]) -> None:
    """index.html: every module with the first line of its docstring. (pdoc's own index only redirects
    to ``ctxlite``, whose ``__all__`` hides its submodules from its page.)"""
    rows = []
    for name in modules:
        summary = ((importlib.import_module(name).__doc__ or "").strip().splitlines() or [""])[0]
        rows.append(f'<li><a href="{page(name)}"><code>{html.escape(name)}</code></a> {html.escape(summary)}</li>')
    head = (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>ctxlite API reference</title></head>\n'
        "<body><h1>ctxlite API reference</h1>\n<p>Every public module, generated from the docstrings by pdoc "
        "(<code>make docs</code>). The manual: docs/index.md.</p>\n"
    )
    body = "<ul>\n" + "\n".join(rows) + "\n</ul></body></html>\n"
    out.joinpath("index.html").write_text(head + body, encoding="utf-8")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    documented = build(target)
    print(f"API reference of {len(documented)} modules: {target / 'index.html'}")
