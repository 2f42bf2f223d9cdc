"""Annotate corpus files into a JSONL or Parquet file, record by record in input order, without
touching the store. Bad records are skipped and reported (file, row, reason) like the indexer's.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from indexer.annotate.annotator import Annotator
from indexer.core.progress import Progress, ProgressArg
from indexer.errors import InputError, ModelError
from indexer.ingest.paths import expand_paths
from indexer.ingest.readers import FieldMap, Record, read_batches
from indexer.records.annotations import RESULT_TYPES, Annotation, Result

OUT_SUFFIXES = (".jsonl", ".parquet")

PARQUET_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("title", pa.string()),
        ("text", pa.string()),
        ("metadata", pa.string()),  # JSON: the input's other columns
        # one list column per result type: `labels`, `entities`
        *((rt.field, pa.list_(rt.out_struct)) for rt in RESULT_TYPES),
    ]
)


def annotation_fields(a: Annotation, versions: dict[str, str]) -> dict:
    """One JSON-ready list per result type (`labels`, `entities`) of one text."""
    return {
        rt.field: [x.out_row(_head_version(x, versions)) for x in found]
        for rt, found in a.results().items()
    }


def _head_version(result: Result, versions: dict[str, str]) -> str:
    """The version of the head that gave `result` (an annotator names each result's head)."""
    if result.head is None:
        raise ModelError(f"{result}: a result written to a file needs its head's name")
    return versions[result.head]


def annotate_files(
    paths: Sequence[str | Path],
    annotator: Annotator,
    out: Path,
    fmt: str = "auto",
    fields: FieldMap | None = None,
    batch_size: int = 2048,
    progress: ProgressArg = False,
) -> dict:
    """Write every good record of `paths` with its labels and entities to `out`, in order.

    Args:
        out: `.jsonl` (the record's own fields, then `labels` and `entities`) or `.parquet`
            (id, title, text, metadata as JSON, labels, entities). Written to a temporary
            name, then renamed: an interrupted run leaves no half file.
        progress: a progress mode (`indexer.core.progress`); records, rate (no total: no ETA).
    Returns:
        {"read", "annotated", "rejected", "rejections" (first 100), "out", "heads"}.
    """
    out = Path(out)
    if not out.name.endswith(OUT_SUFFIXES):
        raise InputError(f"--out {out}: give a file ending in {' or '.join(OUT_SUFFIXES)}")
    files, rejected = expand_paths(list(paths))
    versions = annotator.versions()
    buffered: deque[list[Record]] = deque()

    def texts():
        for path in files:
            for batch in read_batches(path, fmt, fields or FieldMap(), batch_size):
                rejected.extend(batch.rejected)
                buffered.append(batch.records)
                yield [r.text for r in batch.records]

    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    out.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    parquet = out.name.endswith(".parquet")
    bar = Progress(None, "annotating", "record", progress)
    try:
        # closed in the finally below, whichever it is
        if parquet:
            writer = pq.ParquetWriter(tmp, PARQUET_SCHEMA)
        else:
            writer = open(tmp, "w", encoding="utf-8")  # noqa: SIM115
        try:
            for annotations in annotator.annotate_chunks(texts()):
                records = buffered.popleft()
                rows = [
                    _row(r, annotation_fields(a, versions), parquet)
                    for r, a in zip(records, annotations)
                ]
                if isinstance(writer, pq.ParquetWriter):
                    writer.write_table(pa.Table.from_pylist(rows, schema=PARQUET_SCHEMA))
                else:
                    writer.write(
                        "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
                    )
                count += len(rows)
                bar.update(len(rows))
        finally:
            writer.close()
            bar.close()
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return {
        "read": count + len(rejected),
        "annotated": count,
        "rejected": len(rejected),
        "rejections": [
            {"source": r.source, "row": r.row, "id": r.external_id, "reason": r.reason}
            for r in rejected[:100]
        ],
        "out": str(out),
        "heads": versions,
        "dtype": annotator.dtype_name,
    }


def _row(record: Record, annotation: dict, parquet: bool) -> dict:
    if parquet:
        return {
            "id": record.external_id,
            "title": record.title,
            "text": record.text,
            "metadata": json.dumps(record.metadata, ensure_ascii=False, default=str),
            **annotation,
        }
    row = {"id": record.external_id}
    if record.title is not None:
        row["title"] = record.title
    row["text"] = record.text
    row.update(record.metadata)
    row.update(annotation)  # `labels` and `entities` win over same-named input columns
    return row
