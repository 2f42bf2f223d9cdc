"""Scores for heads: macro-F1 for classifiers, entity-F1 over BIO spans for NER, Spearman and
Pearson for a regression pair head.

Entity-F1 counts a predicted entity as correct only when its type and both boundaries
match a gold entity; it equals seqeval's default (conlleval-style) micro F1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from indexer.heads.labels import bio_spans


def _prf(tp: int, n_pred: int, n_gold: int) -> tuple[float, float, float]:
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def macro_f1(gold: Sequence[int], pred: Sequence[int], label_names: Sequence[str]) -> dict:
    """Macro-averaged F1 over the classes seen in gold or predictions (as sklearn's default).

    Args:
        gold: gold label ids.
        pred: predicted label ids, same length.
        label_names: names indexed by label id.
    Returns:
        {"macro_f1", "accuracy", "per_class": {name: {precision, recall, f1, support}}}.
    """
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold labels but {len(pred)} predictions")
    tp = Counter(g for g, p in zip(gold, pred) if g == p)
    n_gold, n_pred = Counter(gold), Counter(pred)
    per_class = {}
    f1s = []
    for label_id, name in enumerate(label_names):
        p, r, f = _prf(tp[label_id], n_pred[label_id], n_gold[label_id])
        per_class[name] = {"precision": p, "recall": r, "f1": f, "support": n_gold[label_id]}
        if n_gold[label_id] or n_pred[label_id]:
            f1s.append(f)
    return {
        "macro_f1": sum(f1s) / len(f1s) if f1s else 0.0,
        "accuracy": sum(tp.values()) / len(gold) if gold else 0.0,
        "per_class": per_class,
    }


def entity_f1(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """Micro entity-F1 over BIO spans: exact type and boundaries.

    Args:
        gold: one tag sequence per sentence.
        pred: predicted tag sequences, same lengths.
    Returns:
        {"entity_f1", "precision", "recall", "gold_entities", "predicted_entities",
         "per_type": {type: {precision, recall, f1, support, predicted}}}.
    """
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    gold_set: set[tuple[int, str, int, int]] = set()
    pred_set: set[tuple[int, str, int, int]] = set()
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
        gold_set.update((i, *span) for span in bio_spans(g))
        pred_set.update((i, *span) for span in bio_spans(p))
    return span_f1(gold_set, pred_set)


def span_f1(gold_set: set[tuple], pred_set: set[tuple]) -> dict:
    """Micro entity-F1 of sets of (item, type, start, end) spans (word or character offsets):
    what `entity_f1` returns, for spans already read."""
    hits = gold_set & pred_set
    kinds = sorted({s[1] for s in gold_set | pred_set})
    per_type = {}
    for kind in kinds:
        t = sum(1 for s in hits if s[1] == kind)
        n_p = sum(1 for s in pred_set if s[1] == kind)
        n_g = sum(1 for s in gold_set if s[1] == kind)
        p, r, f = _prf(t, n_p, n_g)
        per_type[kind] = {"precision": p, "recall": r, "f1": f, "support": n_g, "predicted": n_p}
    precision, recall, f1 = _prf(len(hits), len(pred_set), len(gold_set))
    return {
        "entity_f1": f1,
        "precision": precision,
        "recall": recall,
        "gold_entities": len(gold_set),
        "predicted_entities": len(pred_set),
        "per_type": per_type,
    }


def _average_ranks(x) -> np.ndarray:
    """1-based ranks of `x`, ties sharing their average rank."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])  # first of each tie run
    ends = np.r_[starts[1:], len(x)]
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat((starts + ends - 1) / 2.0 + 1, ends - starts)
    return ranks


def correlations(gold: Sequence[float] | np.ndarray, pred: Sequence[float] | np.ndarray) -> dict:
    """Spearman and Pearson correlation of predicted against gold scores.

    Args:
        gold: gold scores (e.g. STS-B's 0-5).
        pred: predicted scores, same length.
    Returns:
        {"spearman", "pearson", "pairs"}; a constant side correlates 0.0.
    """
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold scores but {len(pred)} predictions")

    def corr(a, b) -> float:
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if len(a) < 2 or a.std() == 0 or b.std() == 0:
            return 0.0
        return float(np.corrcoef(a, b)[0, 1])

    return {
        "spearman": corr(_average_ranks(gold), _average_ranks(pred)),
        "pearson": corr(gold, pred),
        "pairs": len(gold),
    }
