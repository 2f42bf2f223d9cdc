"""Run a head over an encoded split: per-example logits in input order, scored by the head
type.

Logits are kept per example as the head type keeps them (`example_logits`): (labels,) for a
classifier, (words, labels) for a tagger. Does not train.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from indexer.heads.base import Example, HeadType
from indexer.heads.features import Encoded, collate, sorted_batches


def pad_id_of(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


@torch.inference_mode()
def model_logits(
    kind: HeadType, model, encoded: Encoded, pad_id: int, batch_size: int
) -> list[torch.Tensor]:
    """Per-example fp32 logits of a full `AutoModelFor...` head (put in eval mode), from
    length-sorted batches, in input order.

    Args:
        kind: the head's type (`logits` for a batch, `example_logits` for one example's rows).
    Returns:
        One tensor per example of `encoded`.
    """
    model.eval()
    out: list[torch.Tensor | None] = [None] * len(encoded)
    for index in sorted_batches(encoded.lengths, batch_size):
        batch = collate(encoded, index, pad_id, with_labels=False)
        result = kind.logits(model, batch).float()  # (B, C) or (B, L, C)
        for j, i in enumerate(index):
            out[i] = kind.example_logits(result[j], encoded, i)
    return out  # type: ignore[return-value]


def score_logits(
    kind: HeadType,
    logits: Sequence[torch.Tensor],
    examples: Sequence[Example],
    encoded: Encoded,
    label_names: Sequence[str],
    **options,
) -> dict:
    """The head type's metrics of these logits against the examples' labels.

    Args:
        options: the head type's scoring options (a tagger's `decode`).
    """
    if not examples:
        raise ValueError("nothing to score")
    return kind.score(logits, examples, encoded, label_names, **options)
