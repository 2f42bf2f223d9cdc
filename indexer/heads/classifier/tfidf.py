"""TF-IDF + logistic-regression baseline for sentence classifiers, scored like the heads.

Word 1-2-grams, sublinear tf, balanced class weights; C picked on validation macro-F1.
Not used for taggers or pair heads (`heads.receipt.baseline_warning` says when a head does not
beat its type's baseline).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from indexer.heads.metrics import macro_f1

if TYPE_CHECKING:
    from indexer.heads.classifier.head_type import SentenceExample

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
