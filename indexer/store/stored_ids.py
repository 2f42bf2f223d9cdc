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
# a batch's stored rows by doc id; hash collisions are dropped by their external ids in Python
# (a semi-join on the batch's ids in the query cost 9.2 ms a batch of 2,048, against 4.8 for
# the range alone, at 1M: `benchmarks/plan_lookup.py`). Where the batch's doc ids fill at
# least half their range (a re-read in file order) the range alone is read.
FETCH_RANGE = (
    "SELECT external_id, doc_id, content_hash, metadata FROM documents "
    "WHERE doc_id BETWEEN ? AND ? AND collection = ?"
)
FETCH = FETCH_RANGE + " AND doc_id IN {docs}"


class StoredIds:
    """The stored ids of one collection up to a doc id, for `DocumentWrites.existing`."""

    def __init__(self, core: StoreCore, collection: str, up_to: int):
        self.core, self.collection = core, collection
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
        docs = self._doc_ids_of(np.asarray(hashes, dtype=np.uint64))
        if not len(docs):
            return {}
        low, high = int(docs[0]), int(docs[-1])
        if high - low + 1 <= 2 * len(docs):
            rows = self.core.con.execute(FETCH_RANGE, [low, high, self.collection]).fetchall()
        else:
            with self.core.bound(docs) as doc_view:
                query = FETCH.format(docs=doc_view)
                rows = self.core.con.execute(query, [low, high, self.collection]).fetchall()
        wanted = set(listed)
        return {r[0]: StoredDoc(r[1], r[2], r[3]) for r in rows if r[0] in wanted}

    def _doc_ids_of(self, hashes: np.ndarray) -> np.ndarray:
        """The sorted doc ids stored under `hashes` (several where stored ids share a hash)."""
        n = len(self.hashes)
        if not n:
            return np.zeros(0, np.int64)
        left = np.searchsorted(self.hashes, hashes)
        at = np.minimum(left, n - 1)
        hit = self.hashes[at] == hashes
        nxt = np.minimum(at + 1, n - 1)
        shared = hit & (nxt != at) & (self.hashes[nxt] == hashes)  # a hash held twice: rare
        docs = self.doc_ids[at[hit]]
        if shared.any():
            right = np.searchsorted(self.hashes, hashes[shared], side="right")
            extra = [self.doc_ids[a:b] for a, b in zip(left[shared], right)]
            docs = np.concatenate([docs, *extra])
        return np.unique(docs)
