"""CoNLL column files, labelled tokens only: one token a line, its tag in the last column, a
blank or whitespace-only line between sentences, `-DOCSTART-` lines skipped -> items
`{tokens, tags}` with ids `line N` (a sentence's first line). CoNLL files carry no standard
suffix (`eng.train`), so this is what `auto` reads a file of no known suffix as. Does not
check tags (the tagger head type does).
"""

from __future__ import annotations

from pathlib import Path

from indexer.errors import InputError
from indexer.ingest.formats.base import UNSPLIT, Labelled, LabelledFormat


def read_conll(path: Path) -> Labelled:
    """The file's sentences, in order.

    Raises:
        InputError: a line with one column (naming it), or a file without sentences.
    """
    sentences: list[tuple[str, dict]] = []
    tokens: list[str] = []
    tags: list[str] = []
    start = 0
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            cols = line.split()
            if not cols:  # blank or whitespace-only line ends a sentence
                if tokens:
                    sentences.append((f"line {start}", {"tokens": tokens, "tags": tags}))
                tokens, tags = [], []
                continue
            if cols[0] == "-DOCSTART-":
                continue
            if len(cols) < 2:
                raise InputError(
                    f"{path}, line {n}: expected 'token ... tag' columns, got {line.strip()!r}"
                )
            if not tokens:
                start = n
            tokens.append(cols[0])
            tags.append(cols[-1])
    if tokens:
        sentences.append((f"line {start}", {"tokens": tokens, "tags": tags}))
    if not sentences:
        raise InputError(f"{path}: no sentences found (expected CoNLL columns: token ... tag)")
    return Labelled({UNSPLIT: sentences}, None, str(path))


LABELLED = LabelledFormat(
    name="conll",
    suffixes=(),  # any name: the fallback of `auto`
    read=read_conll,
    summary="CoNLL columns: token first, BIO tag last, blank lines between sentences",
)
