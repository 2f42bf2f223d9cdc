"""Readers for pair data in delimited files: CSV with a header (`text_a`, `text_b`, `label` or
`score`, optional `id`), and the STS Benchmark layout (tab-separated, no header, no quoting:
`genre filename year id score sentence1 sentence2 [source source]`). A `.csv` file whose first
line has no `text_a` column but parses as the STS-B layout is read as STS-B (its files are named
`.csv`). Returns raw items for `heads.data`; does not check labels.
"""

from __future__ import annotations

import csv
from pathlib import Path

from indexer.errors import InputError

PAIR_COLUMNS = ("text_a", "text_b")
STSB_FIELDS = 7  # genre, filename, year, id, score, sentence1, sentence2 (sources may follow)


def looks_like_stsb(line: str) -> bool:
    """Whether one line parses as an STS-B row (7+ tab fields, a number in the 5th)."""
    fields = line.rstrip("\r\n").split("\t")
    if len(fields) < STSB_FIELDS:
        return False
    try:
        float(fields[4])
    except ValueError:
        return False
    return True


def read_pair_table(path: Path, kind: str) -> list[tuple[str, dict]]:
    """(id, item) per row of a `csv` or `stsb` file.

    Args:
        kind: "csv" (a header row; STS-B layout detected when it has no `text_a`) or "stsb".
    Raises:
        InputError: naming the file, the line and what it should hold.
    """
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            first = fh.readline()
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text: {exc}") from None
    if kind == "stsb" or ("text_a" not in first and looks_like_stsb(first)):
        return _read_stsb(path)
    return _read_csv(path)


def _read_csv(path: Path) -> list[tuple[str, dict]]:
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in PAIR_COLUMNS if c not in header]
        if missing or not ({"label", "score"} & set(header)):
            raise InputError(
                f"{path}: a pair CSV needs a header with text_a, text_b and label or score "
                f"(has {header}); the STS-B layout (tab-separated, no header) is read with "
                "--format stsb")
        rows = []
        for n, row in enumerate(reader, start=2):
            if None in row or any(row[c] is None for c in PAIR_COLUMNS):
                raise InputError(f"{path}, line {n}: {len(row)} fields; the header has {len(header)}")
            item = {"text_a": row["text_a"], "text_b": row["text_b"]}
            if row.get("label") not in (None, ""):
                label = row["label"]
                item["label"] = int(label) if label.lstrip("-").isdigit() else label
            elif row.get("score") not in (None, ""):
                item["score"] = row["score"]
            rows.append((row.get("id") or f"line {n}", item))
    if not rows:
        raise InputError(f"{path}: no rows under the header")
    return rows


def _read_stsb(path: Path) -> list[tuple[str, dict]]:
    rows = []
    with path.open(encoding="utf-8", newline="") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) < STSB_FIELDS:
                raise InputError(f"{path}, line {n}: {len(fields)} tab-separated fields; the STS-B "
                                 f"layout has {STSB_FIELDS} (genre filename year id score "
                                 "sentence1 sentence2)")
            rows.append((f"line {n}", {"text_a": fields[5], "text_b": fields[6], "score": fields[4]}))
    if not rows:
        raise InputError(f"{path}: no STS-B rows")
    return rows
