"""Reviewed documents as training examples: a head's human labels from the store added to the
train split of labelled data (never to validation or test), with what was added and left out
for the run receipt. Does not train."""

from __future__ import annotations

from pathlib import Path

from indexer.errors import InputError
from indexer.heads.base import examples_of
from indexer.heads.data import HeadData
from indexer.heads.registry import capabilities
from indexer.store import Store


def add_reviewed(data: HeadData, store_path: str | Path, head: str) -> HeadData:
    """Append `head`'s reviewed documents to `data.splits["train"]` and record them in
    `data.reviewed` (the receipt's `reviewed`).

    Left out, and counted: documents whose text changed since the person labelled them
    (`stale`), and those whose text is also in the validation or test split (`in_eval`, so
    that no score reads a training example).

    Args:
        data: classifier splits with a train split.
        store_path: the store the labels were imported into (read at its live file).
        head: the head name the labels were imported for.
    Returns:
        `data`, changed in place.
    Raises:
        InputError: not a classifier, no such head or labels outside the data's label list.
    """
    if not capabilities(data.task).reviewable:
        raise InputError(f"--reviewed adds classifier labels; '{data.task}' data take none")
    from indexer.heads.classifier.head_type import SentenceExample

    with Store(store_path, read_only=True, snapshot=False) as store:
        if not store.reviews.has_tables() or store.reviews.head_info(head) is None:
            raise InputError(
                f"{store_path}: no reviewed labels of head '{head}'; export, label "
                f"and import some first (`bertindex review export --head {head}`)"
            )
        rows = store.reviews.reviewed_documents(head)
    unknown = sorted({r[3] for r in rows} - set(data.label_names))
    if unknown:
        raise InputError(
            f"reviewed labels {unknown} of head '{head}' are not in the data's labels "
            f"{data.label_names}; train with data that share the head's labels"
        )
    held_out = {
        e.text
        for split in ("validation", "test")
        for e in examples_of(
            SentenceExample,
            data.splits.get(split, []),
            f"--reviewed adds classifier labels to '{data.task}' data",
        )
    }
    added, stale, in_eval = [], 0, 0
    for doc_id, external_id, text, label, fresh in rows:
        if not fresh:
            stale += 1
        elif text in held_out:
            in_eval += 1
        else:
            added.append(
                SentenceExample(f"reviewed:{external_id}", text, data.label_names.index(label))
            )
    data.splits["train"] = [*data.splits.get("train", []), *added]
    data.reviewed = {
        "head": head,
        "store": str(store_path),
        "added_to_train": len(added),
        "stale": stale,
        "in_eval": in_eval,
    }
    return data
