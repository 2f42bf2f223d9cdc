"""The STS Benchmark layout, labelled pairs only: tab-separated, no header, no quoting,
`genre filename year id score sentence1 sentence2 [source source]` -> items `{text_a, text_b,
score}`. Its files are named `.csv`, so the CSV reader hands such a file here by its first line
(`looks_like_stsb`). Does not check scores (the pair head type does).
"""

from __future__ import annotations

from pathlib import Path

from indexer.errors import InputError
from indexer.ingest.formats.base import UNSPLIT, Labelled, LabelledFormat, open_binary

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


def read_stsb(path: Path) -> Labelled:
    """One `{text_a, text_b, score}` item per non-blank line, ids `line N`.

    Raises:
        InputError: a line with too few fields (naming it), a file that is not UTF-8, or
            one without rows.
    """
    rows = []
    with open_binary(path) as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{path}, line {n}: invalid UTF-8 at byte {exc.start}") from None
            if not line.strip():
                continue
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) < STSB_FIELDS:
                raise InputError(
                    f"{path}, line {n}: {len(fields)} tab-separated fields; the "
                    f"STS-B layout has {STSB_FIELDS} (genre filename year id "
                    "score sentence1 sentence2)"
                )
            rows.append(
                (f"line {n}", {"text_a": fields[5], "text_b": fields[6], "score": fields[4]})
            )
    if not rows:
        raise InputError(f"{path}: no STS-B rows")
    return Labelled({UNSPLIT: rows}, None, str(path))


LABELLED = LabelledFormat(
    name="stsb",
    suffixes=(),  # named .csv: recognised inside the CSV reader
    read=read_stsb,
    summary="STS Benchmark pairs: tab-separated, no header (score in column 5, sentences in 6-7)",
)
