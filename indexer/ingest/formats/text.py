"""Plain text (`.txt`; gzip allowed): one document per line, such as TweetEval's
`*_text.txt`. A line is the document's text; its id is `<file name>:<line>` (the reader's
rule for files without an id column), so the ids hold as long as the file keeps its order.
Blank lines are skipped, not rows; a line that is not UTF-8 is rejected with its number.
A `.txt` file is read when named (or with `--format text`), never picked up from a folder
given whole, where a README.txt is not a corpus (an annotate inbox, where files are
dropped to be read, takes them).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from indexer.ingest.formats.base import Format, Frame, open_binary


def text_frames(path: Path, batch_size: int) -> Iterator[Frame]:
    """Blocks of `batch_size` lines, each non-blank line a row `{"text": line}`."""
    with open_binary(path) as fh:
        row = 0
        while True:
            rows, bad = [], []
            read = 0
            start = row + 1
            for line in fh:
                row += 1
                read += 1
                if line.strip():
                    try:
                        rows.append({"text": line.decode("utf-8").rstrip("\r\n"), "__row": row})
                    except UnicodeDecodeError as exc:
                        bad.append((row, f"invalid UTF-8 at byte {exc.start}"))
                if read >= batch_size:
                    break
            if not read:
                return
            yield start, rows, bad


FORMAT = Format(
    name="text",
    suffixes=(".txt",),
    frames=text_frames,
    summary="plain text, one document per line (.txt, read when named; gzip allowed)",
    in_folders=False,
)
