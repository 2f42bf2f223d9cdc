"""Rank fusion for hybrid search: reciprocal rank fusion and a min-max-normalised weighted sum.

Pure functions over ranked (id, score) lists, best first; no I/O. Ties keep the order in which
ids were first seen (first list first), so results are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Ranked = Sequence[tuple[int, float]]  # (id, score), best first

# The dense weight of `search.dense_weight: auto` on a store with no tuning of its own
# (`indexer.indexing.fusion_tune`): the fixed weight chosen on SciFact train queries
# (docs/benchmarks.md, Fusion across collections).
FALLBACK_DENSE_WEIGHT = 0.6


def rrf(
    rankings: Sequence[Ranked], k: int = 60, weights: Sequence[float] | None = None
) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: score(d) = Σ_lists weight / (k + rank of d), rank from 1.

    Args:
        rankings: ranked lists; only the order matters, their scores are ignored.
        k: the RRF constant (60 in Cormack et al. 2009); larger flattens the rank curve.
        weights: one per list (default 1 each).
    Returns:
        (id, fused score), best first, every id of every list once.
    """
    weights = weights or [1.0] * len(rankings)
    fused: dict[int, float] = {}
    for ranked, weight in zip(rankings, weights):
        for rank, (item, _) in enumerate(ranked, start=1):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    return _sorted(fused)


def weighted(rankings: Sequence[Ranked], weights: Sequence[float]) -> list[tuple[int, float]]:
    """Weighted sum of min-max-normalised scores: Σ_lists weight · (s - min) / (max - min).

    Each list is normalised over its own results (its best gets 1, its worst 0; a list whose
    scores are all equal gets 1 throughout). An id missing from a list gets 0 from it.

    Args:
        rankings: ranked (id, score) lists, higher score better.
        weights: one weight per list.
    Returns:
        (id, fused score), best first, every id of every list once.
    """

    def span(scores: list[float]) -> float:
        return max(scores) - min(scores)

    return _scaled_sum(rankings, weights, span)


def zscore(rankings: Sequence[Ranked], weights: Sequence[float]) -> list[tuple[int, float]]:
    """Weighted sum of per-query standardised scores: Σ_lists weight · (s - min) / std.

    Each list is scaled by the spread of its own scores (standard deviation over its
    results) instead of their range, so one outlying top score does not squash the rest; an
    id missing from a list gets that list's lowest value (0), as in `weighted`.

    Args:
        rankings: ranked (id, score) lists, higher score better.
        weights: one weight per list.
    Returns:
        (id, fused score), best first, every id of every list once.
    """

    def std(scores: list[float]) -> float:
        mean = sum(scores) / len(scores)
        return (sum((s - mean) ** 2 for s in scores) / len(scores)) ** 0.5

    return _scaled_sum(rankings, weights, std)


def _scaled_sum(
    rankings: Sequence[Ranked], weights: Sequence[float], scale: Callable[[list[float]], float]
) -> list[tuple[int, float]]:
    """Σ_lists weight · (s - min) / scale(list's scores); a list whose scale is 0 gives 1."""
    if len(weights) != len(rankings):
        raise ValueError(f"{len(rankings)} rankings but {len(weights)} weights")
    fused: dict[int, float] = {}
    for ranked, weight in zip(rankings, weights):
        if not ranked:
            continue
        scores = [s for _, s in ranked]
        low, size = min(scores), scale(scores)
        for item, score in ranked:
            norm = (score - low) / size if size > 0 else 1.0
            fused[item] = fused.get(item, 0.0) + weight * norm
    return _sorted(fused)


def _sorted(fused: dict[int, float]) -> list[tuple[int, float]]:
    order = {item: i for i, item in enumerate(fused)}  # first seen wins ties
    return sorted(fused.items(), key=lambda pair: (-pair[1], order[pair[0]]))
