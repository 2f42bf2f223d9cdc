"""Load a saved head by path and predict: labels with probabilities, or entity spans with
character offsets (subwords merged back into words; a word takes its first subword's tag).
A classifier pools as its config.json says (`bertindex_pooling`, see `sentence`).

Texts longer than the model's positions are refused, never truncated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from indexer.config import MAX_POSITIONS
from indexer.errors import InputError, ModelError
from indexer.heads.labels import decode_bio, merge_subwords, word_spans
from indexer.heads.sentence import check_mean_head, head_pooling, sequence_logits


@dataclass(frozen=True)
class LabelPrediction:
    label: str
    score: float  # softmax probability of `label`


@dataclass(frozen=True)
class Entity:
    type: str
    start: int  # character offsets into the text, end exclusive
    end: int
    text: str
    score: float  # mean probability of the words' tags


def head_task(config) -> str:
    """'classifier' or 'ner' from a saved config's architectures."""
    for arch in getattr(config, "architectures", None) or []:
        if arch.endswith("ForTokenClassification"):
            return "ner"
        if arch.endswith("ForSequenceClassification"):
            return "classifier"
    raise ModelError(
        f"config architectures {getattr(config, 'architectures', None)} are neither a sequence "
        "nor a token classification head"
    )


def load_model_dir(path: str | Path):
    """(task, model, tokenizer) from a head directory written by `train_head`."""
    from transformers import (
        AutoConfig,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ModelError(f"{path}: not a model directory (no config.json); give a --out of 'bertindex train'")
    try:
        config = AutoConfig.from_pretrained(path)
        task = head_task(config)
        auto = AutoModelForTokenClassification if task == "ner" else AutoModelForSequenceClassification
        model = auto.from_pretrained(path).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load the head in {path}: {exc}") from None
    if task == "classifier" and head_pooling(model.config) == "mean":
        check_mean_head(model)
    return task, model, tokenizer


class _Head:
    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer
        self.labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
        self.max_positions = min(getattr(model.config, "max_position_embeddings", MAX_POSITIONS), MAX_POSITIONS)

    def _encode(self, texts: Sequence[str], **kwargs):
        if isinstance(texts, str):
            raise TypeError("predict() takes a list of texts")
        enc = self.tokenizer(list(texts), padding=True, truncation=False, return_tensors="pt", **kwargs)
        lengths = enc["attention_mask"].sum(1)
        too_long = (lengths > self.max_positions).nonzero().flatten().tolist()
        if too_long:
            raise InputError(
                f"text(s) {too_long[:5]} are longer than {self.max_positions} tokens "
                f"({[int(lengths[i]) for i in too_long[:5]]}); split them into shorter texts"
            )
        return enc


class Classifier(_Head):
    """A sentence classifier: `predict(texts)` -> one LabelPrediction per text."""

    @torch.inference_mode()
    def predict(self, texts: Sequence[str], batch_size: int = 32) -> list[LabelPrediction]:
        out: list[LabelPrediction] = []
        for start in range(0, len(texts), batch_size):
            enc = self._encode(texts[start : start + batch_size])
            probs = torch.softmax(sequence_logits(self.model, enc).float(), dim=-1)  # (batch, labels)
            best = probs.argmax(-1)
            out.extend(LabelPrediction(self.labels[int(b)], float(p[b])) for b, p in zip(best, probs))
        return out


class EntityTagger(_Head):
    """A BIO tagger: `predict(texts)` -> a list of Entity spans per text."""

    @torch.inference_mode()
    def predict(self, texts: Sequence[str], batch_size: int = 32, decode: str = "bio") -> list[list[Entity]]:
        """Entity spans per text. decode "bio": the most probable valid BIO tag sequence over
        the words; "argmax": each word's most probable tag (as `pipeline(...)` does)."""
        out: list[list[Entity]] = []
        for start in range(0, len(texts), batch_size):
            chunk = list(texts[start : start + batch_size])
            enc = self._encode(chunk, return_offsets_mapping=True)
            offsets = enc.pop("offset_mapping")
            probs = torch.softmax(self.model(**enc).logits.float(), dim=-1)  # (batch, seq, labels)
            for j, text in enumerate(chunk):
                out.append(self._entities(text, enc.word_ids(j), offsets[j], probs[j], decode))
        return out

    def _entities(self, text: str, word_ids, offsets, probs, decode: str) -> list[Entity]:
        words = merge_subwords(word_ids, offsets)  # [start, end, first-subword position]
        word_probs = probs[[w[2] for w in words]]  # (words, labels)
        if decode == "bio":
            labels = decode_bio(torch.log(word_probs.clamp_min(1e-12)).numpy(), self.labels)
        else:
            labels = [int(x) for x in word_probs.argmax(-1)] if words else []
        tags = [self.labels[label] for label in labels]
        scores = [float(p[label]) for label, p in zip(labels, word_probs)]
        return [Entity(*span) for span in word_spans(words, tags, scores, text)]


def load_head(path: str | Path) -> Classifier | EntityTagger:
    """Load a head directory by path.

    Returns:
        A Classifier or an EntityTagger, with a `predict(texts)` method.
    """
    task, model, tokenizer = load_model_dir(path)
    return EntityTagger(model, tokenizer) if task == "ner" else Classifier(model, tokenizer)
