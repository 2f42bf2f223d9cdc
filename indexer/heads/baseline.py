"""TF-IDF + logistic-regression baseline for sentence classifiers, scored like the heads.

Word 1-2-grams, sublinear tf, balanced class weights; C picked on validation macro-F1.
Not used for NER. `baseline_warning` says when a head does not beat it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from indexer.heads.metrics import macro_f1

if TYPE_CHECKING:
    from indexer.heads.types.classifier import SentenceExample

C_GRID = (0.25, 1.0, 4.0)


def tfidf_baseline(
    train: Sequence[SentenceExample],
    validation: Sequence[SentenceExample],
    label_names: Sequence[str],
    test: Sequence[SentenceExample] | None = None,
    seed: int = 42,
) -> dict:
    """Fit on train, pick C on validation, score validation and test.

    Returns:
        {"name", "C", "validation": metrics, "test": metrics or None, "seconds"}.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    started = time.perf_counter()
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    x_train = vectorizer.fit_transform([e.text for e in train])
    y_train = [e.label for e in train]
    x_val = vectorizer.transform([e.text for e in validation])
    y_val = [e.label for e in validation]
    best = None
    for c in C_GRID:
        clf = LogisticRegression(C=c, max_iter=2000, class_weight="balanced", random_state=seed)
        clf.fit(x_train, y_train)
        scores = macro_f1(y_val, clf.predict(x_val).tolist(), label_names)
        if best is None or scores["macro_f1"] > best[1]["macro_f1"]:
            best = (clf, scores, c)
    clf, val_scores, c = best  # type: ignore[misc]
    test_scores = None
    if test:
        pred = clf.predict(vectorizer.transform([e.text for e in test])).tolist()
        test_scores = macro_f1([e.label for e in test], pred, label_names)
    return {
        "name": "tfidf-1-2gram+logistic-regression",
        "C": c,
        "validation": val_scores,
        "test": test_scores,
        "seconds": round(time.perf_counter() - started, 2),
    }


def baseline_warning(metric: str, head_validation: float, baseline: dict | None,
                     n_validation: int, tried: dict) -> dict | None:
    """A warning when the head's best validation score is below the baseline's, or within
    its noise: two binomial standard errors of the baseline's score on `n_validation`
    examples (about a 95 % band).

    Args:
        tried: {"auto_epochs": bool, "head_only": bool}, to say what is left to try.
    Returns:
        None, or {"code", "message", "head_validation", "baseline_validation", "noise"}.
    """
    if not baseline or not baseline.get("validation") or n_validation < 1:
        return None
    base = float(baseline["validation"][metric])
    noise = 2 * math.sqrt(max(base * (1 - base), 0.0) / n_validation)
    if head_validation >= base + noise:
        return None
    where = "below" if head_validation < base else f"within the noise (±{noise:.3f}) of"
    ideas = []
    if not tried.get("auto_epochs"):
        ideas.append("--epochs auto (train until validation stops improving)")
    if not tried.get("head_only"):
        ideas.append("--head-only (a head on the frozen sentence vector)")
    ideas.append("more labelled data")
    message = (f"the head's best validation {metric} {head_validation:.4f} is {where} the "
               f"{baseline['name']} baseline's {base:.4f}; try {', '.join(ideas)}")
    return {"code": "below_baseline" if head_validation < base else "near_baseline",
            "message": message, "head_validation": head_validation,
            "baseline_validation": base, "noise": round(noise, 4)}
