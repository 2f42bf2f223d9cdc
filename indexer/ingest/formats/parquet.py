"""Parquet, read through pyarrow a row batch at a time. A damaged file or row group ends the
file's reading as one rejection; Parquet compresses inside the file, so no `.gz`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from indexer.ingest.formats.base import (
    Format,
    Frame,
    Labelled,
    LabelledFormat,
    Unreadable,
    labelled_rows,
)


def parquet_frames(path: Path, batch_size: int) -> Iterator[Frame]:
    """Row batches of at most `batch_size` rows.

    Args:
        path: the file.
        batch_size: rows per block.
    Returns:
        An iterator of Frames (no per-row parse failures: Parquet rows are typed).
    """
    import polars as pl
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001  (pyarrow raises several types for damaged files)
        raise Unreadable(f"not a readable Parquet file ({exc}); re-export it", 0) from None
    row = 0
    batches = pf.iter_batches(batch_size=batch_size)
    while True:
        try:
            frame = pl.from_arrow(next(batches))
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001  (a damaged row group: the rest is unreadable)
            raise Unreadable(
                f"Parquet data unreadable from row {row + 1} on ({exc}); the rows "
                "before it were read. Re-export the file",
                row + 1,
            ) from None
        if not isinstance(frame, pl.DataFrame):  # a record batch converts to a frame
            raise Unreadable(
                f"Parquet rows from {row + 1} on read as a {type(frame).__name__}, not a table",
                row + 1,
            )
        start = row + 1
        row += frame.height
        rows = frame.with_columns(pl.int_range(start, start + frame.height).alias("__row"))
        yield start, rows.to_dicts(), []


FORMAT = Format(
    name="parquet",
    suffixes=(".parquet",),
    frames=parquet_frames,
    summary="Parquet (.parquet)",
    gzip=False,
)


def read_labelled_parquet(path: Path) -> Labelled:
    """One split of items, one a row; an item's id is its `id`, else `row N` (from 1)."""
    return labelled_rows(parquet_frames, path, lambda row: f"row {row}")


LABELLED = LabelledFormat(
    name="parquet",
    suffixes=FORMAT.all_suffixes(),
    read=read_labelled_parquet,
    summary=FORMAT.summary,
)
