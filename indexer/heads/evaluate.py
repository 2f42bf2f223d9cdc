"""Score a saved head on one labelled split: the metric plus per-class or per-type detail.

Labels are matched to the head's by name; reading the data is `data`'s job.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from indexer.config import MAX_POSITIONS
from indexer.encode.model_facts import usable_length
from indexer.errors import InputError
from indexer.heads.base import Example, HeadType
from indexer.heads.data import HeadData
from indexer.heads.features import check_lengths
from indexer.heads.inference import model_logits, pad_id_of, score_logits
from indexer.heads.predict import load_model_dir


def evaluate_head(
    model_dir: str | Path,
    data: HeadData,
    split: str = "test",
    batch_size: int = 64,
    decode: str = "bio",
) -> dict:
    """Score the head in `model_dir` on `data.splits[split]`.

    Args:
        decode: a tagger's decoding: "bio" for the most probable valid BIO sequence, "argmax"
            per word (ignored for a classifier).
    Returns:
        {"split", "examples", "metric", <metric>, ...full metrics}; a tagger's also "decode".
    """
    kind, model, tokenizer = load_model_dir(model_dir)
    if kind.name != data.task:
        raise InputError(
            f"{model_dir} is a {kind.name} head but the data were read for {data.task}"
        )
    if split not in data.splits:
        raise InputError(f"no '{split}' split in the data; have {', '.join(data.splits)}")
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    examples = [_relabel(kind, e, data.label_names, names) for e in data.splits[split]]
    encoded = kind.encode(tokenizer, examples)
    check_lengths({split: encoded}, min(MAX_POSITIONS, usable_length(model, tokenizer).limit))
    logits = model_logits(kind, model, encoded, pad_id_of(tokenizer), batch_size)
    options = {"decode": decode} if kind.decodes else {}
    extra = kind.score_options(model, examples, Path(model_dir))  # a blended pair head's cosines
    scores = score_logits(kind, logits, examples, encoded, names, **options, **extra)
    return {"split": split, "examples": len(examples), "metric": kind.metric, **options, **scores}


def _relabel(
    kind: HeadType, example: Example, data_names: list[str], model_names: list[str]
) -> Example:
    """`example` with its label ids (field `kind.label_key`: one id or a tuple) re-indexed from
    the data's label list to the head's."""
    lookup = {name: i for i, name in enumerate(model_names)}

    def one(label_id: int) -> int:
        name = data_names[label_id]
        if name not in lookup:
            raise InputError(
                f"{example.id}: label '{name}' is not one of the head's labels {model_names}"
            )
        return lookup[name]

    value = getattr(example, kind.label_key)
    new = tuple(one(t) for t in value) if isinstance(value, tuple) else one(value)
    changes: dict[str, Any] = {kind.label_key: new}  # a field of the type's example class
    return replace(example, **changes)
