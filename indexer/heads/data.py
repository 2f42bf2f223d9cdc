"""Readers for labelled splits: JSON, JSONL, Parquet, CoNLL column files, TweetEval folders,
pair CSV and STS-B files (`pair_files`).

Returns examples with label ids and the label list; what an item holds and which labels are
valid is the head type's (`heads.types`). Does not tokenize.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.errors import InputError
from indexer.heads.pair_files import read_pair_table
from indexer.heads.registry import head_type, head_types

if TYPE_CHECKING:
    from indexer.heads.base import Example

log = logging.getLogger(__name__)

Task = str  # a head type's name (`heads.registry`)
FORMATS = ("auto", "json", "jsonl", "parquet", "conll", "tweeteval", "csv", "stsb")
SPLITS = ("train", "validation", "test")
_TWEETEVAL_SPLITS = {"train": "train", "validation": "val", "test": "test"}
_UNSPLIT = "_"  # a file that holds one split, named by the option that pointed to it


@dataclass
class HeadData:
    """Labelled splits for one task. `splits` has `train` and/or `validation`, maybe `test`."""

    task: Task
    label_names: list[str]
    splits: dict[str, list[Example]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # split -> where it was read
    reviewed: dict | None = None  # human labels added to train (`review.training.add_reviewed`)


@dataclass
class _Raw:
    items: dict[str, list[tuple[str, dict]]]  # split -> [(id, item)]
    label_names: list[str] | None
    source: str


def detect_format(path: Path) -> str:
    """Pick a format from the path: folder -> tweeteval; .json/.jsonl/.parquet/.csv; else conll."""
    if path.is_dir():
        return "tweeteval"
    suffix = path.suffix.lower()
    if suffix == ".json":
        return "json"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".csv", ".tsv"):
        return "csv"  # pairs; STS-B's tab-separated .csv files are recognised inside
    return "conll"


def read_head_data(
    task: Task,
    data: str | Path,
    validation: str | Path | None = None,
    test: str | Path | None = None,
    fmt: str = "auto",
    single_split: str = "train",
) -> HeadData:
    """Read the splits for `task`.

    Args:
        task: a head type's name: "classifier" (items `{text, label}`), "pair" (items
            `{text_a, text_b, label or score}`) or "ner" (items
            `{tokens, tags}`).
        data: a file holding the splits (JSON, TweetEval folder), or the train split file.
        validation: a file for the validation split (a JSON file gives its `validation`).
        test: a file for the test split (a JSON file gives its `test`).
        fmt: one of FORMATS; "auto" guesses each file's format from its path.
        single_split: the split that `data` is when it holds only one (train, or the split
            being evaluated).
    Returns:
        HeadData with label ids resolved against one label list.
    """
    if fmt not in FORMATS:
        raise InputError(f"unknown format '{fmt}'; choose one of {', '.join(FORMATS)}")
    raws: dict[str, _Raw] = {}
    primary = _read_any(Path(data), fmt, task)
    if _UNSPLIT in primary.items:
        raws[single_split] = _Raw({single_split: primary.items[_UNSPLIT]}, None, primary.source)
    else:
        for split in SPLITS:
            if split in primary.items:
                raws[split] = _Raw({split: primary.items[split]}, None, primary.source)
    for split, path in (("validation", validation), ("test", test)):
        if path is None:
            continue
        raw = _read_any(Path(path), fmt, task)
        items = raw.items.get(_UNSPLIT, raw.items.get(split))
        if items is None:
            raise InputError(
                f"{raw.source}: has no '{split}' split (it has {', '.join(raw.items)})"
            )
        raws[split] = _Raw({split: items}, raw.label_names, raw.source)
        if raw.label_names is not None and primary.label_names is None:
            primary.label_names = raw.label_names
    label_names = _label_list(task, primary.label_names, raws)
    out = HeadData(task=task, label_names=label_names)
    for split, raw in raws.items():
        out.splits[split] = [_to_example(task, i, item, label_names, raw.source) for i, item in raw.items[split]]
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


def _read_any(path: Path, fmt: str, task: Task) -> _Raw:
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    kind = detect_format(path) if fmt == "auto" else fmt
    if kind not in head_type(task).formats:
        readers = [k.name for k in head_types() if kind in k.formats]
        raise InputError(f"{path}: format '{kind}' holds no {task} items; use "
                         f"{' or '.join(f'train {r}' for r in readers)} (or pass --format)")
    if kind == "tweeteval":
        return _read_tweeteval(path)
    if path.is_dir():
        raise InputError(f"{path}: is a folder; format '{kind}' needs a file")
    if kind == "json":
        return _read_json(path)
    if kind == "jsonl":
        return _read_jsonl(path)
    if kind == "parquet":
        return _read_parquet(path)
    if kind in ("csv", "stsb"):
        return _Raw({_UNSPLIT: read_pair_table(path, kind)}, None, str(path))
    return _read_conll(path)


def _read_json(path: Path) -> _Raw:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON: {exc}") from None
    if isinstance(doc, list):
        return _Raw({_UNSPLIT: _ids("", doc)}, None, str(path))
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected an object with 'label_names', 'train', 'validation'")
    unknown = set(doc) - {"label_names", *SPLITS}
    if unknown:
        raise InputError(
            f"{path}: unknown key(s) {sorted(unknown)}; valid keys: label_names, train, validation, test"
        )
    names = doc.get("label_names")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise InputError(f"{path}: 'label_names' must be a list of strings")
    items = {}
    for split in SPLITS:
        if split in doc:
            if not isinstance(doc[split], list):
                raise InputError(f"{path}: '{split}' must be a list of items")
            items[split] = _ids(f"{split}", doc[split])
    if not items:
        raise InputError(f"{path}: no 'train', 'validation' or 'test' list")
    return _Raw(items, names, str(path))


def _ids(prefix: str, items: list) -> list[tuple[str, dict]]:
    out = []
    for i, item in enumerate(items):
        default = f"{prefix}[{i}]" if prefix else f"row {i}"
        item_id = item.get("id", default) if isinstance(item, dict) else default
        out.append((str(item_id), item))
    return out


def _read_jsonl(path: Path) -> _Raw:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}, line {n}: not valid JSON: {exc}") from None
            item_id = item.get("id", f"line {n}") if isinstance(item, dict) else f"line {n}"
            rows.append((str(item_id), item))
    return _Raw({_UNSPLIT: rows}, None, str(path))


def _read_parquet(path: Path) -> _Raw:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read as Parquet: {exc}") from None
    return _Raw({_UNSPLIT: _ids("", rows)}, None, str(path))


def _read_conll(path: Path) -> _Raw:
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
                raise InputError(f"{path}, line {n}: expected 'token ... tag' columns, got {line.strip()!r}")
            if not tokens:
                start = n
            tokens.append(cols[0])
            tags.append(cols[-1])
    if tokens:
        sentences.append((f"line {start}", {"tokens": tokens, "tags": tags}))
    if not sentences:
        raise InputError(f"{path}: no sentences found (expected CoNLL columns: token ... tag)")
    return _Raw({_UNSPLIT: sentences}, None, str(path))


def _read_tweeteval(folder: Path) -> _Raw:
    mapping = folder / "mapping.txt"
    if not mapping.is_file():
        raise InputError(f"{folder}: a TweetEval folder needs mapping.txt (lines 'index<TAB>name')")
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
    items: dict[str, list[tuple[str, dict]]] = {}
    for split, stem in _TWEETEVAL_SPLITS.items():
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
                f"{folder}: {text_file.name} has {len(texts)} lines but {label_file.name} has {len(labels)}"
            )
        rows = []
        for n, (text, label) in enumerate(zip(texts, labels), start=1):
            if not label.strip().lstrip("-").isdigit():
                raise InputError(f"{label_file}, line {n}: label {label!r} is not an integer")
            rows.append((f"{text_file.name} line {n}", {"text": text, "label": int(label)}))
        items[split] = rows
    if not items:
        raise InputError(f"{folder}: no '{{split}}_text.txt' + '{{split}}_labels.txt' pairs found")
    return _Raw(items, [names[i] for i in range(len(names))], str(folder))


def _lines(path: Path) -> list[str]:
    # split on "\n" only: tweets may hold U+2028 and similar, which str.splitlines breaks on
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


# ---- labels -------------------------------------------------------------------------


def _label_list(task: Task, names: list[str] | None, raws: dict[str, _Raw]) -> list[str]:
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
                reason = kind.missing_label(item) if isinstance(item, dict) else "expected an object"
                if reason:
                    raise InputError(f"{where}: {reason}")
                values = kind.item_labels(item, where)
                seen.update(v for v in values if isinstance(v, (str, int)) and not isinstance(v, bool))
    if any(isinstance(v, int) for v in seen) and not all(isinstance(v, int) for v in seen):
        raise InputError("labels mix integers and names; use one kind, or give label_names")
    return kind.label_names_from(seen)


def _to_example(task: Task, item_id: str, item: object, names: list[str], source: str) -> Example:
    where = f"{source}, {item_id}"
    if not isinstance(item, dict):
        raise InputError(f"{where}: expected an object, got {type(item).__name__}")
    return head_type(task).example(item_id, item, names, where)
