"""TweetEval task folders, labelled texts only: `{train,val,test}_text.txt` beside
`{split}_labels.txt` (one integer a line) and `mapping.txt` (`index<TAB>name`) -> items
`{text, label}` per split, the label list from the mapping. Lines split on `\\n` only: tweets
may hold U+2028 and the like, which `str.splitlines` breaks on. A folder is read as this.
"""

from __future__ import annotations

import logging
from pathlib import Path

from indexer.errors import InputError
from indexer.ingest.formats.base import Labelled, LabelledFormat

log = logging.getLogger(__name__)

SPLIT_STEMS = {"train": "train", "validation": "val", "test": "test"}


def read_tweeteval(folder: Path) -> Labelled:
    """The folder's splits (a split whose text or labels file is missing is skipped, with a
    warning when only one of the two is there).

    Raises:
        InputError: no or a malformed mapping.txt, text and label files of different
            lengths, a label that is not an integer (naming the file and line), or no split.
    """
    names = _mapping(folder / "mapping.txt")
    items: dict[str, list[tuple[str, dict]]] = {}
    for split, stem in SPLIT_STEMS.items():
        text_file, label_file = folder / f"{stem}_text.txt", folder / f"{stem}_labels.txt"
        if not text_file.is_file() or not label_file.is_file():
            if text_file.is_file() or label_file.is_file():
                missing = label_file if text_file.is_file() else text_file
                log.warning("%s: missing, so the '%s' split is skipped", missing, split)
            continue
        texts = _lines(text_file)
        labels = _lines(label_file)
        if len(texts) != len(labels):
            raise InputError(
                f"{folder}: {text_file.name} has {len(texts)} lines but "
                f"{label_file.name} has {len(labels)}"
            )
        rows = []
        for n, (text, label) in enumerate(zip(texts, labels), start=1):
            if not label.strip().lstrip("-").isdigit():
                raise InputError(f"{label_file}, line {n}: label {label!r} is not an integer")
            rows.append((f"{text_file.name} line {n}", {"text": text, "label": int(label)}))
        items[split] = rows
    if not items:
        raise InputError(f"{folder}: no '{{split}}_text.txt' + '{{split}}_labels.txt' pairs found")
    return Labelled(items, names, str(folder))


def _mapping(mapping: Path) -> list[str]:
    if not mapping.is_file():
        raise InputError(
            f"{mapping.parent}: a TweetEval folder needs mapping.txt (lines 'index<TAB>name')"
        )
    names: dict[int, str] = {}
    for n, line in enumerate(mapping.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        index, sep, name = line.rstrip("\r").partition("\t")
        if not sep or not index.strip().isdigit():
            raise InputError(f"{mapping}, line {n}: expected 'index<TAB>name', got {line!r}")
        names[int(index)] = name.strip()
    if sorted(names) != list(range(len(names))):
        raise InputError(f"{mapping}: indexes must be 0..{len(names) - 1}, got {sorted(names)}")
    return [names[i] for i in range(len(names))]


def _lines(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


LABELLED = LabelledFormat(
    name="tweeteval",
    suffixes=(),  # a folder
    read=read_tweeteval,
    summary="a TweetEval task folder: {split}_text.txt, {split}_labels.txt, mapping.txt",
    folder=True,
)
