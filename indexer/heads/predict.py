"""Load a saved head by path and predict on whole texts: a `Label` per text (classifier) or
a list of `Entity` spans per text (tagger), decoded by the head's type exactly as `annotate`
and `eval head` decode (a tagger: most probable valid BIO sequence by default).

Texts longer than the model's positions are refused, never truncated.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from indexer.config import MAX_POSITIONS
from indexer.encode.model_facts import drop_unused_inputs, load_transformer, usable_length
from indexer.errors import InputError, ModelError
from indexer.heads.base import HeadType
from indexer.heads.registry import head_type_of


def load_model_dir(path: str | Path) -> tuple[HeadType, Any, Any]:
    """A head directory written by `train_head`, loaded in eval mode.

    Returns:
        (head type, model, tokenizer)
    """
    from transformers import AutoConfig, AutoTokenizer

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ModelError(
            f"{path}: not a model directory (no config.json); give a --out of 'bertindex train'"
        )
    try:
        kind = head_type_of(AutoConfig.from_pretrained(path))
        model, _ = load_transformer(path, kind.model_class())  # sdpa where the class has it
        model.eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load the head in {path}: {exc}") from None
    kind.check_model(model, tokenizer, str(path))
    return kind, model, tokenizer


class Predictor:
    """A loaded head: `predict(texts)` -> one result per text (see the module).

    `options`: what the head's config fixes for predicting (`HeadType.saved_options`: a
    tagger's segmentation of raw text into its training words).
    """

    def __init__(self, kind: HeadType, model, tokenizer, where: str = "the head"):
        self.kind, self.model, self.tokenizer = kind, model, tokenizer
        self.options = kind.saved_options(model.config, where)
        self.labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
        self.max_positions = min(usable_length(model, tokenizer).limit, MAX_POSITIONS)

    @torch.inference_mode()
    def predict(self, texts: Sequence[str], batch_size: int = 32, **options) -> list:
        """Results per text, in order.

        Args:
            texts: a list of texts (not one string).
            batch_size: texts per forward pass.
            options: the head type's decoding options (a tagger's `decode`: "bio" or
                "argmax"; its `segmentation`, default the head's own).
        Returns:
            A Label per text (classifier), or a list of Entity spans per text (tagger).
        """
        if isinstance(texts, str):
            raise TypeError("predict() takes a list of texts")
        out: list = []
        for start in range(0, len(texts), batch_size):
            chunk = list(texts[start : start + batch_size])
            enc = self._encode(chunk)
            offsets = enc.pop("offset_mapping")  # (B, L, 2)
            logits = self.kind.logits(self.model, drop_unused_inputs(self.model, enc))
            out.extend(
                self.kind.predict(
                    chunk, enc, offsets, logits, self.labels, **{**self.options, **options}
                )
            )
        return out

    def _encode(self, texts: list[str]):
        enc = self.tokenizer(
            texts, padding=True, truncation=False, return_tensors="pt", return_offsets_mapping=True
        )
        lengths = enc["attention_mask"].sum(1)
        too_long = (lengths > self.max_positions).nonzero().flatten().tolist()
        if too_long:
            raise InputError(
                f"text(s) {too_long[:5]} are longer than {self.max_positions} tokens "
                f"({[int(lengths[i]) for i in too_long[:5]]}); split them into shorter texts"
            )
        return enc


def load_head(path: str | Path) -> Predictor:
    """Load a head directory by path.

    Returns:
        A Predictor, with a `predict(texts)` method.
    """
    return Predictor(*load_model_dir(path), where=str(path))
