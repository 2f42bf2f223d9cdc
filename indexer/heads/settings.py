"""The settings of one head-training run (`TrainSettings`) and the recipe's constants; made
concrete for the data by `TrainSettings.resolve` (batch size, max length). Does not train.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from indexer.config import MAX_POSITIONS
from indexer.core.choices import HeadDtype, HeadPooling
from indexer.encode.model_facts import Length
from indexer.errors import InputError
from indexer.heads.base import HeadType
from indexer.heads.features import Encoded, check_lengths
from indexer.heads.registry import head_type
from indexer.heads.schedule import (
    DEFAULT_MAX_EPOCHS,
    DEFAULT_PATIENCE,
    STEPS_PER_EPOCH,
    EpochRule,
    auto_batch_size,
    auto_max_length,
)

DEFAULT_LR = 2e-5  # the seeds' recipe: a fixed --epochs
AUTO_LR = 5e-5  # --epochs auto (benchmarks/small_data_heads.py; docs/guides/heads.md)
DEFAULT_HEAD_ONLY_LR = 1e-3  # a freshly initialised head alone moves little at 2e-5
# --head-only feature pass: padded tokens per batch (benchmarks/head_feature_budget.py)
FEATURE_BATCH_TOKENS = 2048
FEATURE_MAX_WASTE = 0.05  # and at most 5 % padding per sequence


@dataclass(frozen=True)
class TrainSettings:
    """One training run. `task`: a head type's name (`heads.registry`). `epochs`
    "auto": until validation stalls for `patience` epochs, at most `max_epochs`; a number:
    exactly that many (the seeds' recipe). `lr` None: AUTO_LR with auto epochs, DEFAULT_LR
    (the seeds' 2e-5) with a fixed count, DEFAULT_HEAD_ONLY_LR with `head_only`. `batch_size`
    None: chosen by data size with auto epochs (`schedule.auto_batch_size`), else the head
    type's `default_batch_size` (32, 8 for a tagger). `max_length` "auto": the smallest multiple of
    32 that fits every example."""

    task: str
    base: Path
    out: Path
    head_only: bool = False
    epochs: int | Literal["auto"] = "auto"
    lr: float | None = None
    max_length: int | Literal["auto"] = "auto"
    batch_size: int | None = None  # None: see above (`resolve`)
    seed: int = 42
    threads: int | None = None
    dtype: HeadDtype = "fp32"
    pooling: HeadPooling = "auto"
    probe_epochs: int = 0
    patience: int = DEFAULT_PATIENCE  # epochs="auto" only
    max_epochs: int = DEFAULT_MAX_EPOCHS  # epochs="auto" only
    # after training, the head type's blend (`HeadType.blend`), if it has one: a pair head's
    # with the base encoder's cosine ("base"), with a bi-encoder fine-tuned on the same train
    # pairs ("tuned", `heads.pair.bi_encoder`), or none ("off")
    blend: Literal["base", "tuned", "off"] = "base"

    def __post_init__(self) -> None:
        _ = self.sentence_pooling  # refuses --pooling mean for NER before any work
        if self.probe_epochs and self.head_only:
            raise InputError(
                "--probe-epochs warms the head before a full fine-tune; it has no "
                "meaning with --head-only (use --epochs)"
            )
        if self.epochs != "auto" and (not isinstance(self.epochs, int) or self.epochs < 1):
            raise InputError(f"epochs must be 'auto' or a whole number >= 1, not {self.epochs!r}")
        if self.max_length != "auto" and (
            not isinstance(self.max_length, int) or not 8 <= self.max_length <= MAX_POSITIONS
        ):
            raise InputError(
                f"max length must be 'auto' or 8..{MAX_POSITIONS}, not {self.max_length!r}"
            )
        if self.patience < 1 or self.max_epochs < 1:
            raise InputError("patience and max epochs must be >= 1")

    @property
    def auto_epochs(self) -> bool:
        return self.epochs == "auto"

    @property
    def epoch_rule(self) -> EpochRule:
        if self.auto_epochs:
            return EpochRule(self.max_epochs, self.patience)
        return EpochRule(int(self.epochs))

    def resolve(
        self, encoded: dict[str, Encoded], length: Length | None = None
    ) -> tuple[TrainSettings, dict]:
        """These settings with `batch_size` and `max_length` made concrete for this data.

        Args:
            encoded: the tokenised splits.
            length: the base model's usable length (`model_facts.usable_length`; None: 512).
        Returns:
            (settings, {"batch_size": how it was chosen, "max_length": how it was chosen}).
        Raises:
            InputError: an example is longer than the given `max_length` (or than the model's
                usable length), or `max_length` exceeds that length (the real limit named).
        """
        limit = min(MAX_POSITIONS, length.limit) if length is not None else MAX_POSITIONS
        if self.max_length != "auto" and self.max_length > limit:
            raise InputError(
                f"--max-length {self.max_length} exceeds the usable length of "
                f"{self.base}: {limit} tokens ({length.why if length else ''}); "
                f"give at most {limit}, or leave it auto"
            )
        if self.max_length == "auto":
            max_length, length_rule = auto_max_length(encoded, limit)
        else:
            check_lengths(encoded, self.max_length, limit)
            max_length, length_rule = self.max_length, "given"
        n_train = len(encoded["train"]) if "train" in encoded else 0
        if self.batch_size is not None:
            batch_size, batch_rule = self.batch_size, "given"
        elif self.auto_epochs:
            batch_size = auto_batch_size(n_train, self.kind.default_batch_size)
            batch_rule = (
                f"auto: {n_train:,} training examples -> {batch_size} (largest power of "
                f"two up to {self.kind.default_batch_size} keeping >= {STEPS_PER_EPOCH} "
                "steps an epoch)"
            )
        else:
            batch_size = self.kind.default_batch_size
            batch_rule = f"the {self.task} default with a fixed --epochs"
        resolved = dataclasses.replace(self, batch_size=batch_size, max_length=max_length)
        return resolved, {"batch_size": batch_rule, "max_length": length_rule}

    @property
    def resolved_batch_size(self) -> int:
        """The batch size of resolved settings (`resolve`).

        Raises:
            ValueError: the settings are not resolved.
        """
        if self.batch_size is None:
            raise ValueError("training needs resolved settings (TrainSettings.resolve)")
        return self.batch_size

    @property
    def caches_features(self) -> bool:
        """Runs the frozen backbone once for a head-only stage (`head_only` or `probe_epochs`)."""
        return self.head_only or self.probe_epochs > 0

    @property
    def learning_rate(self) -> float:
        if self.lr is not None:
            return self.lr
        if self.head_only:
            return DEFAULT_HEAD_ONLY_LR
        return AUTO_LR if self.auto_epochs else DEFAULT_LR

    @property
    def kind(self) -> HeadType:
        """The head type being trained."""
        return head_type(self.task)

    @property
    def sentence_pooling(self) -> str | None:
        """Classifier pooling (`auto`: mean with head_only, else cls); None for NER."""
        return self.kind.pooling(self.pooling, self.head_only)
