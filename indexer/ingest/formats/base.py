"""What an input format is: a name, the file suffixes it claims, and a frame producer that
turns one file into blocks of raw rows (`Format`); what a labelled format is, that heads train
on (`LabelledFormat`), and a corpus format's rows read as labelled items (`labelled_rows`).
Does not validate records (`indexer.ingest.readers`) or labels (the head types).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from indexer.errors import InputError

# (row number of the block's first row, rows as dicts each with its "__row", (row, reason)
# of the rows that could not be parsed)
Frame = tuple[int, list[dict], list[tuple[int, str]]]
Frames = Callable[[Path, int], Iterator[Frame]]
UNSPLIT = "_"  # the split of a file that holds one, named by the option that pointed to it
LABELLED_BATCH = 4096  # rows a labelled file is read in (all are kept: a training set fits memory)


class Unreadable(Exception):
    """A file, or the rest of a file from `row` on (0: the whole file), cannot be read."""

    def __init__(self, message: str, row: int):
        super().__init__(message)
        self.row = row


@dataclass(frozen=True)
class Format:
    """One input format.

    Args:
        name: the `--format` / `sources.*.format` value.
        suffixes: lower-case file name endings it claims (`.jsonl`); with `gzip`, each also
            with `.gz` appended.
        frames: `frames(path, batch_size)` yields Frames of at most `batch_size` rows;
            raises `Unreadable` (or OSError for a damaged .gz) when reading stops.
        summary: one line for error messages and help.
        gzip: whether `<suffix>.gz` files are this format too (read through gzip).
        fields: columns the format fixes, as FieldMap keywords (BEIR: `_id`, text, title).
        claims: a file this format claims whatever its suffix, tried before suffixes.
        directory_corpus: the one corpus file a directory stands for, when it is this
            format's data-set folder (BEIR), else None.
        in_folders: whether a folder's files of this format are read when the folder is
            given (False for plain text: a folder's README.txt is not a corpus); a file
            named on its own is always read.
    """

    name: str
    suffixes: tuple[str, ...]
    frames: Frames
    summary: str
    gzip: bool = True
    fields: Mapping[str, Any] | None = None  # FieldMap keywords
    claims: Callable[[Path], bool] | None = None
    directory_corpus: Callable[[Path], Path | None] | None = None
    in_folders: bool = True

    def all_suffixes(self) -> tuple[str, ...]:
        """Every file name ending this format reads, `.gz` variants included."""
        return self.suffixes + (tuple(s + ".gz" for s in self.suffixes) if self.gzip else ())


def open_binary(path: Path) -> gzip.GzipFile | BinaryIO:
    """The file's bytes, through gzip when its name ends in `.gz`."""
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else path.open("rb")


@dataclass
class Labelled:
    """The labelled items of one file or folder, as read: no head type has checked them."""

    items: dict[str, list[tuple[str, dict]]]  # split (or UNSPLIT) -> [(item id, item)]
    label_names: list[str] | None
    source: str


@dataclass(frozen=True)
class LabelledFormat:
    """One format heads read labelled splits from (`bertindex train --format`).

    Args:
        name: the `--format` value of `train` and `eval head`.
        suffixes: lower-case file name endings it claims under `auto` (none: asked for by
            name, or the fallback of `indexer.ingest.formats.labelled_format`).
        read: `read(path)` -> the file's (or folder's) items; raises InputError naming the
            file and line of the first thing it cannot read.
        summary: one line for help and errors.
        folder: it reads a folder (TweetEval), not a file.
    """

    name: str
    suffixes: tuple[str, ...]
    read: Callable[[Path], Labelled]
    summary: str
    folder: bool = False


def labelled_rows(frames: Frames, path: Path, row_name: Callable[[int], str]) -> Labelled:
    """A corpus format's rows as the one split of a labelled file. Unlike indexing, which
    rejects a bad row and goes on, the first row that cannot be read stops: a training set
    with a hole is refused, not trained on.

    Args:
        frames: the format's frame producer (one reader per format, for corpus and labels).
        row_name: a row number -> the item's id when it has no `id` (`line 3`).
    Raises:
        InputError: naming the file, the row and the reason.
    """
    rows: list[tuple[str, dict]] = []
    try:
        for _, block, bad in frames(path, LABELLED_BATCH):
            if bad:
                row, reason = bad[0]
                raise InputError(f"{path}, {row_name(row)}: {reason}")
            for item in block:
                row = item.pop("__row")
                item_id = item.get("id")
                rows.append((row_name(row) if item_id is None else str(item_id), item))
    except Unreadable as exc:
        raise InputError(f"{path}: {exc}") from None
    return Labelled({UNSPLIT: rows}, None, str(path))
