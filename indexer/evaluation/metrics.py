"""Retrieval metrics as BEIR/MTEB compute them: nDCG@10 with graded gains from the qrels
(linear gain, log2 discount), recall@100 over relevant documents, MRR@10 over the first
relevant hit. Pure functions over ranked ids; no search.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np


def retrieval_scores(
    run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]
) -> dict:
    """nDCG@10, recall@100 and MRR@10 averaged over the judged queries.

    Args:
        run: query id -> ranked document ids (best first).
        qrels: query id -> {document id: relevance grade}.
    """
    ndcgs, recalls, mrrs = [], [], []
    for qid, judged in qrels.items():
        ranked = list(run.get(qid, []))
        gains = [judged.get(d, 0) for d in ranked[:10]]
        dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
        ideal = sorted(judged.values(), reverse=True)[:10]
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        ndcgs.append(dcg / idcg if idcg > 0 else 0.0)
        relevant = {d for d, g in judged.items() if g > 0}
        found = len(relevant & set(ranked[:100]))
        recalls.append(found / len(relevant) if relevant else 0.0)
        first = next((i for i, d in enumerate(ranked[:10]) if judged.get(d, 0) > 0), None)
        mrrs.append(1.0 / (first + 1) if first is not None else 0.0)
    return {
        "ndcg@10": round(float(np.mean(ndcgs)), 5),
        "recall@100": round(float(np.mean(recalls)), 5),
        "mrr@10": round(float(np.mean(mrrs)), 5),
        "queries": len(qrels),
    }
