"""Search filters as people type them (CLI options, the search page, `POST /search`):
`FIELD=VALUE`, `HEAD=LABEL`, `TYPE[=TEXT]` strings -> pairs, or a one-line InputError naming
the string and the form it must take. Imports nothing heavy (the CLI loads it at start).
"""

from __future__ import annotations

from collections.abc import Sequence

from indexer.errors import InputError


def parse_where(items: Sequence[str]) -> list[tuple[str, str]]:
    """`FIELD=VALUE` strings -> pairs; the value may itself contain '='."""
    pairs = []
    for item in items:
        field_name, sep, value = item.partition("=")
        if not sep or not field_name:
            raise InputError(f"--where '{item}' must look like FIELD=VALUE")
        pairs.append((field_name, value))
    return pairs


def parse_labels(items: Sequence[str]) -> list[tuple[str, str]]:
    """`HEAD=LABEL` strings -> pairs."""
    out = []
    for item in items:
        head, sep, label = item.partition("=")
        if not sep or not head or not label:
            raise InputError(
                f"--label '{item}' must look like HEAD=LABEL (e.g. offensive=offensive)"
            )
        out.append((head, label))
    return out


def parse_entities(items: Sequence[str]) -> list[tuple[str, str | None]]:
    """`TYPE` or `TYPE=TEXT` strings -> (type, text or None)."""
    out = []
    for item in items:
        kind, sep, text = item.partition("=")
        if not kind or (sep and not text):
            raise InputError(f"--entity '{item}' must look like TYPE or TYPE=TEXT (e.g. LOC=Paris)")
        out.append((kind, text if sep else None))
    return out
