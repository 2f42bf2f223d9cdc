"""Hand-made vectors stored without a model, for the tests that need exact cosines (near
duplicates, trends): orthonormal bases, noisy near-copies, and documents written into a store
with one chunk each and the vector index published."""

from __future__ import annotations

import numpy as np

from indexer.config import Config
from indexer.encode.encoder import Provenance
from indexer.indexing.steps import sync_vector_index
from indexer.ingest.readers import Record
from indexer.store import ChunkRows, Store, content_hash

DIM = 16
PROVENANCE = Provenance("tiny", "w0", "mean", True, 16, DIM, "float32")


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def add_docs(
    config: Config, docs: list[tuple[str, str, np.ndarray, dict]], collection: str = "c"
) -> list[int]:
    """Store (id, text, vector, metadata) documents, one chunk each, and publish the index."""
    with Store(config.store.path) as store:
        store.vectors.set_provenance(PROVENANCE)
        base = store.data_version()
        doc_ids = store.documents.next_ids("doc_ids", len(docs))
        records = [Record(i, t, None, m, "t.jsonl", n + 1) for n, (i, t, _, m) in enumerate(docs)]
        rows = [(d, r, content_hash(r)) for d, r in zip(doc_ids, records)]
        n = len(docs)
        chunks = ChunkRows(
            doc_ids,
            [0] * n,
            [0] * n,
            [len(t) for _, t, _, _ in docs],
            [3] * n,
            np.stack([v for _, _, v, _ in docs]),
        )
        added, _ = store.documents.write_batch(collection, rows, [], [], chunks, [], "test")
        sync_vector_index(store, config, added, [], base)
    return doc_ids


def basis(seed: int = 0, n: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((DIM, DIM)))
    return [q[:, i].astype(np.float32) for i in range(n)]  # orthonormal: cosine 0 between


def near(v: np.ndarray, seed: int, noise: float = 0.05) -> np.ndarray:
    return unit(v + noise * np.random.default_rng(seed).standard_normal(DIM).astype(np.float32))
