"""BEIR evaluation: a BEIR folder's queries and judgements, and `evaluate_beir`, which indexes
its corpus into a store and scores every search mode (optionally reranked) on it
(`indexer.evaluation.metrics`).
"""

from __future__ import annotations

import csv
import tempfile
import time
from pathlib import Path

from indexer.config import Config
from indexer.core.progress import ProgressArg
from indexer.encode.encoder import load_encoder
from indexer.errors import InputError
from indexer.evaluation.metrics import retrieval_scores
from indexer.indexing.run import run_index
from indexer.ingest.formats.base import UNSPLIT
from indexer.ingest.formats.jsonl import read_labelled_jsonl
from indexer.query.rerank import rerank_hits
from indexer.query.searcher import MODES, Searcher

TOP_K = 100  # hits scored per query (recall@100)


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Judgements of a BEIR qrels file: `query-id <tab> corpus-id <tab> score` rows, with or
    without a header line (BEIR's files have one; e.g. the msmarco-subset's has none).

    A first line whose score column is not an integer is the header, whatever its names; any
    other row must have three columns and an integer score.

    Raises:
        InputError: a malformed row, naming the file and line.
    """
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for number, row in enumerate(csv.reader(fh, delimiter="\t"), start=1):
            if not row or not any(cell.strip() for cell in row):
                continue
            score = row[2].strip() if len(row) >= 3 else ""
            if number == 1 and len(row) >= 3 and not _is_int(score):
                continue  # the header line
            if len(row) < 3 or not _is_int(score):
                raise InputError(
                    f"{path}:{number}: expected `query-id<TAB>corpus-id<TAB>score` "
                    f"with an integer score, got {chr(9).join(row)[:80]!r}"
                )
            qrels.setdefault(row[0].strip(), {})[row[1].strip()] = int(score)
    return qrels


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def load_beir_queries(
    folder: Path, split: str = "test"
) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """Queries that have judgements in `qrels/<split>.tsv`, and those judgements."""
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise InputError(
            f"{qrels_path} not found; a BEIR folder holds corpus.jsonl, "
            "queries.jsonl and qrels/<split>.tsv"
        )
    qrels = read_qrels(qrels_path)
    queries_path = next(
        (p for p in (folder / "queries.jsonl", folder / "queries.jsonl.gz") if p.is_file()), None
    )
    if queries_path is None:
        raise InputError(f"{folder}: queries.jsonl not found")
    rows = read_labelled_jsonl(queries_path).items[UNSPLIT]  # the one JSONL reader
    queries = {str(q["_id"]): q["text"] for _, q in rows if str(q["_id"]) in qrels}
    return queries, qrels


def evaluate_beir(
    config: Config,
    folder: Path,
    split: str = "test",
    *,
    modes: tuple[str, ...] = (),
    collection: str | None = None,
    rerank: str | None = None,
    rerank_depth: int | None = None,
    max_queries: int | None = None,
    store: str | None = None,
    progress: ProgressArg = False,
) -> dict:
    """Index a BEIR folder's corpus into a store and score each search mode on its judged
    queries (`bertindex eval beir`).

    Args:
        config: the configuration (model, fusion, search).
        folder: the BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).
        modes: the search modes to score (empty: every mode).
        collection: the collection the corpus is indexed into (None: the folder's name).
        rerank: a pair head that also reorders each mode's hits (`MODE+rerank`).
        rerank_depth: hits it reorders per query (None: `search.rerank_depth`).
        max_queries: the first N queries only (a quick check).
        store: the store folder (None: a temporary one, removed after).
    Returns:
        {"modes": {mode: scores}, "queries", "documents", "chunks", "max_length",
        "long_documents", "dtype", "fusion"}, and "rerank" (depth, timing) with `rerank`.
    """
    queries, qrels = load_beir_queries(folder, split)
    depth = rerank_depth or config.search.rerank_depth
    with tempfile.TemporaryDirectory(prefix="bertindex-beir-") as tmp:
        # a temporary store exports no ONNX query encoder: the queries here are encoded with
        # torch (`load_encoder` below) and the store is removed after (~7 s of CPU an eval)
        keep = {} if store else {"search.query_encoder": "torch"}
        cfg = config.with_overrides(**{"store.path": store or tmp} | keep)
        summary = run_index(
            [str(folder)], cfg, collection=collection or folder.name, fmt="beir", progress=progress
        )
        encoder = load_encoder(cfg.model)
        with Searcher.open(cfg, encoder) as searcher:
            ids = list(queries)[:max_queries]
            scorer = searcher.reranker(rerank) if rerank else None
            per_mode, timing = _score_modes(
                searcher,
                [queries[q] for q in ids],
                ids,
                {q: qrels[q] for q in ids},
                modes or MODES,
                scorer,
                depth,
            )
            tuning = searcher.store.vectors.fusion_tuning()
            fused = cfg.search.model_dump() | {
                "dense_weight_used": searcher.dense_weight,
                "tuning": tuning.to_dict() if tuning is not None else None,
            }
    scores = {
        "modes": per_mode,
        "queries": len(ids),
        "documents": summary["read"],
        "chunks": summary["chunks"],
        "max_length": cfg.model.max_length,
        "long_documents": cfg.long_documents.mode,
        "dtype": encoder.provenance.dtype,
        "fusion": fused,
    }
    if scorer is not None:
        scores["rerank"] = {
            "head": str(rerank),
            "depth": depth,
            "max_length": scorer.max_length,
            "timing": timing,
        }
    return scores


def _score_modes(
    searcher: Searcher,
    texts: list[str],
    ids: list[str],
    qrels: dict,
    modes: tuple[str, ...],
    scorer,
    depth: int,
) -> tuple[dict, dict]:
    """({mode: scores, and `MODE+rerank` with a scorer}, {mode: the reranking's timing}): the
    queries are encoded once, their time shared by every mode's first stage."""
    started = time.perf_counter()
    vectors = searcher.encoder.encode_queries(texts)
    encode_seconds = time.perf_counter() - started
    per_mode, timing = {}, {}
    for mode in modes:
        started = time.perf_counter()
        results = searcher.search_many(texts, TOP_K, mode=mode, vectors=vectors, rerank=False)
        first = time.perf_counter() - started + encode_seconds
        per_mode[mode] = retrieval_scores(_run(ids, results), qrels)
        if scorer is None:
            continue
        started = time.perf_counter()
        reranked = [rerank_hits(t, hits, scorer, depth) for t, hits in zip(texts, results)]
        seconds = time.perf_counter() - started
        per_mode[f"{mode}+rerank"] = retrieval_scores(_run(ids, reranked), qrels)
        timing[mode] = {
            "first_stage_s_per_query": round(first / len(ids), 4),
            "rerank_s_per_query": round(seconds / len(ids), 4),
            "rerank_share": round(seconds / (seconds + first), 3),
        }
    return per_mode, timing


def _run(ids: list[str], results: list) -> dict[str, list[str]]:
    """query id -> ranked document ids."""
    return {q: [h.id for h in hits] for q, hits in zip(ids, results)}
