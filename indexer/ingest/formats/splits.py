"""One JSON document holding a labelled data set: `{"label_names": [...], "train": [...],
"validation": [...], "test": [...]}` (every key optional but one split), or a bare list of
items (one split). Read only when asked for (`--format splits`): a `.json` file is JSON Lines
(see the package). Does not check items (the head types do).
"""

from __future__ import annotations

import json
from pathlib import Path

from indexer.errors import InputError
from indexer.ingest.formats.base import UNSPLIT, Labelled, LabelledFormat

SPLITS = ("train", "validation", "test")


def read_splits(path: Path) -> Labelled:
    """The document's splits and label list; an item's id is its `id`, else `split[i]`.

    Raises:
        InputError: not JSON, an unknown key, a split that is not a list, `label_names`
            that are not strings, or no split.
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON: {exc}") from None
    if isinstance(doc, list):
        return Labelled({UNSPLIT: _ids("", doc)}, None, str(path))
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected an object with 'label_names', 'train', 'validation'")
    unknown = set(doc) - {"label_names", *SPLITS}
    if unknown:
        raise InputError(
            f"{path}: unknown key(s) {sorted(unknown)}; valid keys: label_names, "
            "train, validation, test"
        )
    names = doc.get("label_names")
    if names is not None and (
        not isinstance(names, list) or not all(isinstance(n, str) for n in names)
    ):
        raise InputError(f"{path}: 'label_names' must be a list of strings")
    items = {}
    for split in SPLITS:
        if split in doc:
            if not isinstance(doc[split], list):
                raise InputError(f"{path}: '{split}' must be a list of items")
            items[split] = _ids(split, doc[split])
    if not items:
        raise InputError(f"{path}: no 'train', 'validation' or 'test' list")
    return Labelled(items, names, str(path))


def _ids(prefix: str, items: list) -> list[tuple[str, dict]]:
    out = []
    for i, item in enumerate(items):
        default = f"{prefix}[{i}]" if prefix else f"row {i}"
        item_id = item.get("id", default) if isinstance(item, dict) else default
        out.append((str(item_id), item))
    return out


LABELLED = LabelledFormat(
    name="splits",
    suffixes=(),  # asked for by name: `.json` is JSON Lines
    read=read_splits,
    summary="one JSON document {label_names, train, validation, test} (--format splits)",
)
