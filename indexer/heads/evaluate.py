"""Score a saved head on one labelled split: the metric plus per-class or per-type detail.

Labels are matched to the head's by name; reading the data is `data`'s job.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from indexer.config import MAX_POSITIONS
from indexer.errors import InputError
from indexer.heads.data import HeadData, SentenceExample, TokenExample
from indexer.heads.features import check_lengths, encode_examples
from indexer.heads.inference import model_logits, pad_id_of, score_logits
from indexer.heads.metrics import METRIC_NAMES
from indexer.heads.predict import load_model_dir


def evaluate_head(model_dir: str | Path, data: HeadData, split: str = "test", batch_size: int = 64,
                  decode: str = "bio") -> dict:
    """Score the head in `model_dir` on `data.splits[split]`.

    `decode` (NER): "bio" for the most probable valid BIO sequence, "argmax" per word.

    Returns:
        {"split", "examples", "metric", <metric>, ...full metrics}.
    """
    task, model, tokenizer = load_model_dir(model_dir)
    if task != data.task:
        raise InputError(f"{model_dir} is a {task} head but the data were read for {data.task}")
    if split not in data.splits:
        raise InputError(f"no '{split}' split in the data; have {', '.join(data.splits)}")
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    examples = [_relabel(e, data.label_names, names) for e in data.splits[split]]
    encoded = encode_examples(tokenizer, examples)
    check_lengths({split: encoded}, min(MAX_POSITIONS, model.config.max_position_embeddings))
    logits = model_logits(model, encoded, pad_id_of(tokenizer), batch_size)
    scores = score_logits(logits, examples, encoded, names, decode)
    metric = METRIC_NAMES[task]
    extra = {"decode": decode} if task == "ner" else {}
    return {"split": split, "examples": len(examples), "metric": metric, **extra, **scores}


def _relabel(example, data_names: list[str], model_names: list[str]):
    lookup = {name: i for i, name in enumerate(model_names)}

    def one(label_id: int) -> int:
        name = data_names[label_id]
        if name not in lookup:
            raise InputError(f"{example.id}: label '{name}' is not one of the head's labels {model_names}")
        return lookup[name]

    if isinstance(example, SentenceExample):
        return replace(example, label=one(example.label))
    assert isinstance(example, TokenExample)
    return replace(example, tags=tuple(one(t) for t in example.tags))
