"""Readers: stream records out of JSONL, Parquet, CSV and BEIR corpus files, in batches.

Polars parses each batch; a batch that polars refuses is re-read line by line so that one
bad record is rejected (with its file and row) while the rest go on. Validation of the
records themselves (empty text, duplicate ids) happens here too; nothing is encoded here.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import polars as pl

from indexer.errors import InputError

Format = Literal["auto", "jsonl", "parquet", "csv", "beir"]
FORMATS = ("auto", "jsonl", "parquet", "csv", "beir")
DEFAULT_ID_FIELDS = ("id", "_id")


@dataclass(frozen=True)
class FieldMap:
    """Which columns hold the id, text and title. Every other column becomes metadata.

    `id_field=None` means `id` or `_id`, whichever the file has; a file with neither gets
    `<file name>:<row>` ids, stable as long as the file keeps its order.
    """

    id_field: str | None = None
    text_field: str = "text"
    title_field: str | None = "title"
    metadata_fields: tuple[str, ...] | None = None  # None: every other column


@dataclass
class Record:
    external_id: str
    text: str
    title: str | None
    metadata: dict
    source: str
    row: int  # 1-based line or row number in the source file


@dataclass
class Rejected:
    source: str
    row: int
    external_id: str | None
    reason: str


@dataclass
class Batch:
    records: list[Record] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)


def detect_format(path: Path) -> str:
    name = path.name.lower()
    name = name.removesuffix(".gz")
    if name == "corpus.jsonl" and (path.parent / "qrels").is_dir():
        return "beir"
    for suffix, fmt in ((".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "jsonl"),
                        (".parquet", "parquet"), (".csv", "csv"), (".tsv", "csv")):
        if name.endswith(suffix):
            return fmt
    raise InputError(
        f"{path}: cannot tell the format from the name; pass --format with one of "
        f"{', '.join(FORMATS[1:])}"
    )


def expand_paths(paths: list[str | Path]) -> list[Path]:
    """Files as given; a directory stands for the corpus files directly inside it (sorted);
    a BEIR data-set directory stands for its corpus.jsonl(.gz)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            beir = [p for p in (path / "corpus.jsonl", path / "corpus.jsonl.gz") if p.is_file()]
            if beir:
                out.append(beir[0])
                continue
            found = sorted(
                p for p in path.iterdir()
                if p.is_file() and any(p.name.lower().endswith(s) for s in
                                       (".jsonl", ".jsonl.gz", ".ndjson", ".parquet", ".csv"))
            )
            if not found:
                raise InputError(f"{path}: directory holds no .jsonl, .parquet or .csv files")
            out.extend(found)
        elif path.is_file():
            out.append(path)
        else:
            raise InputError(f"{path}: no such file or directory")
    return out


def read_batches(
    path: Path, fmt: str = "auto", fields: FieldMap = FieldMap(), batch_size: int = 2048
) -> Iterator[Batch]:
    """Yield validated records of one file, `batch_size` rows at a time.

    Args:
        path: the corpus file (gzip allowed for JSONL).
        fmt: one of FORMATS; `auto` decides by file name.
        fields: the column mapping.
        batch_size: rows per batch.
    """
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt == "beir":
        fields = FieldMap(id_field="_id", text_field="text", title_field="title",
                          metadata_fields=fields.metadata_fields)
    frames = {"jsonl": _jsonl_frames, "beir": _jsonl_frames, "parquet": _parquet_frames,
              "csv": _csv_frames}
    if fmt not in frames:
        raise InputError(f"unknown format '{fmt}'; choose one of {', '.join(FORMATS)}")
    validator = _Validator(path, fields)
    for first_row, frame, bad in frames[fmt](path, batch_size):
        yield validator.check(first_row, frame, bad)


# -- frame producers: yield (row number of the frame's first row, frame, rejected rows) --

def _open_text(path: Path):
    raw = gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")
    return raw


def _jsonl_frames(path: Path, batch_size: int):
    with _open_text(path) as fh:
        row = 0
        while True:
            lines = []
            for line in fh:
                lines.append(line)
                if len(lines) >= batch_size:
                    break
            if not lines:
                return
            start = row + 1
            row += len(lines)
            yield (start, *_parse_json_lines(path, start, lines))


