"""Run a head over an encoded split and score it: logits in, labels and metrics out.

Logits are kept per example: (labels,) for a classifier, (words, labels) for NER, one row
per word that has a first subword (words in index order). Does not train.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from indexer.heads.data import Example, TokenExample
from indexer.heads.features import Encoded, collate, sorted_batches
from indexer.heads.labels import decode_bio
from indexer.heads.metrics import entity_f1, macro_f1
from indexer.heads.sentence import sequence_logits


def pad_id_of(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


@torch.inference_mode()
def run_batches(
    fn: Callable[[dict], torch.Tensor],
    encoded: Encoded,
    pad_id: int,
    batch_size: int,
) -> list[torch.Tensor]:
    """Apply `fn` to length-sorted batches; return one output per example, in input order.

    `fn` takes a collated batch and returns (batch, ...) or (batch, seq, ...) tensors; for
    NER the rows at each example's first-subword positions are kept.
    """
    out: list[torch.Tensor | None] = [None] * len(encoded)
    for index in sorted_batches(encoded.lengths, batch_size):
        batch = collate(encoded, index, pad_id, with_labels=False)
        result = fn(batch).float()
        for j, i in enumerate(index):
            if encoded.word_positions is None:
                out[i] = result[j]
            else:
                positions = encoded.word_positions[i]
                rows = [positions[w] for w in sorted(positions)]
                out[i] = result[j, rows]
    return out  # type: ignore[return-value]


def model_logits(model, encoded: Encoded, pad_id: int, batch_size: int) -> list[torch.Tensor]:
    """Per-example logits of a full AutoModelFor... head (eval mode); a sentence classifier
    pools as its config says (`sentence.sequence_logits`)."""
    model.eval()
    if encoded.word_positions is None:
        return run_batches(lambda b: sequence_logits(model, b), encoded, pad_id, batch_size)
    return run_batches(lambda b: model(**b).logits, encoded, pad_id, batch_size)


def word_predictions(logits: torch.Tensor, example: TokenExample, encoded: Encoded, i: int,
                     label_names: Sequence[str], decode: str = "bio") -> list[int | None]:
    """Label id per word of example `i` (None for a word with no subword token).

    decode "bio": the most probable valid BIO sequence; "argmax": each word on its own.
    """
    positions = encoded.word_positions[i]  # type: ignore[index]
    if decode == "bio":
        rows = decode_bio(torch.log_softmax(logits.float(), dim=-1).numpy(), label_names)
    else:
        rows = [int(x) for x in logits.argmax(-1)] if len(positions) else []
    preds: list[int | None] = [None] * len(example.tokens)
    for row, w in enumerate(sorted(positions)):
        preds[w] = rows[row]
    return preds


def score_logits(
    logits: Sequence[torch.Tensor],
    examples: Sequence[Example],
    encoded: Encoded,
    label_names: Sequence[str],
    decode: str = "bio",
) -> dict:
    """macro_f1 (classifier) or entity_f1 (NER) of these logits against the examples' labels.

    NER words are decoded as `decode` says (see `word_predictions`); a word with no subword
    token is predicted `O`.
    """
    if not examples:
        raise ValueError("nothing to score")
    if not isinstance(examples[0], TokenExample):
        pred = [int(x.argmax()) for x in logits]
        return macro_f1([e.label for e in examples], pred, label_names)  # type: ignore[union-attr]
    gold_tags, pred_tags = [], []
    for i, (x, example) in enumerate(zip(logits, examples)):
        assert isinstance(example, TokenExample)
        gold_tags.append([label_names[t] for t in example.tags])
        pred_tags.append(
            ["O" if p is None else label_names[p]
             for p in word_predictions(x, example, encoded, i, label_names, decode)]
        )
    return entity_f1(gold_tags, pred_tags)


def probabilities(logits: torch.Tensor) -> np.ndarray:
    return torch.softmax(logits.float(), dim=-1).numpy()
