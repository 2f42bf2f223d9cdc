"""Best-chunk ranking: a document scores as its best chunk, so a ranking of chunks becomes a
ranking of documents. One pure numpy function, shared by the Searcher (over FAISS hits) and the
index-time fusion tuning (over exact scores of every chunk); no I/O.
"""

from __future__ import annotations

import numpy as np


def rank_by_best_chunk(scores: np.ndarray, owners: np.ndarray, k: int) -> np.ndarray:
    """The best chunk of each of the k best documents, a document scored by its best chunk.

    Args:
        scores: (chunks,) each chunk's score, higher is better, in any order (FAISS hits come
            best first).
        owners: (chunks,) each chunk's document id.
        k: documents wanted.
    Returns:
        (≤ k,) positions into `scores`, one per document, best document first; equal scores
        keep their order in `scores` (a chunk that comes first wins, as does its document).
    """
    order = np.argsort(-scores, kind="stable")  # best first; ties keep their positions
    first = np.unique(owners[order], return_index=True)[1]  # each document's best chunk
    return order[np.sort(first)[:k]]