def _parse_json_lines(path: Path, start: int, lines: list[bytes]):
    """Parse a block of JSONL lines; returns (frame with a __row column, rejected rows)."""
    rows, bad = [], []
    for offset, line in enumerate(lines):
        number = start + offset
        if not line.strip():
            continue
        try:
            obj = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            bad.append(Rejected(str(path), number, None, f"invalid UTF-8 at byte {exc.start}"))
            continue
        except ValueError as exc:
            bad.append(Rejected(str(path), number, None, f"broken JSON: {exc}"))
            continue
        if not isinstance(obj, dict):
            bad.append(Rejected(str(path), number, None, "a line must hold a JSON object"))
            continue
        obj["__row"] = number
        rows.append(obj)
    return rows, bad


def _parquet_frames(path: Path, batch_size: int):
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
    row = 0
    for rb in pf.iter_batches(batch_size=batch_size):
        frame = pl.from_arrow(rb)
        start = row + 1
        row += frame.height
        yield start, frame.with_columns(pl.int_range(start, start + frame.height).alias("__row")).to_dicts(), []


def _csv_frames(path: Path, batch_size: int):
    sep = "\t" if path.name.lower().endswith(".tsv") else ","
    lazy = pl.scan_csv(path, separator=sep, infer_schema=False, encoding="utf8-lossy")
    row = 0
    try:
        for frame in lazy.collect_batches(chunk_size=batch_size):
            start = row + 1
            row += frame.height
            numbered = frame.with_columns(pl.int_range(start, start + frame.height).alias("__row"))
            yield start, numbered.to_dicts(), []
    except pl.exceptions.PolarsError as exc:
        raise InputError(f"{path}: CSV parse error after row {row}: {exc}; fix the file or "
                         "convert it to JSONL") from None


class _Validator:
    """Turn raw rows into Records; reject rows with no usable id or text."""

    def __init__(self, path: Path, fields: FieldMap):
        self.path = path
        self.source = str(path)
        self.fields = fields
        self.seen: dict[str, int] = {}
        self.id_field: str | None = fields.id_field
        self.id_resolved = fields.id_field is not None

    def _resolve_id_field(self, row: dict) -> None:
        if not self.id_resolved:
            self.id_field = next((f for f in DEFAULT_ID_FIELDS if f in row), None)
            self.id_resolved = True

    def check(self, first_row: int, rows: list[dict], bad: list[Rejected]) -> Batch:
        batch = Batch(rejected=list(bad))
        f = self.fields
        for row in rows:
            number = row.pop("__row")
            self._resolve_id_field(row)
            if self.id_field is None:
                ext_id = f"{self.path.name}:{number}"
            else:
                if self.id_field not in row:
                    batch.rejected.append(Rejected(self.source, number, None,
                                                   f"missing id field '{self.id_field}'"))
                    continue
                value = row.get(self.id_field)
                if value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == "":
                    batch.rejected.append(Rejected(self.source, number, None,
                                                   f"empty id field '{self.id_field}'"))
                    continue
                if isinstance(value, (dict, list, bool)):
                    batch.rejected.append(Rejected(self.source, number, None,
                                                   f"id field '{self.id_field}' must be a string or number"))
                    continue
                ext_id = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
            if f.text_field not in row:
                batch.rejected.append(Rejected(
                    self.source, number, ext_id,
                    f"missing text field '{f.text_field}' (columns: {', '.join(sorted(row))}); "
                    "map it with --text-field",
                ))
                continue
            text = row.get(f.text_field)
            if not isinstance(text, str):
                reason = "text is null" if text is None else f"text must be a string, got {type(text).__name__}"
                batch.rejected.append(Rejected(self.source, number, ext_id, reason))
                continue
            if "\x00" in text:
                text = text.replace("\x00", "")
            title = row.get(f.title_field) if f.title_field else None
            if title is not None and not isinstance(title, str):
                title = str(title)
            title = title.strip() if title else None
            if not text.strip() and not title:
                batch.rejected.append(Rejected(self.source, number, ext_id, "empty text"))
                continue
            if ext_id in self.seen:
                batch.rejected.append(Rejected(
                    self.source, number, ext_id,
                    f"duplicate id '{ext_id}' (first at row {self.seen[ext_id]})",
                ))
                continue
            self.seen[ext_id] = number
            skip = {self.id_field, f.text_field, f.title_field}
            if f.metadata_fields is None:
                metadata = {k: _clean(v) for k, v in row.items() if k not in skip}
            else:
                metadata = {k: _clean(row.get(k)) for k in f.metadata_fields}
            batch.records.append(Record(ext_id, text, title, metadata, self.source, number))
        return batch


def _clean(value):
    """JSON-safe metadata: NaN and infinities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def document_text(record: Record) -> str:
    """The text that is encoded: title and body joined by a space (as MTEB does for BEIR)."""
    return f"{record.title} {record.text}".strip() if record.title else record.text
