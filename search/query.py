"""Search API: encode a query with the store's encoder set-up, search FAISS (filters applied
inside the search as an id selector), fold chunks into documents, attach metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from indexer.config import Config
from indexer.errors import InputError
from indexer.store import QUERY_KEYS, Store
from indexer.vector_index import VectorIndex


@dataclass
class SearchHit:
    rank: int
    score: float
    id: str
    collection: str
    title: str | None
    text: str
    metadata: dict
    chunk_start: int
    chunk_end: int

    def to_dict(self) -> dict:
        return asdict(self)


def parse_where(items: Sequence[str]) -> list[tuple[str, str]]:
    """`FIELD=VALUE` strings -> pairs; the value may itself contain '='."""
    pairs = []
    for item in items:
        field_name, sep, value = item.partition("=")
        if not sep or not field_name:
            raise InputError(f"--where '{item}' must look like FIELD=VALUE")
        pairs.append((field_name, value))
    return pairs


class Searcher:
    """Read-only search over one store.

    Args:
        config: the configuration (model section must match the store's provenance).
        store: an open Store (read-only is enough).
        encoder: optional pre-loaded Encoder; loaded lazily otherwise.
    """

    def __init__(self, config: Config, store: Store, encoder=None):
        self.config = config
        self.store = store
        self._encoder = encoder
        self.index = VectorIndex.load(store.path, config.index, store.provenance(), QUERY_KEYS)

    @property
    def encoder(self):
        if self._encoder is None:
            from indexer.encoder import load_encoder

            self._encoder = load_encoder(self.config.model)
            self.store.check_provenance(self._encoder.provenance, QUERY_KEYS)
        return self._encoder

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        return self.encoder.encode_texts(list(queries))

    def search(self, query: str, k: int = 10, collection: str | None = None,
               where: Sequence[tuple[str, str]] = ()) -> list[SearchHit]:
        """Top-k documents for one query (a document scores as its best chunk)."""
        vector = self.encode_queries([query])
        return self.search_vectors(vector, k, collection, where)[0]

    def search_vectors(self, vectors: np.ndarray, k: int = 10, collection: str | None = None,
                       where: Sequence[tuple[str, str]] = ()) -> list[list[SearchHit]]:
        if self.index is None or self.index.ntotal == 0:
            return [[] for _ in range(len(vectors))]
        allowed = self.store.filter_chunk_ids(collection, where)
        if allowed is not None and len(allowed) == 0:
            return [[] for _ in range(len(vectors))]
        limit = self.index.ntotal if allowed is None else len(allowed)
        ranked = [self._best_chunks(v[None, :], k, allowed, limit) for v in vectors]
        hits_by_chunk = self.store.fetch_hits([c for r in ranked for c, _ in r])
        out = []
        for r in ranked:
            hits = []
            for rank, (chunk_id, score) in enumerate(r, start=1):
                h = hits_by_chunk[chunk_id]
                hits.append(SearchHit(rank, float(score), h.external_id, h.collection, h.title,
                                      h.text, h.metadata, h.start_char, h.end_char))
            out.append(hits)
        return out

    def _best_chunks(self, vector: np.ndarray, k: int, allowed, limit: int) -> list[tuple[int, float]]:
        """Best chunk per document, k documents; widens the chunk search until k are found."""
        fetch = min(limit, max(k * 4, 16))
        while True:
            scores, ids = self.index.search(vector, fetch, allowed)
            valid = ids[0] >= 0
            chunk_ids, chunk_scores = ids[0][valid], scores[0][valid]
            doc_of = self.store.chunk_doc_ids(chunk_ids)
            best: dict[int, tuple[int, float]] = {}
            for c, s in zip(chunk_ids.tolist(), chunk_scores.tolist()):
                d = doc_of[c]
                if d not in best:  # results come best first
                    best[d] = (c, s)
            if len(best) >= k or fetch >= limit:
                return list(best.values())[:k]
            fetch = min(limit, fetch * 4)
