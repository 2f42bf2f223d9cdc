"""Labelled splits for a head: files and folders read through the ingest format registry
(`indexer.ingest.formats.read_labelled`: JSON Lines, Parquet, CSV pairs, STS-B, CoNLL,
TweetEval, a JSON document of splits), then checked and turned into examples by the head
type (`heads.base.HeadType`): label ids resolved against one label list. Does not tokenize.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.errors import InputError
from indexer.heads.registry import head_type, head_types
from indexer.ingest.formats import AUTO, labelled_format, read_labelled
from indexer.ingest.formats.base import UNSPLIT, Labelled

if TYPE_CHECKING:
    from indexer.heads.base import Example

Task = str  # a head type's name (`heads.registry`)
SPLITS = ("train", "validation", "test")


@dataclass
class HeadData:
    """Labelled splits for one task. `splits` has `train` and/or `validation`, maybe `test`."""

    task: Task
    label_names: list[str]
    splits: dict[str, list[Example]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # split -> where it was read
    reviewed: dict | None = None  # human labels added to train (`review.training.add_reviewed`)


def read_head_data(
    task: Task,
    data: str | Path,
    validation: str | Path | None = None,
    test: str | Path | None = None,
    fmt: str = AUTO,
    single_split: str = "train",
) -> HeadData:
    """Read the splits for `task`.

    Args:
        task: a head type's name: "classifier" (items `{text, label}`), "pair" (items
            `{text_a, text_b, label or score}`) or "ner" (items
            `{tokens, tags}`).
        data: a file holding the splits (a `splits` document, a TweetEval folder), or the
            train split file.
        validation: a file for the validation split (a `splits` document gives its
            `validation`).
        test: a file for the test split (a `splits` document gives its `test`).
        fmt: a labelled format (`indexer.ingest.formats.labelled_format_names`); "auto"
            picks each file's format from its path.
        single_split: the split that `data` is when it holds only one (train, or the split
            being evaluated).
    Returns:
        HeadData with label ids resolved against one label list.
    """
    raws: dict[str, Labelled] = {}
    primary = _read_any(Path(data), fmt, task)
    if UNSPLIT in primary.items:
        raws[single_split] = Labelled({single_split: primary.items[UNSPLIT]}, None, primary.source)
    else:
        for split in SPLITS:
            if split in primary.items:
                raws[split] = Labelled({split: primary.items[split]}, None, primary.source)
    for split, path in (("validation", validation), ("test", test)):
        if path is None:
            continue
        raw = _read_any(Path(path), fmt, task)
        items = raw.items.get(UNSPLIT, raw.items.get(split))
        if items is None:
            raise InputError(
                f"{raw.source}: has no '{split}' split (it has {', '.join(raw.items)})"
            )
        raws[split] = Labelled({split: items}, raw.label_names, raw.source)
        if raw.label_names is not None and primary.label_names is None:
            primary.label_names = raw.label_names
    label_names = _label_list(task, primary.label_names, raws)
    out = HeadData(task=task, label_names=label_names)
    for split, raw in raws.items():
        out.splits[split] = [
            _to_example(task, i, item, label_names, raw.source) for i, item in raw.items[split]
        ]
        out.sources[split] = raw.source
        if not out.splits[split]:
            raise InputError(f"{raw.source}: the '{split}' split has no examples")
    return out


def require_splits(data: HeadData, *splits: str) -> None:
    """Raise InputError naming the option to use when a needed split is missing."""
    for split in splits:
        if split not in data.splits:
            option = "--data" if split == "train" else f"--{split}"
            raise InputError(
                f"no '{split}' split: give one with {option} PATH "
                f"(have: {', '.join(data.splits) or 'none'})"
            )


# ---- one file or folder -------------------------------------------------------------


def _read_any(path: Path, fmt: str, task: Task) -> Labelled:
    """The items of one file or folder, refused when its format holds no `task` items."""
    kind = labelled_format(path, fmt)
    if kind.name not in head_type(task).formats:
        readers = [k.name for k in head_types() if kind.name in k.formats]
        raise InputError(
            f"{path}: format '{kind.name}' holds no {task} items; use "
            f"{' or '.join(f'train {r}' for r in readers)} (or pass --format)"
        )
    guessed = fmt == AUTO and path.suffix.lower() == ".json"
    try:
        raw = read_labelled(path, kind.name)
    except InputError as exc:
        if guessed:
            raise InputError(f"{exc} ({_JSON_LINES})") from None
        raise
    rows = raw.items.get(UNSPLIT, [])
    if guessed and len(rows) == 1 and set(rows[0][1]) <= {"label_names", *SPLITS}:
        raise InputError(f"{path}: holds one document of splits; {_JSON_LINES}")
    return raw


_JSON_LINES = (
    "a .json file is read as JSON Lines, one item a line; a JSON document of "
    "label_names and splits is read with --format splits"
)


# ---- labels -------------------------------------------------------------------------


def _label_list(task: Task, names: list[str] | None, raws: dict[str, Labelled]) -> list[str]:
    kind = head_type(task)
    if names is not None:
        if len(set(names)) != len(names):
            raise InputError(f"label_names has duplicates: {names}")
        kind.check_label_names(names)
        return list(names)
    seen: set = set()
    for raw in raws.values():
        for split_items in raw.items.values():
            for item_id, item in split_items:
                where = f"{raw.source}, {item_id}"
                reason = (
                    kind.missing_label(item) if isinstance(item, dict) else "expected an object"
                )
                if reason:
                    raise InputError(f"{where}: {reason}")
                values = kind.item_labels(item, where)
                seen.update(
                    v for v in values if isinstance(v, (str, int)) and not isinstance(v, bool)
                )
    if any(isinstance(v, int) for v in seen) and not all(isinstance(v, int) for v in seen):
        raise InputError("labels mix integers and names; use one kind, or give label_names")
    return kind.label_names_from(seen)


def _to_example(task: Task, item_id: str, item: object, names: list[str], source: str) -> Example:
    where = f"{source}, {item_id}"
    if not isinstance(item, dict):
        raise InputError(f"{where}: expected an object, got {type(item).__name__}")
    return head_type(task).example(item_id, item, names, where)
