"""TSV: the CSV reader with a tab delimiter (`.tsv`; gzip allowed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from indexer.ingest.formats.base import Format, Frame, Labelled, LabelledFormat
from indexer.ingest.formats.csv import delimited_frames, labelled_table


def tsv_frames(path: Path, batch_size: int) -> Iterator[Frame]:
    """Tab-separated records with a header row (see `csv.delimited_frames`)."""
    return delimited_frames(path, batch_size, "\t")


FORMAT = Format(
    name="tsv",
    suffixes=(".tsv",),
    frames=tsv_frames,
    summary="TSV with a header row (.tsv; gzip allowed)",
)


def read_labelled_tsv(path: Path) -> Labelled:
    """Tab-separated pairs with a header row (see `csv.labelled_table`)."""
    return labelled_table(path, "\t")


LABELLED = LabelledFormat(
    name="tsv",
    suffixes=FORMAT.all_suffixes(),
    read=read_labelled_tsv,
    summary="sentence pairs: TSV with a header text_a, text_b, label or score",
)
