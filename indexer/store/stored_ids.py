"""A run's map of the ids a collection had stored when the run began: DuckDB's 64-bit
`hash(external_id)` -> doc id, two sorted numpy arrays (16 bytes a document), built by one
scan the first time a batch needs it. A batch's stored documents are then read by doc id from
the row groups that hold them (zone maps on `doc_id`), instead of by a join that scans every
stored id once per batch: that scan had made planning a 10M-document re-read cost 90 ms a
batch, growing with the store (docs/guides/scale.md; `benchmarks/plan_lookup.py`).

Exact, not probabilistic: a hash shared by two ids only adds a candidate row, which the
fetch's external id filter drops. Below `MIN_DOCUMENTS` stored documents the plain join is as
fast and nothing is built.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from indexer.store.core import StoreCore
from indexer.store.rows import StoredDoc

MIN_DOCUMENTS = 100_000
COUNT = "SELECT count(*) FROM documents WHERE collection = ? AND doc_id <= ?"
# unsorted and streamed: the writer's DuckDB keeps to 128 MB, less than 10M sorted pairs
SCAN = "SELECT hash(external_id) AS h, doc_id FROM documents WHERE collection = ? AND doc_id <= ?"
_SCAN_BATCH = 1 << 20
HASHES = "SELECT hash(v) AS h FROM {ids}"
FETCH = (
    "SELECT external_id, doc_id, content_hash, metadata FROM documents "
    "WHERE doc_id BETWEEN ? AND ? AND doc_id IN {docs} AND external_id IN {ids}"
)


class StoredIds:
    """The stored ids of one collection up to a doc id, for `DocumentWrites.existing`."""

    def __init__(self, core: StoreCore, collection: str, up_to: int):
        self.core = core
        hashes, doc_ids = [], []
        reader = core.con.execute(SCAN, [collection, up_to]).fetch_record_batch(_SCAN_BATCH)
        for batch in reader:
            hashes.append(batch.column(0).to_numpy().astype(np.uint64, copy=False))
            doc_ids.append(batch.column(1).to_numpy().astype(np.int64, copy=False))
        hashes_all = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
        order = np.argsort(hashes_all, kind="stable")
        self.hashes = hashes_all[order]
        self.doc_ids = (np.concatenate(doc_ids) if doc_ids else np.zeros(0, np.int64))[order]

    @classmethod
    def worth_it(cls, core: StoreCore, collection: str, up_to: int) -> bool:
        """Whether the collection holds enough documents for the map to pay."""
        return int(core.scalar(COUNT, [collection, up_to])) >= MIN_DOCUMENTS

    def existing(self, external_ids: Sequence[str]) -> dict[str, StoredDoc]:
        """The stored documents among `external_ids` (external id -> StoredDoc)."""
        listed = list(external_ids)
        with self.core.bound(listed, pa.string()) as ids:
            hashes = self.core.con.execute(HASHES.format(ids=ids)).fetchnumpy()["h"]
        hashes = np.asarray(hashes, dtype=np.uint64)
        left = np.searchsorted(self.hashes, hashes, side="left")
        right = np.searchsorted(self.hashes, hashes, side="right")
        hit = right > left
        if not hit.any():
            return {}
        docs = np.unique(np.concatenate([self.doc_ids[a:b] for a, b in zip(left[hit], right[hit])]))
        with self.core.bound(docs) as doc_view, self.core.bound(listed, pa.string()) as ids:
            rows = self.core.con.execute(
                FETCH.format(docs=doc_view, ids=ids), [int(docs[0]), int(docs[-1])]
            ).fetchall()
        return {r[0]: StoredDoc(r[1], r[2], r[3]) for r in rows}
