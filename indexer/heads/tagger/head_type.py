"""The BIO token tagger head type (NER): items `{tokens, tags}` -> `Entity` spans per text.

Raw text is cut into words as the head's training words were (`indexer.heads.tagger.segment`: at
whitespace unless the head records otherwise), subwords are merged back into those words (a
word takes its first subword's logits) and the words are decoded the same way everywhere
(`decode_words`): by default the most probable valid BIO sequence, so `predict`, `eval head`
and `annotate` give the same entities. Under `annotate` each token's logits come from the
window where it sits farthest from an edge. Scored by entity-F1.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import get_args

import numpy as np
import torch

from indexer.core.choices import Decode
from indexer.encode.model_facts import add_prefix_space
from indexer.errors import InputError, ModelError
from indexer.heads.base import Example, HeadType, bert_head_parts, label_index
from indexer.heads.features import Encoded
from indexer.heads.labels import (
    IGNORE_INDEX,
    align_labels,
    decode_bio,
    first_subword_positions,
    is_bio_tag,
    order_bio_labels,
    word_spans,
)
from indexer.heads.metrics import entity_f1
from indexer.heads.tagger.segment import ASSUMED, SEGMENTATION_KEY, saved_segmentation, text_words
from indexer.records.annotations import Entity

DECODES = get_args(Decode)
_SPACE = re.compile(r"\s")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenExample(Example):
    tokens: tuple[str, ...]
    tags: tuple[int, ...]


def decode_words(
    logits: np.ndarray, label_names: Sequence[str], decode: str = "bio"
) -> tuple[list[int], list[float]]:
    """Tag each word from its (words, labels) logits.

    Args:
        logits: one row per word (its first subword's logits).
        label_names: the BIO tags by label id.
        decode: "bio", the most probable valid BIO sequence (Viterbi); "argmax", each word's
            most probable tag on its own (as transformers' `pipeline(...)` does).
    Returns:
        (label id per word, that label's softmax probability per word).
    """
    if decode not in DECODES:
        raise InputError(f"decode '{decode}' is unknown; choose one of {', '.join(DECODES)}")
    x = logits.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    log_probs = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))  # (words, labels)
    if decode == "bio":
        ids = decode_bio(log_probs, label_names)
    else:
        ids = [int(i) for i in log_probs.argmax(axis=-1)]
    return ids, [float(np.exp(log_probs[w, i])) for w, i in enumerate(ids)]


def text_entities(
    text: str,
    word_ids,
    offsets,
    logits: np.ndarray,
    label_names: Sequence[str],
    decode: str = "bio",
    head: str | None = None,
    segmentation: str = ASSUMED,
) -> list[Entity]:
    """Entity spans of one encoded raw text.

    Args:
        word_ids: per token its word index or None (special tokens, padding).
        offsets: per token its (start, end) character offsets into `text`.
        logits: (tokens, labels), one row per token of `word_ids`.
        decode: see `decode_words`.
        head: the head's name, kept on each Entity (annotate).
        segmentation: how the head's training words were cut (`indexer.heads.tagger.segment`).
    Returns:
        Entities in text order, spanning whole words; score is the mean probability of their
        words' tags.
    """
    words = text_words(text, word_ids, offsets, segmentation)  # [start, end, first position]
    rows = logits[[w[2] for w in words]] if words else logits[:0]  # (words, labels)
    ids, probs = decode_words(rows, label_names, decode)
    tags = [label_names[i] for i in ids]
    return [Entity(*span, head=head) for span in word_spans(words, tags, probs, text)]


class TokenTagger(HeadType[TokenExample]):
    """A BIO token tagger (`...ForTokenClassification`)."""

    name = "ner"
    summary = "Fine-tune a BIO token tagger (items {tokens, tags}; CoNLL column files)."
    metric = "entity_f1"
    architecture = "ForTokenClassification"
    splittable = ("BertForTokenClassification",)
    example_type = TokenExample
    result_type = Entity
    formats = ("splits", "jsonl", "parquet", "conll")
    label_key = "tags"
    default_batch_size = 8  # README: CoNLL validation prefers 8 sentences a step at lr 2e-5
    decodes = DECODES
    decode_note = "bio (most probable valid BIO sequence)"

    # -- data -------------------------------------------------------------------------------
    def item_labels(self, item: dict, where: str) -> list:
        tags = item[self.label_key]
        if not isinstance(tags, list):
            raise InputError(f"{where}: '{self.label_key}' must be a list")
        return tags

    def label_names_from(self, seen: set) -> list[str]:
        if any(isinstance(v, int) for v in seen):
            raise InputError("integer NER tags need 'label_names' (a JSON file with label_names)")
        bad = sorted(t for t in seen if not is_bio_tag(t))
        if bad:
            raise InputError(f"tags must be BIO ('O', 'B-TYPE', 'I-TYPE'); found {bad[:10]}")
        return order_bio_labels(seen)

    def check_label_names(self, names: list[str]) -> None:
        bad = [n for n in names if not is_bio_tag(n)]
        if bad:
            raise InputError(f"NER label_names must be BIO ('O', 'B-TYPE', 'I-TYPE'); found {bad}")

    def example(self, item_id: str, item: dict, names: list[str], where: str) -> TokenExample:
        tokens, tags = item.get("tokens"), item.get("tags")
        if not isinstance(tokens, list) or not isinstance(tags, list):
            raise InputError(f"{where}: a token item needs 'tokens' and 'tags' lists")
        if len(tokens) != len(tags):
            raise InputError(f"{where}: {len(tokens)} tokens but {len(tags)} tags")
        if not tokens:
            raise InputError(f"{where}: has no tokens")
        if not all(isinstance(t, str) for t in tokens):
            raise InputError(f"{where}: tokens must be strings")
        return TokenExample(
            item_id, tuple(tokens), tuple(label_index(t, names, where) for t in tags)
        )

    # -- model ------------------------------------------------------------------------------
    def model_class(self):
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification

    def check_model(self, model, tokenizer, where: str) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise ModelError(f"{where}: NER needs a fast tokenizer (tokenizer.json)")

    def prepare_tokenizer(self, tokenizer, where: str):
        """Byte-level BPE (RoBERTa, ModernBERT) with a prefix space: training words come
        pre-split, and each must be tokenised as inside running text (`Ġword`)."""
        if getattr(tokenizer, "is_fast", False):
            add_prefix_space(tokenizer)
        return tokenizer

    def saved_options(self, config, where: str) -> dict:
        """The segmentation the head's training words had (`segment.saved_segmentation`)."""
        return {"segmentation": saved_segmentation(config, where)}

    def fit_config(self, model, data) -> None:
        """Records `whitespace` segmentation (`indexer.heads.tagger.segment`): every training item
        is a pre-split word list, and raw text split at whitespace gives those words back. Words
        holding whitespace themselves cannot be reproduced from raw text; a warning counts
        the items that have them."""
        spaced = sum(
            any(_SPACE.search(t) for t in e.tokens) for split in data.splits.values() for e in split
        )
        if spaced:
            log.warning(
                "%d training item(s) hold words with whitespace inside; raw text at "
                "predict and annotate time is split at whitespace, so those words are "
                "split there",
                spaced,
            )
        setattr(model.config, SEGMENTATION_KEY, "whitespace")  # saved in config.json

    def pooling(self, requested: str, head_only: bool) -> None:
        if requested == "mean":
            raise InputError("--pooling mean is for classifiers; an NER head tags every token")

    # -- features and training --------------------------------------------------------------
    def encode(self, tokenizer, examples: Sequence[TokenExample]) -> Encoded:
        """Words pre-split; labels aligned to first subwords (`labels.align_labels`)."""
        ids = [e.id for e in examples]
        if not examples:
            return Encoded(ids, [], [])
        if not getattr(tokenizer, "is_fast", False):
            raise InputError("NER needs a fast tokenizer (tokenizer.json) for word_ids() alignment")
        enc = tokenizer(
            [list(e.tokens) for e in examples],
            is_split_into_words=True,
            add_special_tokens=True,
            truncation=False,
        )
        labels, positions = [], []
        for i, example in enumerate(examples):
            word_ids = enc.word_ids(i)
            labels.append(align_labels(word_ids, example.tags))
            positions.append(first_subword_positions(word_ids))
        return Encoded(ids, enc["input_ids"], labels, positions)

    def loss(self, model, batch: dict) -> torch.Tensor:
        return model(**batch).loss.float()

    def head_modules(self, model) -> list[torch.nn.Module]:
        """Dropout + classifier."""
        return list(bert_head_parts(model))

    def backbone_features(self, encoder, encoded: Encoded) -> list[torch.Tensor]:
        """(words, hidden) first-subword token states per example."""
        keep = [[p[w] for w in sorted(p)] for p in encoded.word_positions]  # type: ignore[union-attr]
        return [torch.from_numpy(x) for x in encoder.token_states(encoded.input_ids, keep)]

    def feature_logits(self, model, features: torch.Tensor) -> torch.Tensor:
        return model.classifier(model.dropout(features))

    def feature_targets(self, encoded: Encoded) -> list[torch.Tensor]:
        return [torch.tensor([x for x in lab if x != IGNORE_INDEX]) for lab in encoded.labels]

    # -- eval -------------------------------------------------------------------------------
    def logits(self, model, batch: dict) -> torch.Tensor:
        return model(**batch).logits  # (B, L, C)

    def example_logits(self, out: torch.Tensor, encoded: Encoded, i: int) -> torch.Tensor:
        positions = encoded.word_positions[i]  # type: ignore[index]
        return out[[positions[w] for w in sorted(positions)]]  # (words with a subword, C)

    def score(
        self,
        logits: Sequence[torch.Tensor],
        examples: Sequence[TokenExample],
        encoded: Encoded,
        label_names: Sequence[str],
        decode: str = "bio",
    ) -> dict:
        """Entity-F1; a word with no subword token is predicted `O`."""
        gold_tags, pred_tags = [], []
        for i, (x, example) in enumerate(zip(logits, examples)):
            gold_tags.append([label_names[t] for t in example.tags])
            ids, _ = decode_words(x.float().numpy(), label_names, decode)
            pred = ["O"] * len(example.tokens)
            for w, label in zip(sorted(encoded.word_positions[i]), ids):  # type: ignore[index]
                pred[w] = label_names[label]
            pred_tags.append(pred)
        return entity_f1(gold_tags, pred_tags)

    def receipt_fields(self, validation: dict | None, test: dict | None) -> dict:
        return {
            "entity_counts": {
                "validation": _entity_counts(validation),
                "test": _entity_counts(test),
            }
        }

    # -- predict and annotate ---------------------------------------------------------------
    def predict(
        self,
        texts: Sequence[str],
        enc,
        offsets,
        logits: torch.Tensor,
        label_names: list[str],
        decode: str = "bio",
        segmentation: str = ASSUMED,
    ) -> list[list[Entity]]:
        lg = logits.float().numpy()  # (B, L, C)
        return [
            text_entities(
                text,
                enc.word_ids(j),
                offsets[j],
                lg[j],
                label_names,
                decode,
                segmentation=segmentation,
            )
            for j, text in enumerate(texts)
        ]

    def top(self, model, device: torch.device) -> torch.nn.Module:
        return _TaggerTop(model.classifier.to(device).float())

    def window_output(self, out: torch.Tensor, n_tokens: int) -> np.ndarray:
        return out[1 : 1 + n_tokens].numpy()  # (n_tokens, C): [CLS] and [SEP] dropped

    def annotate(
        self,
        head: str,
        label_names: list[str],
        texts: Sequence[str],
        enc,
        windows: Sequence[tuple[int, int, int]],
        outputs: Sequence[np.ndarray],
        segmentation: str = ASSUMED,
    ) -> list[list[Entity]]:
        by_text: dict[int, list[tuple[int, int, np.ndarray]]] = {}
        for (i, s, e), out in zip(windows, outputs):
            by_text.setdefault(i, []).append((s, e, out))
        results: list[list[Entity]] = []
        for i, text in enumerate(texts):
            n_tok = len(enc["input_ids"][i])
            if n_tok == 0:
                results.append([])
                continue
            tok = _stitch(by_text[i], n_tok)  # (n_tok, C): each token from its best window
            results.append(
                text_entities(
                    text,
                    enc.word_ids(i),
                    enc["offset_mapping"][i],
                    tok,
                    label_names,
                    head=head,
                    segmentation=segmentation,
                )
            )
        return results


class _TaggerTop(torch.nn.Module):
    def __init__(self, classifier):
        super().__init__()
        self.classifier = classifier

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.classifier(hidden)  # (B, L, C)


def _stitch(parts: list[tuple[int, int, np.ndarray]], n_tok: int) -> np.ndarray:
    """Token logits of a whole text from its windows: each token from the window where it is
    farthest from an edge (its widest context)."""
    if len(parts) == 1:
        return parts[0][2]
    out = np.zeros((n_tok, parts[0][2].shape[1]), np.float32)
    margin = np.full(n_tok, -1, np.int64)
    for s, e, lg in parts:
        pos = np.arange(s, e)
        m = np.minimum(pos - s, e - 1 - pos)
        better = m > margin[s:e]
        out[pos[better]] = lg[better]
        margin[pos[better]] = m[better]
    return out


def _entity_counts(scores: dict | None) -> dict | None:
    if scores is None:
        return None
    return {
        "gold": scores["gold_entities"],
        "predicted": scores["predicted_entities"],
        "by_type": {
            k: {"gold": v["support"], "predicted": v["predicted"]}
            for k, v in scores["per_type"].items()
        },
    }
