"""Rerank search hits with a pair head (a cross-encoder).

`rerank_hits` scores the query with each of the top `depth` hits' best window (the chunk the
dense side matched; the whole text, cut by the scorer, for a keyword-only hit; the title before
it), orders those hits by that score (ties keep the first-stage order) and leaves the hits
below `depth` in their order beneath: no hit is dropped or added, `score` stays the first
stage's and `rerank` holds the head's. A head trained by `train rerank` carries a weight
(`RERANK_WEIGHT_KEY` in its config.json, chosen on held-out queries by
`indexer.reranker.weight.choose_rerank_weight`): the order is by `(1 - w) * first + w * head`,
each min-max scaled over the reranked hits, so a reranker that knows less than the first stage
moves it less; a head without one (a `train pair` head) orders by its score alone (w = 1). Does
not train or mine pairs (`indexer.reranker`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from indexer.heads.pair.keys import RERANK_WEIGHT_KEY
from indexer.query.hits import SearchHit


def passage_of(title: str | None, text: str, start: int, end: int) -> str:
    """The text a reranker reads for a hit: its title, then its window `text[start:end]`."""
    window = text[start:end]
    return f"{title} {window}" if title else window


def hit_passage(hit: SearchHit) -> str:
    return passage_of(hit.title, hit.text, hit.chunk_start, hit.chunk_end)


def rerank_weight(scorer) -> float:
    """The head's share of the order: its config's `RERANK_WEIGHT_KEY`, else 1 (alone)."""
    config = getattr(getattr(scorer, "model", None), "config", None)
    weight = getattr(config, RERANK_WEIGHT_KEY, None)
    return 1.0 if weight is None else float(weight)


def _scaled(values: Sequence[float]) -> list[float]:
    """Min-max to 0..1 (all 0 when the values are equal)."""
    low, high = min(values), max(values)
    return [(v - low) / (high - low) if high > low else 0.0 for v in values]


def interpolated(first: Sequence[float], head: Sequence[float], weight: float) -> list[float]:
    """`(1 - weight) * first + weight * head`, each min-max scaled over these hits."""
    if not first:
        return []
    return [(1.0 - weight) * f + weight * h for f, h in zip(_scaled(first), _scaled(head))]


def rerank_order(first: Sequence[float], head: Sequence[float], weight: float) -> list[int]:
    """Indexes of the hits in reranked order (ties keep the first-stage order)."""
    mix = interpolated(first, head, weight) if weight < 1.0 else [float(h) for h in head]
    return sorted(range(len(mix)), key=lambda i: (-mix[i], i))


def rerank_hits(
    query: str, hits: Sequence[SearchHit], scorer, depth: int, weight: float | None = None
) -> list[SearchHit]:
    """The hits with the top `depth` reordered by the head's score of (query, passage), mixed
    with the first stage's by the head's weight (see the module).

    Args:
        scorer: has `score(pairs) -> scores` (`indexer.heads.pair.scorer.PairScorer`).
        depth: how many of the first hits to rerank (>= 1).
        weight: the head's share (None: the head's own, `rerank_weight`).
    Returns:
        The same hits, renumbered: the reranked ones first, best first, each with `rerank`;
        those below `depth` after them, in their order, `rerank` None.
    """
    if depth < 1:
        raise ValueError(f"rerank depth must be >= 1, not {depth}")
    head, tail = list(hits[:depth]), list(hits[depth:])
    scores = scorer.score([(query, hit_passage(h)) for h in head]) if head else []
    weight = rerank_weight(scorer) if weight is None else weight
    order = rerank_order([h.score for h in head], [float(x) for x in scores], weight)
    ranked = [dataclasses.replace(head[i], rerank=float(scores[i])) for i in order] + tail
    return [dataclasses.replace(h, rank=n) for n, h in enumerate(ranked, start=1)]
