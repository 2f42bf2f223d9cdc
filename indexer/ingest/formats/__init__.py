"""Input formats, registered here and nowhere else: each is one module of this package
(`jsonl`, `csv`, `tsv`, `parquet`, `text`, `beir`) whose `FORMAT` is listed in `FORMATS` below.

Everything that names formats or suffixes derives from this registry: the `--format` choices
and the `format` config key (`format_names`), detection by file name (`detect_format`),
directory expansion and the inbox (`corpus_format`). A new format is one new module plus one
entry here.
"""

from __future__ import annotations

from pathlib import Path

from indexer.errors import InputError
from indexer.ingest.formats import beir, csv, jsonl, parquet, text, tsv
from indexer.ingest.formats.base import Format

AUTO = "auto"
FORMATS: dict[str, Format] = {f.name: f for f in (
    jsonl.FORMAT, csv.FORMAT, tsv.FORMAT, parquet.FORMAT, text.FORMAT, beir.FORMAT,
)}


def format_names() -> tuple[str, ...]:
    """The accepted format values: `auto` (by file name), then every registered format."""
    return (AUTO, *FORMATS)


def get_format(name: str) -> Format:
    """The registered format called `name`.

    Raises:
        InputError: no such format (the message lists the choices).
    """
    try:
        return FORMATS[name]
    except KeyError:
        raise InputError(f"unknown format '{name}'; choose one of "
                         f"{', '.join(format_names())}") from None


def corpus_suffixes() -> tuple[str, ...]:
    """Every file name ending some format reads (`.gz` variants included)."""
    return tuple(s for f in FORMATS.values() for s in f.all_suffixes())


def corpus_format(path: Path) -> Format | None:
    """The format `path` is read as when none is given, or None when its name says nothing.

    Args:
        path: a file path (only its name and, for BEIR, its folder are looked at).
    Returns:
        A format that claims the file (BEIR's corpus.jsonl beside `qrels/`), else the one
        whose longest suffix ends the name (case-insensitive), else None.
    """
    for fmt in FORMATS.values():
        if fmt.claims is not None and fmt.claims(path):
            return fmt
    name = path.name.lower()
    matches = [(len(s), f) for f in FORMATS.values() for s in f.all_suffixes()
               if name.endswith(s)]
    return max(matches, key=lambda m: m[0])[1] if matches else None


def detect_format(path: Path) -> str:
    """The name of the format `path` is read as under `auto`.

    Raises:
        InputError: the name ends in no known suffix (the message lists them and the
            `--format` choices).
    """
    fmt = corpus_format(path)
    if fmt is None:
        raise InputError(f"{path}: {unknown_suffix_reason()}")
    return fmt.name


def unknown_suffix_reason() -> str:
    """Why a file is not read by name, and the fix."""
    return (f"cannot tell the format from the name (known endings: "
            f"{', '.join(corpus_suffixes())}); rename it or pass --format with one of "
            f"{', '.join(FORMATS)}")


def directory_corpus(folder: Path) -> Path | None:
    """The one corpus file a data-set folder stands for (a BEIR folder's corpus), else None."""
    for fmt in FORMATS.values():
        if fmt.directory_corpus is not None:
            found = fmt.directory_corpus(folder)
            if found is not None:
                return found
    return None
