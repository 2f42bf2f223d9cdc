"""MkDocs hook: generated reference sections, so that they cannot drift from the code.

A page asks for a section with a marker line, replaced at build time:

- `<!-- gen:config-reference -->`: every key of `indexer.config.Config` (walked recursively)
  with its type, default, bounds and `Field(description=...)`.
- `<!-- gen:module-map -->`: every module under `indexer/`, `flows/` and `search/` with the
  first paragraph of its docstring (read with `ast`; nothing is imported).

The CLI reference is not generated here: mkdocs-click reads the Click commands itself
(`docs/reference/cli.md`). Also importable without MkDocs (`tests/project/test_docs.py`).
"""

from __future__ import annotations

import ast
import sys
import types
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("indexer", "flows", "search")
MARKERS = {
    "<!-- gen:config-reference -->": lambda: config_reference_markdown(),
    "<!-- gen:module-map -->": lambda: module_map_markdown(),
}


# --- MkDocs events ------------------------------------------------------------------------


def on_config(config, **kwargs):
    """Import this checkout's packages (not an installed copy) for mkdocs-click and the config."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return config


def on_page_markdown(markdown: str, page=None, config=None, files=None, **kwargs) -> str:
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


def on_page_content(html: str, page=None, config=None, files=None, **kwargs) -> str:
    # mkdocs-click 0.9 prints Click >= 8.3's "no default" sentinel as is (mkdocs-click PR #95)
    return html.replace("<code>Sentinel.UNSET</code>", "—")


# --- configuration reference --------------------------------------------------------------


def config_keys() -> list[tuple[str, str, object]]:
    """Every leaf key of the configuration as (dotted key, section model name, FieldInfo).

    Dict sections are written with a placeholder: `sources.<name>.paths`,
    `schedules.<flow>.cron`.
    """
    from indexer.config import Config

    keys: list[tuple[str, str, object]] = []
    _walk_model(Config, "", keys)
    return keys


def _section_model(annotation):
    """(model class, key placeholder) when a field holds a section, else (None, None)."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    if typing.get_origin(annotation) is dict:
        key_type, value_type = typing.get_args(annotation)
        if isinstance(value_type, type) and issubclass(value_type, BaseModel):
            if typing.get_origin(key_type) is typing.Literal:
                return value_type, "<" + "|".join(typing.get_args(key_type)) + ">"
            return value_type, "<name>"
    return None, None


def _walk_model(model, prefix: str, out: list) -> None:
    for name, field in model.model_fields.items():
        section, placeholder = _section_model(field.annotation)
        dotted = f"{prefix}{name}"
        if section is not None:
            _walk_model(section, f"{dotted}.{placeholder}." if placeholder else f"{dotted}.", out)
        else:
            out.append((dotted, model.__name__, field))


def _type_text(annotation) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " · ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [_type_text(a) for a in args if a is not type(None)]
        text = " or ".join(parts)
        return text + " or `null`" if type(None) in args else text
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if origin is dict:
        return f"map {_type_text(args[0])} → {_type_text(args[1])}"
    if isinstance(annotation, type):
        return f"`{annotation.__name__}`"
    return f"`{annotation}`"


def _default_text(field) -> str:
    from pydantic_core import PydanticUndefined

    value = field.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (dict, list)) and not value:
        return "empty"
    return f"`{value}`"


def _bounds_text(field) -> str:
    words = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "at least"}
    parts = []
    for item in field.metadata:
        for attr, word in words.items():
            value = getattr(item, attr, None)
            if value is not None:
                parts.append(f"{word} {value}" + (" item(s)" if attr == "min_length" else ""))
    return ", ".join(parts)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def config_reference_markdown() -> str:
    """Markdown tables, one per section, of every configuration key."""
    from indexer.config import Config

    rows_by_section: dict[str, list[tuple[str, object]]] = {}
    models: dict[str, type] = {}
    for dotted, _, field in config_keys():
        section = dotted.rsplit(".", 1)[0] if "." in dotted else "(top level)"
        rows_by_section.setdefault(section, []).append((dotted, field))
    for name, field in Config.model_fields.items():
        section, placeholder = _section_model(field.annotation)
        if section is not None:
            models[f"{name}.{placeholder}" if placeholder else name] = section

    lines: list[str] = []
    for section, rows in rows_by_section.items():
        lines.append(f"## `{section}`" if section != "(top level)" else "## Top level")
        lines.append("")
        model = models.get(section)
        doc = (model.__doc__ or "").strip().split("\n\n")[0] if model is not None else ""
        if doc:
            lines += [" ".join(doc.split()), ""]
        lines.append("| key | type | default | description |")
        lines.append("|---|---|---|---|")
        for dotted, field in rows:
            bounds = _bounds_text(field)
            description = _cell(field.description or "")
            if bounds:
                description = f"{description} ({bounds})" if description else f"({bounds})"
            lines.append(
                f"| `{dotted}` | {_cell(_type_text(field.annotation))} | "
                f"{_cell(_default_text(field))} | {description} |"
            )
        lines.append("")
    return "\n".join(lines)


# --- module map ---------------------------------------------------------------------------


def modules() -> list[tuple[str, Path, str]]:
    """Every module of the packages as (dotted name, path, docstring's first paragraph)."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT)
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            try:
                doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            except SyntaxError:
                doc = ""
            first = " ".join(doc.strip().split("\n\n")[0].split())
            found.append((".".join(parts), rel, first))
    return found


def module_map_markdown() -> str:
    """One table per top-level package: module, file, what it does (its docstring)."""
    lines: list[str] = []
    for package in PACKAGES:
        lines += [f"### `{package}/`", "", "| module | file | what it does |", "|---|---|---|"]
        for dotted, rel, first in modules():
            if dotted.split(".")[0] != package:
                continue
            what = _cell(first) if first else "*(no module docstring)*"
            lines.append(f"| `{dotted}` | `{rel.as_posix()}` | {what} |")
        lines.append("")
    return "\n".join(lines)
