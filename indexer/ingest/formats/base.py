"""What an input format is: a name, the file suffixes it claims, and a frame producer that
turns one file into blocks of raw rows. Does not validate records (`indexer.ingest.readers`).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# (row number of the block's first row, rows as dicts each with its "__row", (row, reason)
# of the rows that could not be parsed)
Frame = tuple[int, list[dict], list[tuple[int, str]]]
Frames = Callable[[Path, int], Iterator[Frame]]


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
    fields: Mapping[str, str | None] | None = None
    claims: Callable[[Path], bool] | None = None
    directory_corpus: Callable[[Path], Path | None] | None = None
    in_folders: bool = True

    def all_suffixes(self) -> tuple[str, ...]:
        """Every file name ending this format reads, `.gz` variants included."""
        return self.suffixes + (tuple(s + ".gz" for s in self.suffixes) if self.gzip else ())


def open_binary(path: Path) -> BinaryIO:
    """The file's bytes, through gzip when its name ends in `.gz`."""
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else path.open("rb")
