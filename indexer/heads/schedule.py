"""How long and in what steps a head trains: the warm-up ratios (the schedule itself is
`indexer.training.schedule`), the batch size and max length chosen from the data, and the
epoch rule (a fixed count, or `auto`: until the validation score stalls for `patience`
epochs). Pure functions; does not touch a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from indexer.config import MAX_POSITIONS
from indexer.heads.features import Encoded, check_lengths

WARMUP_RATIO = 0.1  # a fixed --epochs N: the seeds' recipe, warm-up over 10 % of its steps
AUTO_WARMUP_RATIO = 0.06  # --epochs auto: 6 % of the --max-epochs horizon (RoBERTa's GLUE recipe)
DEFAULT_PATIENCE = 2
DEFAULT_MAX_EPOCHS = 20
LENGTH_STEP = 32  # --max-length auto rounds the longest example up to a multiple of this
STEPS_PER_EPOCH = 250  # --batch-size auto: the largest power of two that still gives this many
MIN_AUTO_BATCH = 8


def auto_batch_size(n_train: int, largest: int) -> int:
    """Examples per step for `n_train` training examples: the largest power of two, between
    MIN_AUTO_BATCH and the head type's `largest`, that keeps at least STEPS_PER_EPOCH steps
    per epoch (small sets take small steps, so an epoch still makes enough updates)."""
    size = MIN_AUTO_BATCH
    while size * 2 <= largest and n_train / (size * 2) >= STEPS_PER_EPOCH:
        size *= 2
    return min(size, largest)


def auto_max_length(encoded: dict[str, Encoded], limit: int = MAX_POSITIONS) -> tuple[int, str]:
    """The smallest multiple of LENGTH_STEP (at most `limit`) that fits every example of
    every split.

    Args:
        encoded: the tokenised splits.
        limit: the model's usable length (at most MAX_POSITIONS).
    Returns:
        (length, a note naming the longest example).
    Raises:
        InputError: some example is longer than `limit` (named, as `check_lengths` does).
    """
    check_lengths(encoded, limit, limit)
    longest, where = 0, None
    for split, enc in encoded.items():
        if len(enc):
            i = int(np.argmax(enc.lengths))
            if enc.lengths[i] > longest:
                longest, where = int(enc.lengths[i]), f"{split} {enc.ids[i]}"
    length = min(limit, max(LENGTH_STEP, math.ceil(longest / LENGTH_STEP) * LENGTH_STEP))
    return length, f"auto: {length}, the longest example is {longest} tokens ({where})"


@dataclass
class EpochRule:
    """When training stops. `patience` None: after exactly `limit` epochs."""

    limit: int
    patience: int | None = None

    def stop_after(self, epoch: int, best_epoch: int) -> str | None:
        """Why training stops after `epoch` (1-based), or None to go on."""
        if self.patience is not None and epoch - best_epoch >= self.patience:
            return "patience"
        if epoch >= self.limit:
            return "max_epochs" if self.patience is not None else "epochs"
        return None

    def remaining(self, epoch: int, best_epoch: int) -> tuple[int, int]:
        """(fewest, most) epochs still to run after `epoch`."""
        most = self.limit - epoch
        if self.patience is None:
            return most, most
        return min(most, max(0, self.patience - (epoch - best_epoch))), most
