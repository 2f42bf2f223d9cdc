"""The sentence-pair head type (a cross-encoder): items `{text_a, text_b, label | score}` -> one
relevance or similarity score per pair, both texts read together.

Inputs follow the recipe: the tokenizer's pair template (`[CLS] A [SEP] B [SEP]` for BERT, with
token type ids 0 for A and its [SEP], 1 for B and the last [SEP]; models whose tokenizers have
no token types, such as RoBERTa, get their own template, `<s> A </s></s> B </s>`, and no types).
Two kinds, chosen by the data: `label` per pair -> classification (softmax cross-entropy,
macro-F1), `score` per pair -> regression: one logit, trained with binary cross-entropy against
the score scaled to 0..1 by the train split's range (the sentence-transformers cross-encoder
recipe for STS-B; unlike MSE through a sigmoid its gradient does not vanish at the ends), the
range kept in config.json (`bertindex_score_range`), scored by Spearman (picks the epoch) and
Pearson; after training its score is mixed with the bi-encoder's cosine of the two texts by a
weight chosen on validation (`heads.pair.blend`; 0 keeps the head alone). A pair head trains the
whole model (`--head-only` is refused: a frozen backbone's pooled vector is the bi-encoder again).
It scores pairs, never single texts: `annotate` and `predict` refuse it; `indexer.heads.pair.scorer`
loads one to score pairs (search reranking).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from indexer.errors import InputError, ModelError
from indexer.heads.base import Example, HeadType, label_index, softmax
from indexer.heads.features import Encoded
from indexer.heads.metrics import correlations, macro_f1
from indexer.heads.pair.blend import blend_of, choose_weight, cosine_encoder, mixed, text_cosines
from indexer.heads.pair.keys import BLEND_KEY, RERANK_WEIGHT_KEY
from indexer.heads.sentence import sequence_logits
from indexer.records.annotations import Label

REGRESSION = ["score"]  # the label list of a regression pair head: one output, its score
SCORE_RANGE_KEY = "bertindex_score_range"  # config.json: [low, high] of the train scores
_REFUSE_SINGLE = (
    "a pair head scores pairs of texts (query and passage, two sentences), not "
    "single texts; use it with `bertindex search --rerank HEAD` or `bertindex "
    "eval head`"
)


@dataclass(frozen=True)
class PairExample(Example):
    text_a: str
    text_b: str
    label: int  # class id; 0 (the one output) for a regression head
    score: float | None = None  # regression target, as given (e.g. STS-B's 0-5)


def is_regression(label_names: Sequence[str]) -> bool:
    return list(label_names) == REGRESSION


def gold_scores(examples: Sequence[PairExample]) -> list[float]:
    """A regression split's target scores (`PairHead.example` gives each of its items one).

    Raises:
        InputError: naming an item without a score (a classification item).
    """
    scores = []
    for e in examples:
        if e.score is None:
            raise InputError(f"{e.id}: a regression pair item needs a 'score'")
        scores.append(e.score)
    return scores


def score_range(config) -> tuple[float, float]:
    """(low, high) a regression head's sigmoid output is scaled back to (config.json)."""
    low, high = getattr(config, SCORE_RANGE_KEY, None) or (0.0, 1.0)
    return float(low), float(high)


def sigmoid(x) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def pair_scores(logits: np.ndarray, config, cosines: np.ndarray | None = None) -> np.ndarray:
    """(pairs, outputs) logits -> one score per pair: a regression head's score on its train
    range (mixed with `cosines` when the head has a blend, `heads.pair.blend`); a
    classifier's probability of its last label (`1`, `relevant`: labels sort so the positive
    class of 0/1 data comes last)."""
    logits = np.asarray(logits, dtype=np.float64)
    if logits.shape[-1] == 1:
        low, high = score_range(config)
        probability = sigmoid(logits[:, 0])
        blend = blend_of(config)
        if blend is not None and cosines is not None:
            probability = mixed(probability, cosines, blend["weight"])
        return low + (high - low) * probability
    return softmax(logits)[:, -1]


