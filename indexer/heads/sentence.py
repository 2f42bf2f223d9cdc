"""How a sentence classifier turns token states into logits: its pooling, recorded in config.json.

Two poolings, both on a BERT-style `...ForSequenceClassification` (base model with a pooler,
`dropout`, `classifier`):

* `cls`: the [CLS] state -> pooler (dense + tanh) -> classifier. This is the model's own
  forward, so transformers' `pipeline(...)` computes exactly what bertindex computes.
* `mean`: the mean of the token states over the attention mask, L2-normalised (the vector
  the packaged encoder was trained to produce, and the one the index stores) -> the same
  pooler layer -> classifier. transformers knows nothing of this: `AutoModelFor...` and
  `pipeline(...)` still load the directory, but they feed [CLS] to the head. bertindex's
  loaders (`predict`, `evaluate`, `annotate`) read `bertindex_pooling` and apply the mean.

Does not load or train models.
"""

from __future__ import annotations

import torch

from indexer.encode.pooling import l2_normalize, mean_pool
from indexer.errors import ModelError

POOLING_KEY = "bertindex_pooling"  # in config.json; absent means `cls`
POOLINGS = ("cls", "mean")


def head_pooling(config) -> str:
    """`cls` or `mean` from a model config (`cls` when the key is absent)."""
    pooling = getattr(config, POOLING_KEY, None) or "cls"
    if pooling not in POOLINGS:
        raise ModelError(
            f"config.json has {POOLING_KEY}={pooling!r}; expected one of {', '.join(POOLINGS)}"
        )
    return pooling


def check_mean_head(model) -> None:
    """Raise ModelError unless `model` has the parts a mean-pooled head needs."""
    base = getattr(model, "base_model", None)
    if (
        getattr(base, "pooler", None) is None
        or getattr(model, "classifier", None) is None
        or getattr(model, "dropout", None) is None
    ):
        raise ModelError(
            f"{POOLING_KEY}=mean needs a BERT-style sequence classifier (base model with a pooler, "
            f"dropout, classifier); {type(model).__name__} is not one"
        )


def sentence_features(
    hidden: torch.Tensor, mask: torch.Tensor | None, pooling: str
) -> torch.Tensor:
    """(batch, seq, hidden) token states -> (batch, hidden) fp32 features for the head.

    `mask` None means no padding. `cls`: the first token; `mean`: L2-normalised masked mean.
    """
    if pooling == "cls":
        return hidden[:, 0].float()
    if mask is None:
        mask = torch.ones(hidden.shape[:2], dtype=torch.long, device=hidden.device)
    return l2_normalize(mean_pool(hidden, mask))


def top_logits(pooler, classifier, features: torch.Tensor, dropout=None) -> torch.Tensor:
    """Pooler (dense + tanh), dropout if given, classifier, on (batch, hidden) features."""
    pooled = pooler(features[:, None, :])  # BERT's pooler reads position 0
    return classifier(dropout(pooled) if dropout is not None else pooled)


def head_logits(model, features: torch.Tensor) -> torch.Tensor:
    """`top_logits` with the model's own pooler, dropout and classifier."""
    return top_logits(model.base_model.pooler, model.classifier, features, model.dropout)


def sequence_logits(model, batch: dict) -> torch.Tensor:
    """Logits (batch, labels) of a sequence classifier on a tokenised batch, honouring its pooling.

    `batch` holds `input_ids` and `attention_mask` (and maybe `token_type_ids`); no `labels`.
    """
    if head_pooling(model.config) == "cls":
        return model(**batch).logits
    check_mean_head(model)
    hidden = model.base_model(**batch).last_hidden_state
    return head_logits(model, sentence_features(hidden, batch.get("attention_mask"), "mean"))
