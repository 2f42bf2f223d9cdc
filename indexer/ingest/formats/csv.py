"""CSV: a header row, then records (gzip allowed). Cells are text; an empty cell is null.

Read record by record with the csv module, so that a record with the wrong number of fields,
invalid UTF-8 or broken quoting is rejected with its row while the rest go on. The reader
takes its delimiter, so `tsv` is this reader with a tab. As labelled data (`labelled_table`)
its records are sentence pairs; a `.csv` file in the STS-B layout is handed to `stsb`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

from indexer.errors import InputError
from indexer.ingest.formats.base import (
    UNSPLIT,
    Format,
    Frame,
    Labelled,
    LabelledFormat,
    Unreadable,
    labelled_rows,
    open_binary,
)
from indexer.ingest.formats.stsb import looks_like_stsb, read_stsb

PAIR_COLUMNS = ("text_a", "text_b")

# a 5 MB document is one CSV field; the csv module's default limit is 128 KiB
csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))


def delimited_frames(path: Path, batch_size: int, sep: str) -> Iterator[Frame]:
    """Blocks of at most `batch_size` records of a delimited text file with a header row.

    Args:
        path: the file.
        batch_size: records (good or rejected) per block.
        sep: the field delimiter.
    Returns:
        An iterator of Frames; raises Unreadable when the header cannot be used.
    """
    with open_binary(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")
        reader = csv.reader(text, delimiter=sep, strict=True)
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise Unreadable(f"CSV header unreadable ({exc}); fix the first line", 0) from None
        _check_header(header)
        row, start = 0, 1
        rows: list[dict] = []
        bad: list[tuple[int, str]] = []
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                row += 1
                bad.append(
                    (row, f"CSV parse error: {exc} (line {reader.line_num}); fix the quoting")
                )
                continue
            if not cells:
                continue  # a blank line
            row += 1
            problem = _row_problem(header, cells, sep)
            if problem:
                bad.append((row, problem))
            else:
                record: dict[str, str | int | None] = {
                    h: (c if c != "" else None) for h, c in zip(header, cells)
                }
                record["__row"] = row
                rows.append(record)
            if len(rows) + len(bad) >= batch_size:
                yield start, rows, bad
                rows, bad, start = [], [], row + 1
        if rows or bad:
            yield start, rows, bad


def _check_header(header: list[str]) -> None:
    if _bad_utf8(header) is not None:
        raise Unreadable("CSV header is not valid UTF-8; re-save the file as UTF-8", 0)
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated:
        raise Unreadable(f"CSV header repeats column(s) {', '.join(repeated)}; rename them", 0)


def _row_problem(header: list[str], cells: list[str], sep: str) -> str | None:
    """Why a row cannot be read as a record; None when it can."""
    if len(cells) != len(header):
        return (
            f"row has {len(cells)} fields, the header has {len(header)} "
            f"({', '.join(header)}); quote fields that hold '{sep}'"
        )
    column = _bad_utf8(cells)
    return None if column is None else f"invalid UTF-8 in column '{header[column]}'"


def _bad_utf8(cells: list[str]) -> int | None:
    """Index of the first cell holding bytes that were not UTF-8 (decoded as lone surrogates
    by `surrogateescape`); None when all are valid."""
    for i, cell in enumerate(cells):
        if not cell.isascii():
            try:
                cell.encode("utf-8")
            except UnicodeEncodeError:
                return i
    return None


def csv_frames(path: Path, batch_size: int) -> Iterator[Frame]:
    """Comma-separated records; a `.tsv(.gz)` file named with `--format csv` keeps its tabs
    (as before `tsv` was a format of its own)."""
    tsv = path.name.lower().removesuffix(".gz").endswith(".tsv")
    return delimited_frames(path, batch_size, "\t" if tsv else ",")


FORMAT = Format(
    name="csv",
    suffixes=(".csv",),
    frames=csv_frames,
    summary="CSV with a header row (.csv; gzip allowed)",
)


def labelled_table(path: Path, sep: str) -> Labelled:
    """Sentence pairs of a delimited file with a header (`text_a`, `text_b`, `label` or
    `score`, optional `id`), ids `line N`; a `label` of digits becomes its integer (0/1
    data), an empty cell is left out. A file whose first line has no `text_a` but parses as
    the STS-B layout is read as STS-B (`stsb`: its files are named `.csv`).

    Raises:
        InputError: a header without the pair columns, or the first record that cannot be
            read (naming its line).
    """
    with open_binary(path) as fh:
        first = fh.readline().decode("utf-8", errors="replace")
    if "text_a" not in first and looks_like_stsb(first):
        return read_stsb(path)
    out = labelled_rows(
        lambda p, n: delimited_frames(p, n, sep), path, lambda row: f"line {row + 1}"
    )  # the header is line 1
    rows = out.items[UNSPLIT]
    header = set(rows[0][1]) if rows else set()
    if rows and (not set(PAIR_COLUMNS) <= header or not {"label", "score"} & header):
        raise InputError(
            f"{path}: a pair CSV needs a header with text_a, text_b and label or "
            f"score (has {sorted(header)}); the STS-B layout (tab-separated, no "
            "header) is read with --format stsb"
        )
    if not rows:
        raise InputError(f"{path}: no rows under the header")
    for i, (item_id, item) in enumerate(rows):
        item = {k: v for k, v in item.items() if v is not None}
        label = item.get("label")
        if isinstance(label, str) and label.lstrip("-").isdigit():
            item["label"] = int(label)
        rows[i] = (item_id, item)
    return out


def read_labelled_csv(path: Path) -> Labelled:
    """Comma-separated pairs (see `labelled_table`); tabs for a `.tsv(.gz)` name."""
    tsv = path.name.lower().removesuffix(".gz").endswith(".tsv")
    return labelled_table(path, "\t" if tsv else ",")


LABELLED = LabelledFormat(
    name="csv",
    suffixes=FORMAT.all_suffixes(),
    read=read_labelled_csv,
    summary="sentence pairs: CSV with a header text_a, text_b, label or score (STS-B inside)",
)
