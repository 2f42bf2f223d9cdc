"""The demo corpus: docstrings of the Python standard library, read from its source files
with `ast` (nothing is imported), written as JSONL passages with module/object metadata.

Usage: python -m indexer.ingest.stdlib_corpus OUT.jsonl
"""

from __future__ import annotations

import ast
import inspect
import json
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

SKIP_PARTS = {
    "test",
    "tests",
    "idlelib",
    "lib2to3",
    "site-packages",
    "dist-packages",
    "__pycache__",
    "turtledemo",
    "ensurepip",
    "pydoc_data",
    "encodings",
}
MIN_CHARS = 40  # shorter docstrings say too little to be worth a passage


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def iter_passages(root: Path | None = None) -> Iterator[dict]:
    """One passage per public module, class and function with a docstring.

    Methods are left out: their docstrings describe details of a class that has its own
    passage, and thousands of them would crowd the general answers out of the demo.
    """
    root = root or stdlib_root()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if SKIP_PARTS & set(rel.parts) or any(
            p.startswith("_") and p != "__init__.py" for p in rel.parts
        ):
            continue
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError):
            continue
        module = module_name(root, path)
        yield from _walk(tree, module, module, "module", str(rel))


def _walk(
    node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef,
    module: str,
    qualname: str,
    kind: str,
    rel: str,
) -> Iterator[dict]:
    doc = ast.get_docstring(node, clean=False)
    if doc:
        text = inspect.cleandoc(doc)
        if len(text) >= MIN_CHARS:
            yield {
                "id": qualname,
                "title": qualname,
                "text": text,
                "module": module,
                "kind": kind,
                "file": rel,
                "line": getattr(node, "lineno", 1),
            }
    if kind != "module":
        return
    for child in node.body:
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if child.name.startswith("_"):
                continue
            child_kind = "class" if isinstance(child, ast.ClassDef) else "function"
            yield from _walk(child, module, f"{qualname}.{child.name}", child_kind, rel)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with out.open("w", encoding="utf-8") as fh:
        for passage in iter_passages():
            fh.write(json.dumps(passage, ensure_ascii=False) + "\n")
            count += 1
    print(f"wrote {count} passages from {stdlib_root()} to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
