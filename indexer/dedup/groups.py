"""Group a collection's near-duplicates and keep the groups current: checks the parameters
and the store first (nothing changes on a bad one), finds candidate pairs
(`indexer.dedup.neighbours`), drops pairs whose words differ too much (`indexer.dedup.text`;
in a full run query batch by query batch, so only the pairs that pass are ever held),
joins the rest by single linkage and stores the groups (`store.dedup.write`).

The first run on a collection groups all of it; later runs place only the documents added or
changed since (searched against the published index), merging groups they bridge. A changed
threshold or text check, `rebuild`, or more new documents than grouped ones regroups all.
Deleted documents leave their groups; a group a deletion would split stays one group until a
rebuild.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from indexer.config import Config
from indexer.core.timeutil import utc_now
from indexer.dedup.neighbours import Pairs, all_pairs, new_pairs
from indexer.dedup.text import WordSets, same_words, word_set
from indexer.errors import InputError, StoreError, VectorIndexError
from indexer.records.provenance import QUERY_KEYS
from indexer.store import NEXT_GENERATION, Store

log = logging.getLogger(__name__)

INCREMENTAL_LIMIT = 50_000  # more new documents than this: regroup the whole collection


@dataclass(frozen=True)
class DedupParams:
    """What makes two documents copies: cosine >= threshold and word Jaccard >= min_jaccard."""

    threshold: float
    min_jaccard: float
    min_size: int
    neighbours: int

    @classmethod
    def from_config(
        cls,
        config: Config,
        threshold: float | None = None,
        min_size: int | None = None,
        min_jaccard: float | None = None,
    ) -> DedupParams:
        """The configured `dedup` section with the given overrides, checked.

        Raises:
            InputError: naming the bad value and the valid range.
        """
        d = config.dedup
        params = cls(
            threshold=d.threshold if threshold is None else float(threshold),
            min_jaccard=d.min_jaccard if min_jaccard is None else float(min_jaccard),
            min_size=d.min_size if min_size is None else int(min_size),
            neighbours=d.neighbours,
        )
        if not 0 < params.threshold <= 1:
            raise InputError(
                f"--threshold {params.threshold} is outside (0, 1]: give the cosine "
                "above which two documents are copies, e.g. 0.9"
            )
        if not 0 <= params.min_jaccard <= 1:
            raise InputError(f"--min-jaccard {params.min_jaccard} is outside [0, 1]")
        if params.min_size < 2:
            raise InputError(
                f"--min-size {params.min_size} must be at least 2 (a wave is two or more documents)"
            )
        return params

    def same_grouping(self, state: dict) -> bool:
        """True when a stored grouping was made with the same pair rule (min_size only lists)."""
        return (
            abs(state["threshold"] - self.threshold) < 1e-12
            and abs(state["min_jaccard"] - self.min_jaccard) < 1e-12
            and state["neighbours"] == self.neighbours
        )

    def state(self, summary: dict) -> dict:
        return {
            "threshold": self.threshold,
            "min_jaccard": self.min_jaccard,
            "min_size": self.min_size,
            "neighbours": self.neighbours,
            "summary": summary,
        }


class UnionFind:
    """Disjoint sets over hashable keys, with path halving."""

    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        parent = self.parent
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb

    def components(self) -> dict:
        """{root: [keys]} of every key seen."""
        out: dict = {}
        for x in list(self.parent):
            out.setdefault(self.find(x), []).append(x)
        return out


def check_store(path: Path, collection: str) -> None:
    """Refuse a store being rebuilt by `bertindex reindex` before anything is opened.

    Raises:
        StoreError: naming the folder and what to do.
    """
    if (path / NEXT_GENERATION).exists():
        raise StoreError(
            f"store {path} is being rebuilt by `bertindex reindex` "
            f"({path / NEXT_GENERATION} exists); nothing was changed: run dedup on "
            f"collection '{collection}' once the reindex has finished"
        )


TEXT_CHUNK = 1_000_000  # pairs checked at a time
STREAM_ROWS = 16_384  # vectors a streamed batch of the full grouping (Arrow copies transient)


def text_filter(store: Store, pairs: Pairs, min_jaccard: float) -> Pairs:
    """Keep the pairs whose normalised words pass `same_words` (0: keep every pair).

    Each document's words are kept once, as a tuple of interned strings (a fraction of a set's
    memory), and the pairs are checked a million at a time.
    """
    if min_jaccard <= 0 or not len(pairs.a):
        return pairs
    ends = np.unique(np.concatenate([pairs.a, pairs.b]))
    words = {
        d: tuple(sys.intern(w) for w in word_set(t)) for d, t in store.dedup.texts_of(ends).items()
    }
    keep = np.zeros(len(pairs.a), dtype=bool)
    empty = ()
    for start in range(0, len(pairs.a), TEXT_CHUNK):
        a = pairs.a[start : start + TEXT_CHUNK].tolist()
        b = pairs.b[start : start + TEXT_CHUNK].tolist()
        keep[start : start + len(a)] = [
            same_words(frozenset(words.get(x, empty)), frozenset(words.get(y, empty)), min_jaccard)
            for x, y in zip(a, b)
        ]
    return Pairs(pairs.a[keep], pairs.b[keep], pairs.score[keep], pairs.searched)


def group_all(doc_ids: np.ndarray, pairs: Pairs) -> np.ndarray:
    """Group id (smallest doc id of its component) of each doc id, linked by the pairs.

    Args:
        doc_ids: ascending doc ids; every pair's ends are among them.
        pairs: the links.
    Returns:
        int64 group ids aligned with `doc_ids`.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(doc_ids)
    a, b = np.searchsorted(doc_ids, pairs.a), np.searchsorted(doc_ids, pairs.b)
    graph = coo_matrix((np.ones(len(a), np.int8), (a, b)), shape=(n, n))
    count, component = connected_components(graph, directed=False)
    lowest = np.full(count, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(lowest, component, doc_ids)
    return lowest[component]


def group_new(
    new_docs: np.ndarray, pairs: Pairs, group_of: dict[int, int]
) -> tuple[np.ndarray, dict[int, int]]:
    """Place new documents into the stored groups.

    Args:
        new_docs: the new documents' ids.
        pairs: pairs among new documents and between new and grouped ones.
        group_of: {grouped doc id: its stored group id} for the grouped side of the pairs.
    Returns:
        (group id per new doc, {stored group id: the group it merged into}).
    """
    new = set(new_docs.tolist())
    uf = UnionFind()

    def key(d: int):
        return ("new", d) if d in new else ("group", group_of[d])

    for a, b in zip(pairs.a.tolist(), pairs.b.tolist()):
        uf.union(key(a), key(b))
    label, regroup = {}, {}
    for members in uf.components().values():
        low = min(x[1] for x in members)
        for kind, value in members:
            if kind == "new":
                label[value] = low
            elif value != low:
                regroup[value] = low
    groups = np.array([label.get(int(d), int(d)) for d in new_docs], dtype=np.int64)
    return groups, regroup


def run_dedup(
    config: Config,
    collection: str = "default",
    threshold: float | None = None,
    min_size: int | None = None,
    min_jaccard: float | None = None,
    rebuild: bool = False,
    publish: bool = True,
) -> dict:
    """Group a collection's near-duplicates, or place its new documents into its groups.

    Args:
        config: the configuration (`dedup`, `index`, `store.path`).
        collection: the collection.
        threshold, min_size, min_jaccard: override `dedup.*` (None: configured).
        rebuild: regroup the whole collection even when an incremental run would do.
        publish: publish a snapshot afterwards, so that searches see the groups.
    Returns:
        {"collection", "mode" ("full" | "incremental"), "reason", "documents", "searched"
        (vectors searched for neighbours), "pairs", "groups" (of at least min_size),
        "grouped_documents", "seconds", params...}.
    Raises:
        InputError: a parameter out of range. StoreError: no such store, a store being
        rebuilt, or a collection without vectors. Nothing is changed on any of them.
    """
    params = DedupParams.from_config(config, threshold, min_size, min_jaccard)
    path = Path(config.store.path)
    check_store(path, collection)
    if not (path / "store.duckdb").is_file():
        raise StoreError(
            f"no store at {path}; index something first with `bertindex index PATH --store {path}`"
        )
    started = time.perf_counter()
    begun = utc_now()
    with Store(path) as store:
        n_vectors = store.dedup.collection_vector_count(collection)
        if n_vectors == 0:
            known = ", ".join(c["collection"] for c in store.counts.collections()) or "none"
            raise StoreError(
                f"collection '{collection}' has no stored vectors in {path}; "
                f"nothing was changed (collections: {known})"
            )
        base = store.data_version()
        with store.runs.recorded_run("dedup", started=begun) as run:
            summary = _group(store, config, collection, params, rebuild)
            summary["seconds"] = round(time.perf_counter() - started, 3)
            run.summary = summary
        if publish:
            from indexer.indexing.steps import sync_vector_index

            # nothing added or removed since `base`: the index is saved again, not rebuilt
            summary["index"] = sync_vector_index(store, config, [], [], base)
    return summary


def _group(
    store: Store, config: Config, collection: str, params: DedupParams, rebuild: bool
) -> dict:
    base = store.data_version()
    state = store.dedup.state(collection)
    doc_ids, chunk_ids = store.dedup.first_chunks(collection)
    order = np.argsort(chunk_ids)
    chunk_doc = (chunk_ids[order], doc_ids[order])
    new_docs, new_chunks = store.dedup.first_chunks(collection, pending_only=True)
    seen = store.dedup.seen_first_chunks(collection)
    reason, index = _full_reason(
        store, config, params, state, rebuild, len(new_docs), len(seen), base
    )
    if reason:
        accept = None
        if params.min_jaccard > 0:  # checked query batch by query batch, not on all pairs
            words = WordSets(store.dedup.iter_texts(collection))
            accept = partial(words.same, min_jaccard=params.min_jaccard)
        provenance = store.vectors.provenance()
        if provenance is None:  # the collection's vectors are stored, and with them this
            raise StoreError(f"{store.path}: the stored vectors have no provenance")
        pairs = all_pairs(
            lambda: store.dedup.iter_first_vectors(collection, STREAM_ROWS),
            len(doc_ids),
            provenance.dim,
            params.threshold,
            params.neighbours,
            chunk_doc,
            accept=accept,
        )
        regroup: dict[int, int] = {}
        groups = group_all(doc_ids, pairs)
        written = doc_ids
    else:
        new_order = np.argsort(new_chunks)
        new_docs, new_chunks = new_docs[new_order], new_chunks[new_order]
        pairs = new_pairs(
            new_chunks,
            seen,
            index,
            params.threshold,
            params.neighbours,
            chunk_doc,
            store.vectors.fetch,
        )
        pairs = text_filter(store, pairs, params.min_jaccard)
        new = set(new_docs.tolist())
        old = {int(d) for d in np.concatenate([pairs.a, pairs.b]).tolist() if int(d) not in new}
        group_of = store.dedup.groups_of(old)
        groups, regroup = group_new(new_docs, pairs, group_of)
        written = new_docs
    summary = {
        "collection": collection,
        "mode": "full" if reason else "incremental",
        "reason": reason or "new or changed documents only",
        "documents": len(doc_ids),
        "placed": len(written),
        "searched": int(pairs.searched),
        "pairs": len(pairs.a),
        "threshold": params.threshold,
        "min_jaccard": params.min_jaccard,
        "min_size": params.min_size,
    }
    store.dedup.write(
        collection, written, groups, regroup, full=bool(reason), state=params.state(summary)
    )
    summary["groups"], summary["grouped_documents"] = store.dedup.group_counts(
        collection, params.min_size
    )
    return summary


def _full_reason(
    store: Store,
    config: Config,
    params: DedupParams,
    state: dict | None,
    rebuild: bool,
    n_new: int,
    n_seen: int,
    base: int,
):
    """Why the whole collection must be grouped again (None when only new documents need
    placing), and the published index to place them with."""
    if rebuild:
        return "rebuild asked for", None
    if state is None or n_seen == 0:
        return "first grouping of the collection", None
    if not params.same_grouping(state):
        return (
            f"threshold/text check changed (stored {state['threshold']}/"
            f"{state['min_jaccard']}, now {params.threshold}/{params.min_jaccard})"
        ), None
    if n_new > min(INCREMENTAL_LIMIT, n_seen):
        return (
            f"{n_new} new documents, more than the {n_seen} grouped (or {INCREMENTAL_LIMIT})"
        ), None
    if n_new == 0:
        return None, None
    from indexer.index.vector import VectorIndex

    try:
        index = VectorIndex.load(store.path, config.index, store.vectors.provenance(), QUERY_KEYS)
    except VectorIndexError as exc:
        return f"published index unusable ({exc})", None
    if index is None or index.data_version not in (None, base):
        return "the published index is behind the store", None
    return None, index


def keep_current(config: Config) -> dict:
    """Place new documents into the groups of every collection grouped before, with the
    parameters it was grouped with (what the index and annotate flows call after a run).

    Returns:
        {collection: run summary}; empty when `dedup.keep_current` is off or nothing was
        grouped yet.
    """
    path = Path(config.store.path)
    if not config.dedup.keep_current or not (path / "store.duckdb").is_file():
        return {}
    with Store(path, read_only=True, snapshot=False) as store:
        states = {c: store.dedup.state(c) for c in store.dedup.collections()}
    out = {}
    for collection, state in states.items():
        if state is None:  # every collection listed was grouped, with its parameters kept
            raise StoreError(f"{path}: collection '{collection}' has no dedup state")
        out[collection] = run_dedup(
            config, collection, state["threshold"], state["min_size"], state["min_jaccard"]
        )
    return out
