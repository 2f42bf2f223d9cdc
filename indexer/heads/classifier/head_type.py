"""The sequence classifier head type: items `{text, label}` -> one `Label` per text.

A classifier pools as its config.json says ([CLS] or the normalised token mean, see
`heads.sentence`); a long text under `annotate` averages its windows' logits (each window
counts once), then softmaxes. Scored by macro-F1, against a TF-IDF baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from indexer.errors import InputError, ModelError
from indexer.heads.base import Example, HeadType, bert_head_parts, label_index, softmax
from indexer.heads.classifier.tfidf import tfidf_baseline
from indexer.heads.features import Encoded
from indexer.heads.metrics import macro_f1
from indexer.heads.sentence import (
    check_mean_head,
    head_logits,
    head_pooling,
    sentence_features,
    sequence_logits,
    top_logits,
)
from indexer.records.annotations import Label


@dataclass(frozen=True)
class SentenceExample(Example):
    text: str
    label: int


def labels_from_logits(
    logits: np.ndarray, label_names: Sequence[str], head: str | None = None
) -> list[Label]:
    """(texts, labels) logits -> each text's most probable Label (softmax probability).

    Args:
        logits: one row per text.
        label_names: names by label id.
        head: the head's name, kept on each Label (annotate).
    """
    probs = softmax(logits)  # (texts, labels)
    best = probs.argmax(axis=1)
    second = np.sort(probs, axis=1)[:, -2] if probs.shape[1] > 1 else np.zeros(len(probs))
    return [
        Label(label_names[b], float(p[b]), head, float(r)) for b, p, r in zip(best, probs, second)
    ]


class SequenceClassifier(HeadType[SentenceExample]):
    """A sentence classifier (`...ForSequenceClassification`)."""

    name = "classifier"
    summary = "Fine-tune a sentence classifier (items {text, label}; TweetEval folders)."
    metric = "macro_f1"
    architecture = "ForSequenceClassification"
    splittable = ("BertForSequenceClassification",)
    example_type = SentenceExample
    result_type = Label
    formats = ("splits", "jsonl", "parquet", "tweeteval")
    label_key = "label"
    default_batch_size = 32

    # -- data -------------------------------------------------------------------------------
    def item_labels(self, item: dict, where: str) -> list:
        return [item[self.label_key]]

    def label_names_from(self, seen: set) -> list[str]:
        if any(isinstance(v, int) for v in seen):
            return [str(i) for i in range(max(seen) + 1)]
        return sorted(seen)

    def example(self, item_id: str, item: dict, names: list[str], where: str) -> SentenceExample:
        if not isinstance(item.get("text"), str) or "label" not in item:
            raise InputError(f"{where}: a sentence item needs 'text' (string) and 'label'")
        return SentenceExample(item_id, item["text"], label_index(item["label"], names, where))

    # -- model ------------------------------------------------------------------------------
    def model_class(self):
        from transformers import AutoModelForSequenceClassification

        return AutoModelForSequenceClassification

    def check_model(self, model, tokenizer, where: str) -> None:
        if head_pooling(model.config) == "mean":
            check_mean_head(model)

    def pooling(self, requested: str, head_only: bool) -> str:
        """`auto`: the normalised mean with --head-only (the index's own vector), else [CLS]."""
        if requested == "auto":
            return "mean" if head_only else "cls"
        return requested

    # -- features and training --------------------------------------------------------------
    def encode(self, tokenizer, examples: Sequence[SentenceExample]) -> Encoded:
        ids = [e.id for e in examples]
        if not examples:
            return Encoded(ids, [], [])
        enc = tokenizer([e.text for e in examples], add_special_tokens=True, truncation=False)
        return Encoded(ids, enc["input_ids"], [e.label for e in examples])

    def loss(self, model, batch: dict) -> torch.Tensor:
        if head_pooling(model.config) == "cls":
            return model(**batch).loss.float()
        batch = dict(batch)
        labels = batch.pop("labels")  # (B,)
        return torch.nn.functional.cross_entropy(sequence_logits(model, batch).float(), labels)

    def head_modules(self, model) -> list[torch.nn.Module]:
        """Pooler + dropout + classifier."""
        dropout, classifier = bert_head_parts(model)
        pooler = getattr(model.base_model, "pooler", None)
        if pooler is None:
            raise ModelError(f"{type(model).__name__} has no pooler; train without --head-only")
        return [pooler, dropout, classifier]

    def backbone_features(self, encoder, encoded: Encoded) -> list[torch.Tensor]:
        """(hidden,) pooled features per example, as the encoder pools them."""
        return list(torch.from_numpy(encoder.encode_ids(encoded.input_ids)).unbind(0))

    def feature_logits(self, model, features: torch.Tensor) -> torch.Tensor:
        return head_logits(model, features)

    def feature_targets(self, encoded: Encoded) -> list[torch.Tensor]:
        return [torch.tensor([label]) for label in encoded.labels]

    # -- eval -------------------------------------------------------------------------------
    def logits(self, model, batch: dict) -> torch.Tensor:
        return sequence_logits(model, batch)  # (B, C), pooled as config.json says

    def example_logits(self, out: torch.Tensor, encoded: Encoded, i: int) -> torch.Tensor:
        return out

    def score(
        self,
        logits: Sequence[torch.Tensor],
        examples: Sequence[SentenceExample],
        encoded: Encoded,
        label_names: Sequence[str],
        **options,
    ) -> dict:
        pred = [int(x.argmax()) for x in logits]
        return macro_f1([e.label for e in examples], pred, label_names)

    def baseline(self, splits: dict, label_names: list[str], seed: int, base=None) -> dict:
        return tfidf_baseline(
            splits["train"], splits["validation"], label_names, splits.get("test"), seed=seed
        )

    # -- predict and annotate ---------------------------------------------------------------
    def predict(
        self,
        texts: Sequence[str],
        enc,
        offsets,
        logits: torch.Tensor,
        label_names: list[str],
        **options,
    ) -> list[Label]:
        if options:
            raise TypeError(f"a classifier's predict() takes no {', '.join(options)}")
        return labels_from_logits(logits.float().numpy(), label_names)

    def top(self, model, device: torch.device) -> torch.nn.Module:
        return _ClassifierTop(model, device)

    def window_output(self, out: torch.Tensor, n_tokens: int) -> np.ndarray:
        return out.numpy()  # (C,)

    def annotate(
        self,
        head: str,
        label_names: list[str],
        texts: Sequence[str],
        enc,
        windows: Sequence[tuple[int, int, int]],
        outputs: Sequence[np.ndarray],
    ) -> list[list[Label]]:
        """Each text's label from the mean of its windows' logits (`text_logits`)."""
        mean = self.text_logits(len(texts), len(label_names), windows, outputs)
        return [[label] for label in labels_from_logits(mean, label_names, head)]

    def text_logits(
        self,
        n_texts: int,
        n_labels: int,
        windows: Sequence[tuple[int, int, int]],
        outputs: Sequence[np.ndarray],
    ) -> np.ndarray:
        """The mean of each text's windows' logits (each window counts once), float64."""
        logits = np.stack(outputs) if outputs else np.zeros((0, n_labels), np.float32)
        sums = np.zeros((n_texts, n_labels), np.float64)
        counts = np.zeros(n_texts, np.int64)
        doc = np.fromiter((w[0] for w in windows), np.int64, len(windows))
        np.add.at(sums, doc, logits)
        np.add.at(counts, doc, 1)
        return sums / np.maximum(counts, 1)[:, None]  # (texts, C)


class _ClassifierTop(torch.nn.Module):
    """A sequence classifier's own top: its pooling ([CLS] or normalised mean over the mask),
    pooler, classifier; fp32 (the labels come from it, and it costs nothing)."""

    def __init__(self, model, device: torch.device):
        super().__init__()
        self.pooling = head_pooling(model.config)
        self.pooler = model.base_model.pooler.to(device).float()
        self.classifier = model.classifier.to(device).float()
        self.eval()

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return top_logits(
            self.pooler, self.classifier, sentence_features(hidden, mask, self.pooling)
        )
