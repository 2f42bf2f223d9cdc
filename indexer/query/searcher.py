"""Search API: dense (FAISS over chunk vectors, a document scores as its best chunk), keyword
(BM25 over documents) or hybrid (both, fused); filters are applied inside each search as an id
set; the documents' metadata comes from the store. A pair head may rerank the top hits of any
mode (`indexer.query.rerank`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from indexer.config import Config, SearchConfig
from indexer.encode.query_encoder import QueryEncoder, load_query_encoder
from indexer.errors import InputError, VectorIndexError, repair_hint
from indexer.index import fusion
from indexer.index.best_chunk import rank_by_best_chunk
from indexer.index.block_lists import populate
from indexer.index.keyword import KeywordIndex
from indexer.index.span_file import SpanMap, populate_table, read_spans, spans_path
from indexer.index.vector import VectorIndex
from indexer.index.version_files import bases_dir
from indexer.query.hits import SearchHit
from indexer.query.sides import both
from indexer.records.provenance import QUERY_KEYS
from indexer.records.versions import version_dir
from indexer.store import Hit, Store

# chunk lookups read per search before the whole chunk map is loaded: a one-off search reads
# ~40 rows (ms), a session of searches the map once (24 bytes a chunk)
MAP_AFTER = 8


@dataclass(frozen=True)
class RankedDoc:
    """A document in a ranking, before its text is fetched: its score and, from a dense
    search, the chunk that scored best (None from a keyword-only ranking); `dense` and
    `keyword` are the side scores behind a fused score (None: that side did not rank it
    among its candidates)."""

    doc_id: int
    score: float
    chunk_id: int | None = None
    dense: float | None = None
    keyword: float | None = None


MODES: tuple[str, ...] = get_args(SearchConfig.model_fields["mode"].annotation)  # search.mode


class Searcher:
    """Read-only search over one store.

    Args:
        config: the configuration (model section must match the store's provenance; the
            search section sets the default mode and the fusion).
        store: an open Store (read-only is enough).
        encoder: optional pre-loaded query encoder (the torch Encoder or an OnnxEncoder);
            loaded lazily otherwise (`load_query_encoder`).
    """

    def __init__(self, config: Config, store: Store, encoder: QueryEncoder | None = None):
        self.config = config
        self.store = store
        self._encoder = encoder
        self._owns_store = False  # `open` sets it: `close` then closes the store too
        self._keyword: KeywordIndex | None = None
        self._dense_weight: float | None = None  # `dense_weight`, read on first use
        self._rerankers: dict[str, object] = {}  # head path -> PairScorer, loaded on first use
        # chunk id -> (doc id, start char, end char): a base's mapped span file, or read once
        self._chunk_map: SpanMap | None = None
        self._lookups = 0  # chunk lookups answered without the map (`_lookup`)
        # the index version published with the snapshot this store opened (not a newer one)
        self.index = VectorIndex.load(
            *(store.path, config.index, store.vectors.provenance(), QUERY_KEYS),
            version=store.version,
            delta_mapped=True,  # only searched: one copy in the page cache for every process
        )
        if self.index is not None:
            self._check_in_step(self.index)

    @classmethod
    def open(cls, config: Config, encoder: QueryEncoder | None = None) -> Searcher:
        """A Searcher over the configured store (`store.path`), opened read-only on its
        published snapshot; `close` (or a `with` block) closes the store. One object to hold
        in a notebook instead of a store and a searcher.

        Args:
            config: the configuration (its `store.path` names the store).
            encoder: as the constructor's.
        Returns:
            The Searcher, owning its store.
        """
        store = Store(config.store.path, read_only=True)
        try:
            searcher = cls(config, store, encoder)
        except BaseException:
            store.close()
            raise
        searcher._owns_store = True
        return searcher

    def close(self) -> None:
        """Close the store when this Searcher opened it (`open`); a store passed in stays
        open, its opener closes it."""
        if self._owns_store:
            self.store.close()

    def release(self) -> None:
        """Free what this searcher loaded and close its store, for a process that opened it
        only to look (`serve`'s supervisor, whose app's routes outlive it in FastAPI's caches
        and so hold the encoder on): the index is dropped and the encoder's weights freed;
        it cannot search afterwards."""
        self.store.close()
        self.index = None
        if self._encoder is not None:
            self._encoder.release()

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_in_step(self, index: VectorIndex) -> None:
        """The index and the store it is searched with hold the same chunks: cheap checks of
        the count and the data version (an id only the index holds is caught when a search
        returns it, `_doc_of`; `bertindex doctor` compares every id)."""
        store = self.store
        folder = version_dir(store.path, index.version) if index.version else store.path
        fix = f"rebuild the index from the stored vectors: {repair_hint(store.path)}"
        facts = store.snapshot_facts()  # a snapshot's recorded counts: no count of 10M rows
        data_version = facts.data_version if facts else store.data_version()
        same = index.data_version is None or data_version == index.data_version
        if store.version is not None and not same:
            raise VectorIndexError(
                f"index {folder} reflects data version {index.data_version} but "
                f"its snapshot {store.con_path} is at {data_version}; {fix}"
            )
        chunks = facts.chunks if facts else store.counts.chunks()
        if same and index.ntotal != chunks:
            raise VectorIndexError(
                f"index {folder} holds {index.ntotal} vectors but the store "
                f"{store.con_path} has {chunks} chunks; {fix}"
            )

    @property
    def encoder(self) -> QueryEncoder:
        """The query encoder (`search.query_encoder`): the index version's ONNX export, or
        the torch model."""
        if self._encoder is None:
            self._encoder = load_query_encoder(self.config, self.store, self.index)
        return self._encoder

    def warm(self) -> None:
        """Load now what the first queries would load: the model, the keyword index's
        searcher, the chunk -> document map (its base's span table mapped whole:
        `span_file.populate_table`) and the configured reranker (a server does this before it
        listens); and fill the page table of a fast-scan base's mapped lists
        (`block_lists.populate`: no page fault per 4 KB of each list a query first probes)."""
        self.encoder  # noqa: B018
        if self.index is not None and self.index.ntotal:
            self._map()
            populate(self.index.index)
        with contextlib.suppress(VectorIndexError):  # no keyword index: keyword searches say so
            self.keyword.searcher  # noqa: B018
        if self.config.search.rerank:
            self.reranker(self.config.search.rerank)

    @property
    def keyword(self) -> KeywordIndex:
        if self._keyword is None:
            self._keyword = KeywordIndex.for_store(self.store.path)
        return self._keyword

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        return self.encoder.encode_queries(list(queries))

    def search(
        self,
        query: str,
        k: int = 10,
        collection: str | None = None,
        where: Sequence[tuple[str, str]] = (),
        mode: str | None = None,
        *,
        labels: Sequence[tuple[str, str]] = (),
        entities: Sequence[tuple[str, str | None]] = (),
        human: bool = False,
        rerank: str | Literal[False] | None = None,
        rerank_depth: int | None = None,
    ) -> list[SearchHit]:
        """Top-k documents for one query.

        Args:
            mode: `dense`, `keyword` or `hybrid`; None: `search.mode` of the config.
            labels: (head, label) filters, applied inside the search: a person's label
                (`review import`) where there is one, else the model's (`annotate`).
            entities: (type, text or None) filters, likewise.
            human: `labels` match a person's labels only.
            rerank: a pair head directory that reorders the top `rerank_depth` hits
                (`search.rerank`); None: the config's `search.rerank`; False: none.
            rerank_depth: None: the config's `search.rerank_depth`.
        """
        return self.search_many(
            [query],
            k,
            collection,
            where,
            mode,
            labels=labels,
            entities=entities,
            human=human,
            rerank=rerank,
            rerank_depth=rerank_depth,
        )[0]

    def search_many(
        self,
        queries: Sequence[str],
        k: int = 10,
        collection: str | None = None,
        where: Sequence[tuple[str, str]] = (),
        mode: str | None = None,
        vectors: np.ndarray | None = None,
        *,
        labels: Sequence = (),
        entities: Sequence = (),
        human: bool = False,
        rerank: str | Literal[False] | None = None,
        rerank_depth: int | None = None,
    ) -> list[list[SearchHit]]:
        """Top-k documents for each query; `vectors` may hold the queries' embeddings already.

        Args:
            rerank, rerank_depth: as `search`: with a reranker the first stage fetches
                max(k, depth) hits, the top `depth` are reordered (`indexer.query.rerank`), k kept.
        Returns:
            One list of hits per query, best first (scores are cosine for dense, BM25 for
            keyword, the fused score for hybrid; `rerank` the pair head's, when reranked).
        """
        head = self.config.search.rerank if rerank is None else rerank or None
        depth = rerank_depth or self.config.search.rerank_depth
        ranked = self.rank_documents(
            queries,
            max(k, depth) if head else k,
            collection,
            where,
            mode,
            vectors,
            labels=labels,
            entities=entities,
            human=human,
        )
        hits = self._hits(ranked)
        if not head:
            return hits
        from indexer.query.rerank import rerank_hits

        scorer = self.reranker(head)
        return [rerank_hits(q, h, scorer, depth)[:k] for q, h in zip(queries, hits)]

    def reranker(self, path: str):
        """The pair head at `path` as a `PairScorer`, loaded once (torch and the head load only
        when a search reranks)."""
        if path not in self._rerankers:
            from indexer.heads.pair.scorer import PairScorer

            self._rerankers[path] = PairScorer(path)
        return self._rerankers[path]

    def search_unique(
        self,
        query: str,
        k: int = 10,
        collection: str | None = None,
        where: Sequence[tuple[str, str]] = (),
        mode: str | None = None,
        *,
        labels: Sequence = (),
        entities: Sequence = (),
        human: bool = False,
    ) -> tuple[list[SearchHit], dict[tuple[str, str], int]]:
        """Top-k documents with each near-duplicate group (`bertindex dedup`) collapsed to its
        best-ranked member; documents never grouped stand alone.

        Returns:
            (hits, {(collection, id): size of the hit's group}).
        """
        depth = k * 4
        while True:
            ranked = self.rank_documents(
                [query],
                depth,
                collection,
                where,
                mode,
                labels=labels,
                entities=entities,
                human=human,
            )[0]
            group_of = self.store.dedup.groups_of(m.doc_id for m in ranked)
            kept, seen = [], set()
            for m in ranked:
                group = group_of.get(m.doc_id, ("alone", m.doc_id))
                if group not in seen:
                    seen.add(group)
                    kept.append(m)
            if len(kept) >= k or len(ranked) < depth:
                break
            depth *= 4
        kept = kept[:k]
        sizes = self.store.dedup.group_sizes(
            group_of[m.doc_id] for m in kept if m.doc_id in group_of
        )
        hits = self._hits([kept])[0]
        by_doc = {m.doc_id: m for m in kept}
        refs = self.store.reads.fetch_documents(list(by_doc))
        out = {}
        for doc_id, ref in refs.items():
            grouped = group_of.get(doc_id)
            out[(ref.collection, ref.external_id)] = sizes.get(grouped, 1) if grouped else 1
        return hits, out

    def rank_documents(
        self,
        queries: Sequence[str],
        k: int = 10,
        collection: str | None = None,
        where: Sequence[tuple[str, str]] = (),
        mode: str | None = None,
        vectors: np.ndarray | None = None,
        *,
        labels: Sequence = (),
        entities: Sequence = (),
        human: bool = False,
    ) -> list[list[RankedDoc]]:
        """Documents per query, best first, before any fetch (a dense or hybrid ranking
        carries each document's best chunk)."""
        mode = mode or self.config.search.mode
        if mode not in MODES:
            raise InputError(f"search mode '{mode}' is unknown; choose one of {', '.join(MODES)}")
        depth = max(k, self.config.search.candidates) if mode == "hybrid" else k
        if mode == "keyword":
            keyword = self.keyword_ranked(
                queries, depth, collection, where, labels=labels, entities=entities, human=human
            )
            return [[RankedDoc(d, s, keyword=s) for d, s in r[:k]] for r in keyword]
        # hybrid: the dense side's `depth` documents feed the fusion, the first k of them
        # ranked with the index's full rescoring depth (`ranked`): ranking all 100 rescored
        # ~3,500 rows a query at 10M against ~700, for the same fused top 10 on 200 of 200
        # held-out queries (198 in the same order; docs/guides/scale.md)
        chosen: dict[str, Any] = {"labels": labels, "entities": entities, "human": human}

        def dense_side(**filters: Any) -> list[list[RankedDoc]]:  # the queries encoded first
            found = self.encode_queries(queries) if vectors is None else vectors
            return self.dense_ranked(found, depth, collection, where, ranked=k, **filters)

        if mode == "dense":
            return [r[:k] for r in dense_side(**chosen)]
        keyword_side = functools.partial(self.keyword_ranked, queries, depth, collection, where)
        if collection is None and not (where or labels or entities):  # `indexer.query.sides`
            dense, keyword = both(dense_side, keyword_side)  # BM25 beside encoding and FAISS
        else:
            dense, keyword = dense_side(**chosen), keyword_side(**chosen)
        out = []
        for dense_r, keyword_r in zip(dense, keyword):
            by_doc = {m.doc_id: m for m in dense_r}
            bm25 = dict(keyword_r)
            fused = self.fuse([(m.doc_id, m.score) for m in dense_r], keyword_r)
            out.append(
                [
                    RankedDoc(
                        d,
                        s,
                        by_doc[d].chunk_id if d in by_doc else None,
                        by_doc[d].score if d in by_doc else None,
                        bm25.get(d),
                    )
                    for d, s in fused[:k]
                ]
            )
        return out

    @property
    def dense_weight(self) -> float:
        """The dense share of weighted and zscore fusion: `search.dense_weight` when it is a
        number; for `auto`, the weight the store's last index run tuned for it (when tuned
        for the store's encoder), else `fusion.FALLBACK_DENSE_WEIGHT`. Read once per Searcher (a
        Searcher holds one snapshot)."""
        if self._dense_weight is None:
            configured = self.config.search.dense_weight
            if configured != "auto":
                self._dense_weight = float(configured)
            else:
                tuned = self.store.vectors.fusion_tuning()
                provenance = self.store.vectors.provenance()
                self._dense_weight = fusion.FALLBACK_DENSE_WEIGHT
                if (
                    tuned is not None
                    and provenance is not None
                    and tuned.weights_hash == provenance.weights_hash
                ):
                    self._dense_weight = tuned.dense_weight
        return self._dense_weight

    def fuse(self, dense: fusion.Ranked, keyword: fusion.Ranked) -> list[tuple[int, float]]:
        """The configured fusion of a dense and a keyword ranking of documents."""
        cfg = self.config.search
        if cfg.fusion == "rrf":
            return fusion.rrf([dense, keyword], k=cfg.rrf_k)
        combine = fusion.zscore if cfg.fusion == "zscore" else fusion.weighted
        weight = self.dense_weight
        return combine([dense, keyword], [weight, 1.0 - weight])

    def dense_ranked(
        self,
        vectors: np.ndarray,
        k: int,
        collection: str | None = None,
        where: Sequence[tuple[str, str]] = (),
        *,
        labels: Sequence = (),
        entities: Sequence = (),
        human: bool = False,
        ranked: int | None = None,
    ) -> list[list[RankedDoc]]:
        """k documents per query vector, best first, scored by the cosine of their best chunk.

        `ranked`: how many of the k the index ranks with its full rescoring depth (None: all
        k; `VectorIndex.search`); the others come from its first pass, each rescored."""
        index = self.index
        if index is None or index.ntotal == 0:
            return [[] for _ in range(len(vectors))]
        allowed = self.store.filters.chunk_ids(collection, where, labels, entities, human)
        if allowed is not None and len(allowed) == 0:
            return [[] for _ in range(len(vectors))]
        limit = index.ntotal if allowed is None else len(allowed)
        ranked = k if ranked is None else min(ranked, k)
        return [self._best_chunks(index, v[None, :], k, allowed, limit, ranked) for v in vectors]

    def keyword_ranked(
        self,
        queries: Sequence[str],
        k: int,
        collection: str | None = None,
        where: Sequence[tuple[str, str]] = (),
        *,
        labels: Sequence = (),
        entities: Sequence = (),
        human: bool = False,
    ) -> list[list[tuple[int, float]]]:
        """(doc id, BM25 score) per query, k documents, best first."""
        allowed = self.store.filters.doc_ids(collection, where, labels, entities, human)
        return [self.keyword.search(q, k, allowed) for q in queries]

    def search_vectors(
        self,
        vectors: np.ndarray,
        k: int = 10,
        collection: str | None = None,
        where: Sequence[tuple[str, str]] = (),
    ) -> list[list[SearchHit]]:
        """Dense search for query embeddings (no query text, so no keyword side)."""
        return self._hits(self.dense_ranked(vectors, k, collection, where))

    def _hits(self, ranked: list[list[RankedDoc]]) -> list[list[SearchHit]]:
        """The documents behind rankings, in one documents query: a chunk's span comes from
        the chunk map this Searcher holds (`_map`), so no query joins the chunks table (the
        join cost 1.9 ms of a served query, the documents alone 0.9 ms)."""
        by_doc = self.store.reads.fetch_documents(list({m.doc_id for r in ranked for m in r}))
        spans = self._spans([m.chunk_id for r in ranked for m in r if m.chunk_id is not None])
        out = []
        for r in ranked:
            hits: list[SearchHit] = []
            for m in r:
                h: Hit | None = by_doc.get(m.doc_id)
                if h is None:  # keyword index already past (or behind) the published snapshot
                    continue
                start, end = spans[m.chunk_id] if m.chunk_id is not None else (0, len(h.text))
                hits.append(
                    SearchHit(
                        len(hits) + 1,
                        float(m.score),
                        h.external_id,
                        h.collection,
                        h.title,
                        h.text,
                        h.metadata,
                        start,
                        end,
                        m.dense,
                        m.keyword,
                    )
                )
            out.append(hits)
        return out

    def _map(self) -> SpanMap:
        """The chunk -> document map: the base's mapped span file (`indexer.index.span_file`)
        and the chunks added since, or without that file every chunk's row, read once (24
        bytes a chunk). One DuckDB round trip per query cost more than the FAISS search."""
        if self._chunk_map is None:
            table = self._base_spans
            if table is None:
                self._chunk_map = SpanMap([self.store.vectors.chunk_span_map()])
            else:
                populate_table(table)  # held from now on: mapped whole, not a fault at a time
                parts = [tuple(table)]
                # only an index with a delta returns chunks newer than its base's file (the
                # read scans the chunks view, and DuckDB then holds its segments' metadata:
                # ~40 MB in each server process at 10M)
                if self.index is not None and self.index.delta.ntotal:
                    last = int(table[0][-1]) if table.shape[1] else -1
                    parts.append(self.store.vectors.chunk_spans_after(last))
                self._chunk_map = SpanMap(parts)
        return self._chunk_map

    @functools.cached_property
    def _base_spans(self) -> np.ndarray | None:
        """The mapped span file of the index's base (None: none, or no saved base)."""
        if self.index is None or self.index.base is None:
            return None
        return read_spans(spans_path(bases_dir(self.store.path) / self.index.base))

    def _lookup(self, chunk_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(doc id, start char, end char) of each chunk id: from the map once it is held, else
        for the first MAP_AFTER searches from the base's span file (mapped, costs nothing to
        open) and the store for the ids it lacks only, so that a one-off search (`bertindex
        search`) does not read every chunk (2.5 s at 10M) nor every chunk added since the
        base.

        Raises:
            VectorIndexError: a chunk id the index returned is not in the store.
        """
        if self._chunk_map is None and self._lookups < MAP_AFTER:
            self._lookups += 1
            base = self._base_spans
            # the base's span file first, then the store for the ids it lacks only: reading
            # every chunk added since the base cost a one-off search ~40 ms at 10M (a scan
            # over the chunks view's segment footers)
            parts = [] if base is None else [tuple(base)]
            docs, starts, ends, found = SpanMap(parts).lookup(chunk_ids)
            if not found.all():
                parts.append(self.store.vectors.chunk_spans(chunk_ids[~found]))
                docs, starts, ends, found = SpanMap(parts).lookup(chunk_ids)
        else:
            docs, starts, ends, found = self._map().lookup(chunk_ids)
        if not found.all():
            missing = chunk_ids[~found][:5].tolist()
            raise VectorIndexError(
                f"chunk ids {missing} are in the vector index but not in the store "
                f"{self.store.con_path}; rebuild the index from the stored "
                f"vectors: {repair_hint(self.store.path)}"
            )
        return docs, starts, ends

    def _doc_of(self, chunk_ids: np.ndarray) -> np.ndarray:
        """Doc id of each chunk id."""
        return self._lookup(chunk_ids)[0]

    def _spans(self, chunk_ids: list[int]) -> dict[int, tuple[int, int]]:
        """chunk id -> (start char, end char)."""
        if not chunk_ids:
            return {}
        _, starts, ends = self._lookup(np.asarray(chunk_ids, dtype=np.int64))
        return dict(zip(chunk_ids, zip(starts.tolist(), ends.tolist())))

    def _best_chunks(
        self, index: VectorIndex, vector: np.ndarray, k: int, allowed, limit: int, ranked: int
    ) -> list[RankedDoc]:
        """Best chunk per document, k documents; widens the chunk search until k are found."""
        fetch = min(limit, max(k * 4, 16))
        while True:
            # the chunks past the `ranked`-th only widen the pool documents come from
            scores, ids = index.search(vector, fetch, allowed, ranked=ranked)
            valid = ids[0] >= 0
            chunk_ids, chunk_scores = ids[0][valid], scores[0][valid]
            doc_ids = self._doc_of(chunk_ids)
            # numpy, not a loop over the 400 chunks (0.3 ms of a served query)
            best = rank_by_best_chunk(chunk_scores, doc_ids, k)
            if len(best) >= k or fetch >= limit:
                return [
                    RankedDoc(d, s, c, dense=s)
                    for c, d, s in zip(
                        chunk_ids[best].tolist(),
                        doc_ids[best].tolist(),
                        chunk_scores[best].tolist(),
                    )
                ]
            fetch = min(limit, fetch * 4)
