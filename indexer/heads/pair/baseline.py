"""The bi-encoder baseline of a pair head: the cosine of the two texts' mean-pooled, normalised
vectors from the base encoder (what search without reranking ranks by). Regression: Spearman of
the cosine against the scores; classes: a logistic regression on the one cosine feature, fit on
train, macro-F1. Does not train the head.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from indexer.heads.metrics import correlations, macro_f1


def pair_cosines(encoder, examples) -> np.ndarray:
    """Cosine of text_a and text_b per example, from one encoder."""
    from indexer.heads.pair.blend import text_cosines

    return text_cosines(encoder, [e.text_a for e in examples], [e.text_b for e in examples])


def cosine_baseline(splits: dict, label_names: list[str], base: Path, seed: int = 42) -> dict:
    """Score the base encoder's cosine on validation and test (and train, for classes).

    Args:
        splits: split name -> PairExamples (`train`, `validation`, maybe `test`).
        label_names: the head's labels (`["score"]` for regression).
        base: the encoder directory the head was trained from.
    Returns:
        {"name", "validation": metrics, "test": metrics or None, "seconds"}; the metrics
        carry `primary` like the head's.
    """
    from indexer.heads.pair.blend import cosine_encoder
    from indexer.heads.pair.head_type import is_regression

    started = time.perf_counter()
    encoder = cosine_encoder(base)
    cos = {
        s: pair_cosines(encoder, splits[s])
        for s in ("train", "validation", "test")
        if s in splits and (s != "train" or not is_regression(label_names))
    }
    if is_regression(label_names):

        def scored(split: str) -> dict:
            out = correlations([e.score for e in splits[split]], cos[split])
            return {"primary": out["spearman"], "primary_name": "spearman", **out}

        name = "bi-encoder cosine"
    else:
        from sklearn.linear_model import LogisticRegression

        clf = LogisticRegression(max_iter=1000, class_weight="balanced", random_state=seed)
        clf.fit(cos["train"][:, None], [e.label for e in splits["train"]])

        def scored(split: str) -> dict:
            pred = clf.predict(cos[split][:, None]).tolist()
            out = macro_f1([e.label for e in splits[split]], pred, label_names)
            return {"primary": out["macro_f1"], "primary_name": "macro_f1", **out}

        name = "bi-encoder cosine + logistic regression"
    return {
        "name": name,
        "validation": scored("validation"),
        "test": scored("test") if "test" in splits else None,
        "seconds": round(time.perf_counter() - started, 2),
    }
