"""JSON Lines (`.jsonl`, `.ndjson`, and `.json` holding one object per line; gzip allowed),
parsed line by line so that one broken line is rejected with its row and the rest go on. The
project's one JSONL reader: corpora, labelled splits (`LABELLED`), review files and BEIR
queries all read through `jsonl_frames`. A UTF-8 byte-order mark before the first line (a
spreadsheet's) is dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from indexer.ingest.formats.base import (
    Format,
    Frame,
    Labelled,
    LabelledFormat,
    labelled_rows,
    open_binary,
)

BOM = b"\xef\xbb\xbf"


def jsonl_frames(path: Path, batch_size: int) -> Iterator[Frame]:
    """Blocks of `batch_size` lines, parsed (blank lines are skipped, not rows).

    Args:
        path: the file.
        batch_size: lines per block.
    Returns:
        An iterator of Frames.
    """
    with open_binary(path) as fh:
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
            yield (start, *_parse_lines(start, lines))


def _parse_lines(start: int, lines: list[bytes]) -> tuple[list[dict], list[tuple[int, str]]]:
    rows, bad = [], []
    for offset, line in enumerate(lines):
        number = start + offset
        if number == 1:
            line = line.removeprefix(BOM)
        if not line.strip():
            continue
        try:
            obj = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            bad.append((number, f"invalid UTF-8 at byte {exc.start}"))
            continue
        except ValueError as exc:
            bad.append((number, f"broken JSON: {exc}"))
            continue
        if not isinstance(obj, dict):
            bad.append((number, "a line must hold a JSON object"))
            continue
        obj["__row"] = number
        rows.append(obj)
    return rows, bad


FORMAT = Format(
    name="jsonl",
    suffixes=(".jsonl", ".ndjson", ".json"),
    frames=jsonl_frames,
    summary="JSON Lines, one object per line (.jsonl, .ndjson, .json; gzip allowed)",
)


def read_labelled_jsonl(path: Path) -> Labelled:
    """One split of items, one a line; an item's id is its `id`, else `line N`."""
    return labelled_rows(jsonl_frames, path, lambda row: f"line {row}")


LABELLED = LabelledFormat(
    name="jsonl", suffixes=FORMAT.all_suffixes(), read=read_labelled_jsonl, summary=FORMAT.summary
)
