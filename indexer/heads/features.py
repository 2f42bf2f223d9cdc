"""Tokenised splits (`Encoded`, made by a head type's `encode`), the over-long refusal, and
length-sorted, padded batches.

Does not tokenise or run the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from indexer.config import MAX_POSITIONS
from indexer.errors import InputError

SHOW_TOO_LONG = 5  # over-long examples named in the refusal
SORT_POOL = 50  # training batches drawn from length-sorted pools of SORT_POOL batches


@dataclass
class Encoded:
    """One split, tokenised. `labels[i]` is an int (classifier), a float (a regression pair
    head) or one id per token (NER)."""

    ids: list[str]
    input_ids: list[list[int]]
    labels: list
    word_positions: list[dict[int, int]] | None = None  # NER: word -> first subword position
    token_type_ids: list[list[int]] | None = None  # a pair: 0 for text_a, 1 for text_b

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.input_ids), dtype=np.int64, count=len(self))


def check_lengths(splits: dict[str, Encoded], max_length: int, limit: int = MAX_POSITIONS) -> None:
    """Refuse examples longer than `max_length` tokens in any split, before any training.

    `limit`: the model's usable length, the most `--max-length` can be raised to.

    Raises:
        InputError: how many are too long per split, the first few ids and lengths, the
            longest, and the two ways out.
    """
    counts: list[str] = []
    shown: list[str] = []
    longest = 0
    for split, encoded in splits.items():
        lengths = encoded.lengths
        too_long = np.flatnonzero(lengths > max_length)
        if too_long.size == 0:
            continue
        counts.append(f"{too_long.size} {split}")
        longest = max(longest, int(lengths.max()))
        shown += [
            f"{encoded.ids[i]} ({lengths[i]} tokens)"
            for i in too_long[: SHOW_TOO_LONG - len(shown)]
        ]
    if not counts:
        return
    total = sum(int(c.split()[0]) for c in counts)
    more = f" and {total - len(shown)} more" if total > len(shown) else ""
    if longest <= limit:
        raise_to = f"raise --max-length to at least {longest} (at most {limit})"
    else:
        raise_to = f"raise --max-length (at most {limit}, which is still too short for {longest})"
    raise InputError(
        f"{' + '.join(counts)} example(s) are longer than --max-length {max_length} after "
        f"tokenisation: {', '.join(shown)}{more}. Nothing is truncated; either {raise_to}, "
        f"or split these inputs into shorter ones"
    )


def sorted_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Batches of indexes sorted by length, longest first (for scoring)."""
    order = np.argsort(-lengths, kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def training_batches(
    lengths: np.ndarray, batch_size: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Shuffled batches of similar lengths: shuffle, sort within pools, shuffle the batches.

    Every index appears exactly once per epoch.
    """
    order = rng.permutation(len(lengths))
    pool = batch_size * SORT_POOL
    batches: list[np.ndarray] = []
    for start in range(0, len(order), pool):
        chunk = order[start : start + pool]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def collate(
    encoded: Encoded, index: Sequence[int] | np.ndarray, pad_id: int, with_labels: bool = True
) -> dict:
    """Right-padded tensors for the examples at `index`.

    Returns:
        {"input_ids", "attention_mask"} of shape (batch, longest), "token_type_ids" when the
        split has them (pairs), plus "labels": (batch,) for a classifier (float for a
        regression head), (batch, longest) with -100 on padding for NER.
    """
    rows = [encoded.input_ids[i] for i in index]
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for j, row in enumerate(rows):
        input_ids[j, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[j, : len(row)] = 1
    batch = {"input_ids": input_ids, "attention_mask": mask}
    if encoded.token_type_ids is not None:  # padding is type 0, as the tokenizer pads
        types = torch.zeros((len(rows), width), dtype=torch.long)
        for j, i in enumerate(index):
            types[j, : len(rows[j])] = torch.tensor(encoded.token_type_ids[i], dtype=torch.long)
        batch["token_type_ids"] = types
    if with_labels:
        first = encoded.labels[index[0]]
        if isinstance(first, list):
            labels = torch.full((len(rows), width), -100, dtype=torch.long)  # -100: padding
            for j, i in enumerate(index):
                labels[j, : len(encoded.labels[i])] = torch.tensor(
                    encoded.labels[i], dtype=torch.long
                )
        else:  # a class id, or a float target (a regression head)
            dtype = torch.float32 if isinstance(first, float) else torch.long
            labels = torch.tensor([encoded.labels[i] for i in index], dtype=dtype)
        batch["labels"] = labels
    return batch
