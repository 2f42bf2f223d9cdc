"""Review files: write the documents to label as JSONL or CSV (by suffix), and read a labelled
file back row by row, each row with the line it starts on or the reason it cannot be read.

Reading survives what a spreadsheet does to a file: a UTF-8 byte-order mark, CRLF line ends,
quoted fields with commas, quotes or line breaks inside. Does not touch the store.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from indexer.errors import InputError
from indexer.ingest.formats.jsonl import jsonl_frames

# the columns of an exported file, in order; `label` is left empty for the person
EXPORT_FIELDS = ("id", "collection", "head", "predicted", "score", "label", "title", "text")
REVIEW_BATCH = 1024  # JSONL lines parsed at a time


@dataclass(frozen=True)
class RawRow:
    """One row of a review file: its line and fields, or why it could not be read."""

    line: int
    fields: dict | None
    error: str | None = None


def review_format(path: Path) -> str:
    """`jsonl` or `csv` from the file name; anything else is refused."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    raise InputError(
        f"{path}: review files are .jsonl or .csv (by suffix), not '{suffix or 'none'}'"
    )


def write_review_file(path: Path, rows: Sequence[dict]) -> None:
    """Write export rows (`EXPORT_FIELDS`) to `path`, JSONL or CSV by its suffix; the file is
    written beside and renamed into place, so a failed export leaves no half file.

    Args:
        path: the file to write (its folder must exist).
        rows: dicts with at least the EXPORT_FIELDS keys.
    """
    fmt = review_format(path)
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        if fmt == "jsonl":
            fh.writelines(
                json.dumps({k: row.get(k) for k in EXPORT_FIELDS}, ensure_ascii=False) + "\n"
                for row in rows
            )
        else:
            writer = csv.DictWriter(fh, fieldnames=EXPORT_FIELDS, extrasaction="ignore")
            writer.writeheader()
            for row in rows:
                writer.writerow(
                    {k: "" if row.get(k) is None else row.get(k) for k in EXPORT_FIELDS}
                )
    tmp.replace(path)


def read_review_file(path: Path) -> Iterator[RawRow]:
    """Rows of a labelled review file, JSONL or CSV by suffix.

    Yields:
        RawRow per non-blank line (JSONL) or record (CSV; `line` is where it starts).
    Raises:
        InputError: the file is missing, not UTF-8, or a CSV without an `id` column.
    """
    fmt = review_format(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")  # a spreadsheet's byte-order mark goes
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: not UTF-8 ({exc.reason} at byte {exc.start}); save it as "
            "UTF-8 (CSV UTF-8 in a spreadsheet)"
        ) from None
    yield from (_jsonl_rows(path) if fmt == "jsonl" else _csv_rows(path, text))


def _jsonl_rows(path: Path) -> Iterator[RawRow]:
    """Through the project's one JSONL reader (`indexer.ingest.formats.jsonl`), in line order."""
    for _, rows, bad in jsonl_frames(path, REVIEW_BATCH):
        lines = [RawRow(r.pop("__row"), r) for r in rows]
        lines += [RawRow(n, None, reason) for n, reason in bad]
        yield from sorted(lines, key=lambda r: r.line)


def _csv_rows(path: Path, text: str) -> Iterator[RawRow]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        return
    header = [h.strip() for h in header]
    if "id" not in header:
        raise InputError(
            f"{path}: the first row must name the columns, with 'id' and 'label' "
            f"among them (found {header[:8]})"
        )
    start = reader.line_num + 1
    try:
        for record in reader:
            line, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in record):
                continue
            if len(record) > len(header):
                yield RawRow(
                    line,
                    None,
                    f"{len(record)} fields but the header names {len(header)}; "
                    "quote fields that hold commas",
                )
                continue
            yield RawRow(line, dict(zip(header, record)))
    except csv.Error as exc:
        yield RawRow(start, None, f"unreadable CSV ({exc}); the rows after it were not read")
