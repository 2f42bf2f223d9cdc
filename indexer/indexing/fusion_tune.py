"""The hybrid dense weight a store tunes for itself at index time, without labels: sentences
drawn from its own documents are searched as queries, each with that sentence cut out of its
document (so BM25 cannot win by matching the copied words), and the weight that finds the
documents best is recorded in the store (`FusionTuning`).

Scores both sides exactly over a sample of the store (at most `MAX_SAMPLE_DOCS` documents):
stored chunk vectors for dense, a temporary tantivy index for BM25. Does not search the
published indexes and does not decide when a search uses the weight (`indexer.query.searcher`).
"""

from __future__ import annotations

import logging
import math
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.config import Config
from indexer.core.timeutil import utc_now
from indexer.encode.encoder import Encoder
from indexer.errors import StoreError
from indexer.index import fusion
from indexer.index.best_chunk import rank_by_best_chunk
from indexer.index.keyword import KeywordIndex
from indexer.indexing.steps import encode_documents
from indexer.ingest.readers import document_text
from indexer.records.provenance import FusionTuning
from indexer.store import DocText, Store

log = logging.getLogger(__name__)

MAX_SAMPLE_DOCS = 20_000  # documents the tuning searches among (all, in a smaller store)
MIN_QUERY_DOCS = 50  # fewer documents with two usable sentences: no tuning, the fallback
RETUNE_CHANGE = 0.1  # re-tune once the document count moved by this share since the last
DEPTH = 100  # documents each side hands to the fusion, as `search.candidates` by default
WEIGHTS = tuple(round(0.05 * i, 2) for i in range(2, 19))  # 0.10 .. 0.90
SEED = 0

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_MIN_WORDS = 5  # a sentence shorter than this is neither a query nor counted as one


def split_sentences(text: str) -> list[str]:
    """Sentences of `text` of at least five words, split after . ! ? before a capital or digit.

    Args:
        text: a document's text.
    Returns:
        The sentences, in order, each a substring of `text`.
    """
    return [s for s in _SENTENCE_END.split(text) if len(s.split()) >= _MIN_WORDS]


@dataclass(frozen=True)
class PseudoQuery:
    """One held-out sentence: the query, its document's id, and its document without it."""

    doc_id: int
    query: str
    title: str | None
    rest: str  # the document's text with the query sentence cut out


def draw_pseudo_queries(
    docs: list[DocText], n: int, seed: int = SEED, cut: bool = True
) -> list[PseudoQuery]:
    """Up to `n` pseudo-queries, one per document, from documents with two or more sentences.

    Args:
        docs: candidate documents.
        n: queries wanted.
        seed: the random draw (of documents, and of the sentence within each).
        cut: cut the query sentence out of its document (False: keep the whole text).
    Returns:
        The pseudo-queries, in draw order.
    """
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.permutation(len(docs)).tolist():
        doc = docs[i]
        sentences = split_sentences(doc.text)
        if len(sentences) < 2:
            continue
        query = sentences[int(rng.integers(len(sentences)))]
        rest = " ".join(doc.text.replace(query, " ", 1).split()) if cut else doc.text
        out.append(PseudoQuery(doc.doc_id, query, doc.title, rest))
        if len(out) == n:
            break
    return out


def is_due(store: Store, config: Config) -> bool:
    """Whether the next index run should (re-)tune: tuning is on (`search.tune_queries` > 0)
    and the store has no tuning for its encoder, or its document count moved by more than
    `RETUNE_CHANGE` since the recorded one.

    Args:
        store: the open store.
        config: the configuration.
    Returns:
        True when `tune_dense_weight` should run.
    """
    provenance = store.vectors.provenance()
    if config.search.tune_queries == 0 or provenance is None:
        return False
    done = store.vectors.fusion_tuning()
    if done is None or done.weights_hash != provenance.weights_hash:
        return True
    return abs(store.counts.documents() - done.documents) > RETUNE_CHANGE * max(done.documents, 1)


def tune_dense_weight(
    store: Store, config: Config, encoder: Encoder, seed: int = SEED
) -> FusionTuning | None:
    """Tune the weighted-fusion dense weight on pseudo-queries from the store and record it
    (`measure_dense_weight`, then `store.vectors.set_fusion_tuning`).

    Args:
        store: the open, writable store.
        config: the configuration.
        encoder: the store's encoder.
        seed: the random draw of documents and sentences.
    Returns:
        The recorded FusionTuning, or None (too few documents; nothing recorded).
    """
    record = measure_dense_weight(store, config, encoder, seed)
    if record is not None:
        store.vectors.set_fusion_tuning(record)
        log.info(
            "fusion tuned on %d pseudo-queries: dense weight %.2f (%.0f s)",
            record.queries,
            record.dense_weight,
            record.seconds,
        )
    return record


