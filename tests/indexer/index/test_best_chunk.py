"""`rank_by_best_chunk`, the one best-chunk ranking the Searcher and the fusion tuning share: a
document scores as its best chunk, by hand and against a plain loop."""

from __future__ import annotations

import numpy as np

from indexer.index.best_chunk import rank_by_best_chunk


def test_a_document_scores_as_its_best_chunk():
    scores = np.asarray([0.2, 0.9, 0.5, 0.7, 0.1], np.float32)
    owners = np.asarray([10, 11, 10, 12, 11])
    best = rank_by_best_chunk(scores, owners, k=5)
    assert best.tolist() == [1, 3, 2]  # doc 11 (0.9), doc 12 (0.7), doc 10 (its 0.5, not 0.2)
    assert rank_by_best_chunk(scores, owners, k=2).tolist() == [1, 3]
    assert rank_by_best_chunk(scores[:0], owners[:0], k=3).tolist() == []


def test_equal_scores_keep_their_order():
    """FAISS hits come best first: on a tie the chunk (and document) listed first wins."""
    scores = np.asarray([0.8, 0.8, 0.8, 0.3], np.float32)
    owners = np.asarray([7, 5, 7, 5])
    assert rank_by_best_chunk(scores, owners, k=2).tolist() == [0, 1]


def test_agrees_with_a_loop_over_the_chunks():
    rng = np.random.default_rng(0)
    scores = rng.random(500).astype(np.float32)
    owners = rng.integers(0, 120, 500)
    best: dict[int, int] = {}
    for pos, (score, doc) in enumerate(zip(scores, owners)):
        if doc not in best or score > scores[best[doc]]:
            best[int(doc)] = pos
    expected = sorted(best.values(), key=lambda p: -scores[p])[:30]
    assert rank_by_best_chunk(scores, owners, k=30).tolist() == expected