def _scaled(scores: torch.Tensor, config) -> torch.Tensor:
    low, high = score_range(config)
    return ((scores - low) / (high - low if high > low else 1.0)).clamp(0.0, 1.0)


class PairHead(HeadType[PairExample]):
    """A sentence-pair classifier or regressor (`...ForSequenceClassification` on both texts)."""

    name = "pair"
    summary = (
        "Fine-tune a cross-encoder on sentence pairs (items {text_a, text_b, label|score}; "
        "STS-B CSV files): classification by label, regression by score."
    )
    metric = "primary"  # spearman (regression) or macro_f1 (classes): see `score`
    architecture = "ForSequenceClassification"
    splittable = ()
    example_type = PairExample
    result_type = Label
    formats = ("splits", "jsonl", "parquet", "csv", "tsv", "stsb")
    label_key = "label"
    default_batch_size = 16
    head_only = False  # refused: see `head_modules`

    # -- data -------------------------------------------------------------------------------
    def missing_label(self, item: dict) -> str | None:
        if "label" in item or "score" in item:
            return None
        return "a pair item needs 'label' (classification) or 'score' (regression)"

    def item_labels(self, item: dict, where: str) -> list:
        return [item["label"]] if "label" in item else []  # a score adds no label name

    def label_names_from(self, seen: set) -> list[str]:
        if not seen:
            return list(REGRESSION)
        if any(isinstance(v, int) for v in seen):
            return [str(i) for i in range(max(seen) + 1)]
        return sorted(seen)

    def check_label_names(self, names: list[str]) -> None:
        if len(names) < 2 and not is_regression(names):
            raise InputError(
                f"label_names {names}: a pair classifier needs two or more labels "
                "(or give each pair a 'score' for regression)"
            )

    def example(self, item_id: str, item: dict, names: list[str], where: str) -> PairExample:
        a, b = item.get("text_a"), item.get("text_b")
        if not isinstance(a, str) or not isinstance(b, str):
            raise InputError(f"{where}: a pair item needs 'text_a' and 'text_b' (strings)")
        if is_regression(names):
            if "score" not in item:
                raise InputError(
                    f"{where}: has 'label' but other items have 'score'; give every "
                    "pair a 'score' (regression) or every pair a 'label'"
                )
            try:
                score = float(item["score"])
            except (TypeError, ValueError):
                raise InputError(f"{where}: score {item['score']!r} is not a number") from None
            if not np.isfinite(score):
                raise InputError(f"{where}: score {item['score']!r} is not a finite number")
            return PairExample(item_id, a, b, 0, score)
        if "label" not in item:
            raise InputError(
                f"{where}: has 'score' but other items have 'label'; give every "
                "pair a 'label' (classification) or every pair a 'score'"
            )
        return PairExample(item_id, a, b, label_index(item["label"], names, where))

    # -- model ------------------------------------------------------------------------------
    def model_class(self):
        from transformers import AutoModelForSequenceClassification

        return AutoModelForSequenceClassification

    def check_model(self, model, tokenizer, where: str) -> None:
        types = "token_type_ids" in getattr(tokenizer, "model_input_names", ())
        if types and getattr(model.config, "type_vocab_size", 2) < 2:
            raise ModelError(
                f"{where}: the tokenizer gives token type ids but the model has "
                f"type_vocab_size {model.config.type_vocab_size}; use a matching "
                "tokenizer"
            )

    def fit_config(self, model, data) -> None:
        """A regression head keeps the train split's score range (targets scale by it). A
        base that is itself a pair head passes on no blend or rerank share: they are chosen
        for the new head after its training."""
        for key in (BLEND_KEY, RERANK_WEIGHT_KEY):
            if hasattr(model.config, key):
                delattr(model.config, key)
        if not is_regression(data.label_names):
            return
        scores = [e.score for e in data.splits["train"]]
        low, high = float(min(scores)), float(max(scores))
        if high <= low:
            raise InputError(
                f"{data.sources['train']}: every train score is {low}; a regression "
                "head needs scores that differ"
            )
        setattr(model.config, SCORE_RANGE_KEY, [low, high])
        model.config.problem_type = "regression"

    def pooling(self, requested: str, head_only: bool) -> str:
        """`auto`: [CLS] -> pooler -> classifier, the cross-encoder's own forward."""
        return "cls" if requested == "auto" else requested

    # -- features and training --------------------------------------------------------------
    def encode(self, tokenizer, examples: Sequence[PairExample]) -> Encoded:
        """The tokenizer's pair template, whole (`TrainSettings.resolve` refuses a pair over
        `--max-length`, naming it); token type ids kept where the tokenizer gives them."""
        ids = [e.id for e in examples]
        if not examples:
            return Encoded(ids, [], [])
        enc = tokenizer(
            [e.text_a for e in examples],
            [e.text_b for e in examples],
            add_special_tokens=True,
            truncation=False,
        )
        labels = [float(e.score) if e.score is not None else e.label for e in examples]
        return Encoded(ids, enc["input_ids"], labels, token_type_ids=enc.get("token_type_ids"))

    def loss(self, model, batch: dict) -> torch.Tensor:
        batch = dict(batch)
        labels = batch.pop("labels")  # (B,) class ids, or float scores
        logits = sequence_logits(model, batch).float()  # (B, C)
        if logits.shape[-1] == 1:
            return torch.nn.functional.binary_cross_entropy_with_logits(
                logits[:, 0], _scaled(labels.float(), model.config)
            )
        return torch.nn.functional.cross_entropy(logits, labels)

    def validation_loss(self, logits, targets, model=None) -> float:
        if logits[0].shape[-1] != 1:
            return super().validation_loss(logits, targets)
        x = torch.stack([t.reshape(()) for t in logits]).float()
        y = torch.stack([t.reshape(()) for t in targets]).float()
        config = model.config if model is not None else None
        return float(torch.nn.functional.binary_cross_entropy_with_logits(x, _scaled(y, config)))

    def head_modules(self, model) -> list[torch.nn.Module]:
        raise ModelError(
            "a pair head reads both texts through the whole model; --head-only "
            "(and --probe-epochs) would train on the frozen bi-encoder's vector, "
            "so train without them"
        )

    def backbone_features(self, encoder, encoded: Encoded) -> list[torch.Tensor]:
        raise ModelError(
            "a pair head has no frozen-backbone features; train without "
            "--head-only and --probe-epochs"
        )

    def feature_logits(self, model, features: torch.Tensor) -> torch.Tensor:
        raise ModelError(
            "a pair head has no frozen-backbone features; train without "
            "--head-only and --probe-epochs"
        )

    def feature_targets(self, encoded: Encoded) -> list[torch.Tensor]:
        dtype = (
            torch.float32 if encoded.labels and isinstance(encoded.labels[0], float) else torch.long
        )
        return [torch.tensor([label], dtype=dtype) for label in encoded.labels]

    # -- eval -------------------------------------------------------------------------------
    def logits(self, model, batch: dict) -> torch.Tensor:
        return sequence_logits(model, batch)  # (B, C); C = 1 for regression

    def example_logits(self, out: torch.Tensor, encoded: Encoded, i: int) -> torch.Tensor:
        return out

    def score_options(
        self, model, examples: Sequence[PairExample], head: Path | None = None
    ) -> dict:
        """A blended regression head scores with the bi-encoder's cosines of the pairs (a tuned
        one is read from the head directory `head`)."""
        blend = blend_of(model.config)
        if blend is None or not examples:
            return {}
        cosines = text_cosines(
            cosine_encoder(blend["encoder"], head),
            [e.text_a for e in examples],
            [e.text_b for e in examples],
        )
        return {"cosines": cosines, "blend_weight": blend["weight"]}

    def score(
        self,
        logits: Sequence[torch.Tensor],
        examples: Sequence[PairExample],
        encoded: Encoded,
        label_names: Sequence[str],
        cosines: np.ndarray | None = None,
        blend_weight: float = 0.0,
        **options,
    ) -> dict:
        """Regression: Spearman (`primary`) and Pearson of the sigmoid output (mixed with
        `cosines` by `blend_weight`, `score_options`) against the given scores; classes:
        macro-F1 (`primary`) and accuracy."""
        if is_regression(label_names):
            pred = sigmoid([float(x.reshape(-1)[0]) for x in logits])
            if cosines is not None and blend_weight:
                pred = mixed(pred, cosines, blend_weight)
            out = correlations(gold_scores(examples), pred)
            return {"primary": out["spearman"], "primary_name": "spearman", **out}
        out = macro_f1([e.label for e in examples], [int(x.argmax()) for x in logits], label_names)
        return {"primary": out["macro_f1"], "primary_name": "macro_f1", **out}

    def receipt_fields(self, validation: dict | None, test: dict | None) -> dict:
        name = (validation or test or {}).get("primary_name")
        return {
            "pair": {
                "kind": "regression" if name == "spearman" else "classification",
                "primary": name,
                "inputs": "the tokenizer's pair template, token type ids 0/1 where it "
                "gives them; never truncated in training",
            }
        }

    def blend(
        self,
        model,
        splits: dict,
        logits: dict,
        label_names: list[str],
        encoder: Path | None,
        encoder_name: str | None,
    ) -> dict | None:
        """A regression head's mix with a bi-encoder (`heads.pair.blend`): the weight chosen
        on validation, kept in config.json when above 0.

        Args:
            splits: split name -> examples; logits: split name -> per-example logits (the
                trained head's, validation and maybe test).
            encoder: the bi-encoder's directory (the base, or one tuned on the train pairs).
            encoder_name: what config.json names it by (the packaged model's name, a path,
                or a folder inside the head).
        Returns:
            The receipt's `blend` record, None for a classifier or without an encoder.
        """
        if not is_regression(label_names) or encoder is None:
            return None
        record: dict = {"encoder": encoder_name or str(encoder)}
        encoder = cosine_encoder(encoder)
        cos, prob = {}, {}
        for split, rows in logits.items():
            examples = splits[split]
            cos[split] = text_cosines(
                encoder, [e.text_a for e in examples], [e.text_b for e in examples]
            )
            prob[split] = sigmoid([float(x.reshape(-1)[0]) for x in rows])
        chosen = choose_weight(
            [e.score for e in splits["validation"]], prob["validation"], cos["validation"]
        )
        record.update(chosen)
        if "test" in logits:
            gold = [e.score for e in splits["test"]]
            record["test"] = correlations(gold, mixed(prob["test"], cos["test"], chosen["weight"]))[
                "spearman"
            ]
            record["test_alone"] = correlations(gold, prob["test"])["spearman"]
        setattr(
            model.config,
            BLEND_KEY,
            {"weight": chosen["weight"], "encoder": record["encoder"]}
            if chosen["weight"]
            else None,
        )
        # what `score` takes per split, so the blended head is scored from these cosines
        record["options"] = {
            split: {"cosines": cos[split], "blend_weight": chosen["weight"]} for split in cos
        }
        return record

    def blend_tunes(self, model) -> bool:
        return model.config.num_labels == 1

    def baseline(
        self, splits: dict, label_names: list[str], seed: int, base: Path | None = None
    ) -> dict | None:
        """The bi-encoder: cosine of the two texts' vectors from `base` (Spearman for
        regression; for classes a logistic regression on that cosine, fit on train)."""
        if base is None:
            return None
        from indexer.heads.pair.baseline import cosine_baseline

        return cosine_baseline(splits, label_names, base, seed)

    # -- predict and annotate: a pair head scores pairs only --------------------------------
    def predict(self, texts, enc, offsets, logits, label_names, **options) -> list:
        raise ModelError(_REFUSE_SINGLE)

    def top(self, model, device: torch.device) -> torch.nn.Module:
        raise ModelError(_REFUSE_SINGLE)

    def window_output(self, out: torch.Tensor, n_tokens: int) -> np.ndarray:
        raise ModelError(_REFUSE_SINGLE)

    def annotate(self, head, label_names, texts, enc, windows, outputs) -> list[list]:
        raise ModelError(_REFUSE_SINGLE)