def measure_dense_weight(
    store: Store, config: Config, encoder: Encoder, seed: int = SEED, cut: bool = True
) -> FusionTuning | None:
    """The weighted-fusion dense weight that pseudo-queries from the store favour; writes
    nothing.

    Each pseudo-query is a sentence of a sampled document; its document, with the sentence
    cut out, is the one relevant answer. Both sides rank the sample (`MAX_SAMPLE_DOCS`) to
    `DEPTH`: dense by the best chunk's cosine (stored vectors; the cut documents re-encoded),
    BM25 over a temporary index of the sample (the cut documents in place of the stored).
    Every weight in `WEIGHTS` fuses them (`fusion.weighted`); the chosen weight is the best
    mean nDCG@10 after averaging each weight's score with its two neighbours (one noisy
    weight does not decide).

    Args:
        store: the open store (read only).
        config: the configuration (`search.tune_queries`, `keyword.language`, `model`).
        encoder: the store's encoder.
        seed: the random draw of documents and sentences.
        cut: False leaves the sentence in its document (measured only, to show the lexical
            bias that cutting it removes: BM25 then wins on copied words).
    Returns:
        The FusionTuning, or None when the store has fewer than `MIN_QUERY_DOCS` documents
        with two sentences (searches then use the fallback weight).
    """
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    doc_ids = store.reads.document_ids()  # ascending, as the seeded draw needs
    sample = np.sort(rng.choice(doc_ids, min(len(doc_ids), MAX_SAMPLE_DOCS), replace=False))
    docs = store.reads.documents_text(sample.tolist())
    queries = draw_pseudo_queries(docs, config.search.tune_queries, seed, cut)
    if len(queries) < MIN_QUERY_DOCS:
        log.info(
            "fusion tuning skipped: %d documents with two sentences (needs %d)",
            len(queries),
            MIN_QUERY_DOCS,
        )
        return None
    dense = _dense_rankings(store, config, encoder, sample, queries)
    keyword = _keyword_rankings(docs, queries, config.keyword.language)
    targets = [q.doc_id for q in queries]
    curve = {
        w: _mean_ndcg(
            targets, [fusion.weighted([d, k], [w, 1 - w]) for d, k in zip(dense, keyword)]
        )
        for w in WEIGHTS
    }
    provenance = store.vectors.provenance()
    if provenance is None:  # the dense rankings read stored vectors, which come with it
        raise StoreError(f"{store.path}: the stored vectors have no provenance")
    record = FusionTuning(
        dense_weight=choose_weight(curve),
        queries=len(queries),
        documents=len(doc_ids),
        sample_documents=len(sample),
        weights_hash=provenance.weights_hash,
        dense_ndcg=round(_mean_ndcg(targets, dense), 4),
        keyword_ndcg=round(_mean_ndcg(targets, keyword), 4),
        curve={str(w): round(v, 4) for w, v in curve.items()},
        seed=seed,
        tuned_at=utc_now().isoformat(timespec="seconds"),
        seconds=round(time.perf_counter() - started, 1),
    )
    return record


def choose_weight(curve: dict[float, float]) -> float:
    """The weight with the best score after averaging each with its neighbours on the grid
    (the ends with their one neighbour); a tie goes to the more dense-leaning weight.

    Args:
        curve: weight -> mean nDCG@10, over an ascending grid of weights.
    Returns:
        The chosen weight.
    """
    grid = sorted(curve)
    smooth = {
        w: float(np.mean([curve[x] for x in grid[max(0, i - 1) : i + 2]]))
        for i, w in enumerate(grid)
    }
    return max(grid, key=lambda w: (round(smooth[w], 6), w))


def _dense_rankings(
    store: Store, config: Config, encoder: Encoder, sample: np.ndarray, queries: list[PseudoQuery]
) -> list[list[tuple[int, float]]]:
    """(doc id, best chunk cosine) per query, `DEPTH` documents of the sample, best first;
    each query's own document scored as cut (re-encoded), every other from stored vectors."""
    chunk_ids, chunk_docs = store.vectors.chunks_of_documents(sample)
    keep = ~np.isin(chunk_docs, [q.doc_id for q in queries])
    vectors = store.vectors.fetch(chunk_ids[keep])  # (chunks, dim), ascending chunk id
    owners = chunk_docs[keep]
    cut_texts = [document_text(DocText(q.doc_id, q.title, q.rest)) for q in queries]
    cut_owner_pos, cut_rows = encode_documents(encoder, cut_texts, config)
    cut_owners = np.asarray([queries[p].doc_id for p in cut_owner_pos], np.int64)
    owners = np.concatenate([owners, cut_owners])
    vectors = np.concatenate([vectors, np.asarray(cut_rows.vectors, np.float32)])
    q = encoder.encode_queries([p.query for p in queries])  # (queries, dim)
    out = []
    for row in range(0, len(q), 64):
        sims = q[row : row + 64] @ vectors.T  # (≤64, chunks)
        for scores in sims:
            best = rank_by_best_chunk(scores, owners, DEPTH)
            out.append(list(zip(owners[best].tolist(), scores[best].tolist())))
    return out


def _keyword_rankings(
    docs: list[DocText], queries: list[PseudoQuery], language: str
) -> list[list[tuple[int, float]]]:
    """(doc id, BM25) per query, `DEPTH` documents, from a temporary index of the sample in
    which each query's document is its cut text."""
    cut = {q.doc_id: q.rest for q in queries}
    with tempfile.TemporaryDirectory(prefix="bertindex-fusion-tune-") as folder:
        index = KeywordIndex(Path(folder), create=True, language=language)
        index.add_documents(DocText(d.doc_id, d.title, cut.get(d.doc_id, d.text)) for d in docs)
        return [index.search(q.query, DEPTH) for q in queries]


def _mean_ndcg(targets: list[int], rankings: list) -> float:
    """Mean nDCG@10 with one relevant document per query: 1 / log2(rank + 1) within 10."""
    total = 0.0
    for target, ranked in zip(targets, rankings):
        top = [d for d, _ in ranked[:10]]
        if target in top:
            total += 1.0 / math.log2(top.index(target) + 2)
    return total / len(targets)
