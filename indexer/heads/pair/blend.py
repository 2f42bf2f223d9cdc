"""A regression pair head's blend with the bi-encoder: its score mixed with the cosine of the two
texts' vectors from the encoder it was trained from, the weight chosen on validation.

The two read a pair differently (the cross-encoder reads both texts together, the bi-encoder
compares two vectors), so their errors differ and a mix ranks pairs better than either: on
STS-B, cross-encoder 0.837 and bi-encoder 0.820 test Spearman, the mix 0.858 (README, "Pair
heads and reranking"). The weight is picked after training from `WEIGHTS` by validation
Spearman; 0 (the cross-encoder alone) is among them, so the choice cannot lower the validation
score. The mix is `(1 - w) * p + w * cos`, p the head's sigmoid output (0..1) and cos the cosine,
then put back on the train scores' range. Kept in config.json (`heads.pair.keys.BLEND_KEY`:
weight and encoder), so `eval head` and `PairScorer` score as trained. A reranker (`train
rerank`) is not blended this way: its score is mixed with the first stage's instead
(`heads.pair.keys.RERANK_WEIGHT_KEY`, applied by `indexer.query.rerank`). Does not train.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from indexer.heads.metrics import correlations
from indexer.heads.pair.keys import BLEND_KEY

BASELINE_MAX_LENGTH = 512  # each text alone; a longer one is cut (a comparison, not the head)

WEIGHTS = tuple(round(0.1 * i, 1) for i in range(10))  # 0.0 .. 0.9: the cosine's share


def blend_of(config) -> dict | None:
    """The saved blend ({"weight", "encoder"}) of a head's config, None when it has none or
    its weight is 0."""
    blend = getattr(config, BLEND_KEY, None)
    return blend if isinstance(blend, dict) and blend.get("weight") else None


def mixed(probability: np.ndarray, cosine: np.ndarray, weight: float) -> np.ndarray:
    return (1.0 - weight) * np.asarray(probability, dtype=np.float64) + weight * np.asarray(cosine)


def cosine_encoder(name: str | Path, head: str | Path | None = None):
    """The bi-encoder a blend reads: mean-pooled, normalised, fp32 (as the baseline). `name`
    is a folder inside the head directory `head` (a tuned one), a model directory, or the
    packaged model's name."""
    from indexer.config import ModelConfig, resolve_model_path
    from indexer.encode.encoder import Encoder

    inside = Path(head) / str(name) if head is not None else None
    path = inside if inside is not None and inside.is_dir() else resolve_model_path(str(name))
    return Encoder(
        ModelConfig(
            name=str(path),
            pooling="mean",
            normalize=True,
            max_length=BASELINE_MAX_LENGTH,
            device="cpu",
            dtype="fp32",
        )
    )


def text_cosines(encoder, firsts: Sequence[str], seconds: Sequence[str]) -> np.ndarray:
    """Cosine of firsts[i] and seconds[i] per pair, from one encoder."""
    if not firsts:
        return np.zeros(0)
    a = encoder.encode_texts(list(firsts))  # (pairs, hidden), normalised
    b = encoder.encode_texts(list(seconds))
    return (a * b).sum(axis=1).astype(np.float64)


def choose_weight(gold: Sequence[float], probability: np.ndarray, cosine: np.ndarray) -> dict:
    """The weight of `WEIGHTS` with the best Spearman of the mix against `gold` (validation);
    the lowest such weight on a tie.

    Returns:
        {"weight", "validation": Spearman at it, "alone": the head's own, "tried": {w: Spearman}}.
    """
    tried = {w: correlations(gold, mixed(probability, cosine, w))["spearman"] for w in WEIGHTS}
    best = max(WEIGHTS, key=lambda w: (round(tried[w], 6), -w))
    return {
        "weight": best,
        "validation": tried[best],
        "alone": tried[0.0],
        "tried": {str(w): round(s, 4) for w, s in tried.items()},
    }
