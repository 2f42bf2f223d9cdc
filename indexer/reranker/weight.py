"""A trained reranker's share of the search order (`RERANK_WEIGHT_KEY` in its config.json):
the share with the best nDCG@10 on held-out queries, the lowest one on a near tie. Applied at
search time by `indexer.query.rerank`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from indexer.evaluation.metrics import retrieval_scores
from indexer.heads.pair.keys import RERANK_WEIGHT_KEY
from indexer.query.hits import SearchHit
from indexer.query.rerank import hit_passage, rerank_order

RERANK_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))  # 0 (first stage) .. 1 (head alone)
# held-out nDCG@10 within this of the best counts as a tie, and a tie takes the lowest share:
# a few hundred held-out queries cannot tell such shares apart (a SciFact reranker's curve was
# flat within 0.0003 from 0.3 to 0.8), and the lowest moves the first stage least
RERANK_TIE = 0.002


def choose_rerank_weight(
    runs: Sequence[tuple[Sequence[SearchHit], Sequence[float]]],
    qrels: Mapping[str, Mapping[str, int]],
    query_ids: Sequence[str],
) -> dict:
    """The head's share (`RERANK_WEIGHTS`) with the best nDCG@10 over held-out queries; the
    lowest share within `RERANK_TIE` of the best on a tie (0 keeps the first stage's order: the
    head adds nothing).

    Args:
        runs: per query, its first-stage hits (top depth) and the head's scores of them.
        qrels: query id -> judged documents; query_ids: the queries of `runs`, in order.
    Returns:
        {"weight", "ndcg@10": by weight, "queries"} for the receipt.
    """
    tried = {}
    for weight in RERANK_WEIGHTS:
        run = {}
        for q, (hits, scores) in zip(query_ids, runs):
            order = rerank_order([h.score for h in hits], scores, weight)
            run[q] = [hits[i].id for i in order]
        tried[weight] = retrieval_scores(run, {q: qrels[q] for q in query_ids})["ndcg@10"]
    best = lowest_of_the_best(tried)
    return {
        "weight": best,
        "ndcg@10": {str(w): round(v, 4) for w, v in tried.items()},
        "queries": len(query_ids),
        "tie": RERANK_TIE,
    }


def lowest_of_the_best(tried: Mapping[float, float], tie: float = RERANK_TIE) -> float:
    """The lowest share whose score lies within `tie` of the best one's."""
    top = max(tried.values())
    return min(w for w, score in tried.items() if score >= top - tie)


def tune_rerank_weight(searcher, collection: str, head: Path, queries: dict, qrels: dict) -> dict:
    """Choose a trained reranker's share of the order on held-out queries (their hybrid top
    `search.rerank_depth` hits, `choose_rerank_weight`) and keep it in the
    head's config.json."""
    from indexer.heads.pair.scorer import PairScorer  # torch loads only when a weight is tuned

    depth = searcher.config.search.rerank_depth
    ids = list(queries)
    results = searcher.search_many(
        [queries[q] for q in ids], depth, collection=collection, mode="hybrid", rerank=False
    )
    scorer = PairScorer(head)
    runs = [
        (hits, [float(x) for x in scorer.score([(queries[q], hit_passage(h)) for h in hits])])
        for q, hits in zip(ids, results)
    ]
    chosen = choose_rerank_weight(runs, qrels, ids)
    config_file = head / "config.json"
    config = json.loads(config_file.read_text())
    config[RERANK_WEIGHT_KEY] = chosen["weight"]
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return {
        **chosen,
        "depth": depth,
        "mode": "hybrid",
        "rule": "the head's share w of (1 - w) * first stage + w * head, each min-max "
        "scaled over the reranked hits, by nDCG@10 on the held-out queries; the "
        f"lowest share within {RERANK_TIE} of the best",
    }
