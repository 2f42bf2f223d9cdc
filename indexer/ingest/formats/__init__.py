"""Input formats, registered here and nowhere else: each is one module of this package whose
`FORMAT` (a corpus: `jsonl`, `csv`, `tsv`, `parquet`, `text`, `beir`) is listed in `FORMATS`
and whose `LABELLED` (the labelled splits heads train on: `jsonl`, `csv`, `tsv`, `parquet`,
and `splits`, `conll`, `tweeteval`, `stsb`, which hold labelled items only) is listed in
`LABELLED` below. A format that is both reads through one reader.

An extension means one thing everywhere: `.json` is JSON Lines (one object a line), for a
corpus, labelled data and the inbox alike; a JSON document holding labelled splits is read
only when asked for (`--format splits`).

Everything that names formats or suffixes derives from this registry: the `--format` choices
and the `format` config key (`format_names`), detection by file name (`detect_format`),
directory expansion and the inbox (`corpus_format`), and for heads the `train --format`
choices (`labelled_format_names`) and detection (`labelled_format`). A new format is one new
module plus one entry here.
"""

from __future__ import annotations

from pathlib import Path

from indexer.errors import InputError
from indexer.ingest.formats import (
    beir,
    conll,
    csv,
    jsonl,
    parquet,
    splits,
    stsb,
    text,
    tsv,
    tweeteval,
)
from indexer.ingest.formats.base import Format, Labelled, LabelledFormat

AUTO = "auto"
FORMATS: dict[str, Format] = {
    f.name: f
    for f in (jsonl.FORMAT, csv.FORMAT, tsv.FORMAT, parquet.FORMAT, text.FORMAT, beir.FORMAT)
}
LABELLED: dict[str, LabelledFormat] = {
    f.name: f
    for f in (
        splits.LABELLED,
        jsonl.LABELLED,
        parquet.LABELLED,
        conll.LABELLED,
        tweeteval.LABELLED,
        csv.LABELLED,
        tsv.LABELLED,
        stsb.LABELLED,
    )
}
LABELLED_FALLBACK = conll.LABELLED  # `auto` for a file no suffix claims (CoNLL's `eng.train`)


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
        raise InputError(
            f"unknown format '{name}'; choose one of {', '.join(format_names())}"
        ) from None


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
    matches = [(len(s), f) for f in FORMATS.values() for s in f.all_suffixes() if name.endswith(s)]
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
    return (
        f"cannot tell the format from the name (known endings: "
        f"{', '.join(corpus_suffixes())}); rename it or pass --format with one of "
        f"{', '.join(FORMATS)}"
    )


def directory_corpus(folder: Path) -> Path | None:
    """The one corpus file a data-set folder stands for (a BEIR folder's corpus), else None."""
    for fmt in FORMATS.values():
        if fmt.directory_corpus is not None:
            found = fmt.directory_corpus(folder)
            if found is not None:
                return found
    return None


# ---- labelled data (heads) ----------------------------------------------------------------


def labelled_format_names() -> tuple[str, ...]:
    """The accepted `train --format` values: `auto`, then every labelled format."""
    return (AUTO, *LABELLED)


def labelled_format(path: Path, name: str = AUTO) -> LabelledFormat:
    """The labelled format `path` is read as: `name`, or under `auto` the folder format for a
    folder (TweetEval), else the one whose longest suffix ends the name, else CoNLL.

    Raises:
        InputError: an unknown `name` (the message lists the choices).
    """
    if name != AUTO:
        if name not in LABELLED:
            raise InputError(
                f"unknown format '{name}'; choose one of {', '.join(labelled_format_names())}"
            )
        return LABELLED[name]
    if path.is_dir():
        return next(f for f in LABELLED.values() if f.folder)
    low = path.name.lower()
    matches = [(len(s), f) for f in LABELLED.values() for s in f.suffixes if low.endswith(s)]
    return max(matches, key=lambda m: m[0])[1] if matches else LABELLED_FALLBACK


def read_labelled(path: Path, name: str = AUTO) -> Labelled:
    """The labelled items of a file or folder, in the format `labelled_format` picks.

    Raises:
        InputError: no such path, a folder for a file format (or the reverse), or what the
            format's reader refuses (naming the file and line).
    """
    fmt = labelled_format(path, name)
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    if path.is_dir() != fmt.folder:
        need = "a folder" if fmt.folder else "a file"
        raise InputError(f"{path}: format '{fmt.name}' needs {need}")
    return fmt.read(path)
