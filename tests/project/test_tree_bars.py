"""The tree stays one a newcomer can read (issue 37): no module over 600 lines, no function of
the library over 80 lines, and at most 8 loose modules at the top of `indexer/`, so that the
top level shows the jobs (the plumbing is grouped in packages)."""

from __future__ import annotations

import ast

from testkit import ROOT

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_LOOSE_MODULES = 8


def _modules(*packages: str):
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


def test_no_module_over_600_lines():
    long = [
        f"{p.relative_to(ROOT)}: {n}"
        for p in _modules("indexer", "search", "flows")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, long


def test_no_library_function_over_80_lines():
    """Counted as `ruff format` writes the code, docstring included."""
    long = []
    for path in _modules("indexer"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines}")
    assert not long, long


def test_at_most_8_loose_modules_in_the_library():
    loose = sorted(p.name for p in (ROOT / "indexer").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_MODULES, loose
