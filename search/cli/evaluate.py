"""`bertindex eval beir|sts`: score the encoder and the search on public benchmarks (BEIR
retrieval in every search mode, STS-B similarity). Thin layer over `indexer.evaluation`;
`eval head` (a trained head) comes from `search.cli.heads`, added by `search.cli.main`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from indexer.config import SearchConfig
from search.cli.common import (
    build_config,
    config_choices,
    config_options,
    encode_options,
    handle_errors,
    json_option,
    print_json,
    show_progress,
)

SEARCH_MODES = config_choices(SearchConfig, "mode")
RERANK_DEPTH = SearchConfig.model_fields["rerank_depth"].default


@click.group("eval")
def eval_group() -> None:
    """Evaluate on public benchmarks (BEIR retrieval, STS similarity, trained heads)."""


@eval_group.command("beir")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option("--split", default="test", show_default=True, help="qrels split to score.")
@click.option("--mode", "modes", multiple=True, type=click.Choice(SEARCH_MODES),
              help="Search mode to score (repeatable; default: every mode).")
@click.option("--collection", help="Collection the corpus is indexed into (default: the "
                                   "folder's name; `default` reuses a `bertindex index` store).")
@click.option("--rerank", metavar="HEAD", type=click.Path(exists=True, file_okay=False),
              help="Also score each mode reranked by this pair head (`MODE+rerank`), with the "
                   "reranking's share of the query time.")
@click.option("--rerank-depth", type=click.IntRange(1, 100), default=RERANK_DEPTH,
              show_default=True, help="Hits --rerank reorders per query.")
@click.option("--max-queries", type=click.IntRange(1), metavar="N",
              help="Score the first N queries only (a quick check; not the set's figure).")
@config_options
@encode_options
@json_option
@handle_errors
def eval_beir(folder, split, modes, collection, rerank, rerank_depth, max_queries, config_path,
              store_path, max_length, long_documents, as_json):
    """Index a BEIR data set into a temporary store and report nDCG@10, recall@100, MRR@10.

    Each --mode is scored on the same store; JSON: {"modes": {mode: scores}, ...}; with
    --rerank also `MODE+rerank` and {"rerank": {depth, seconds, share of the query time}}.
    """
    import time

    from indexer.encode.encoder import load_encoder
    from indexer.evaluation import load_beir_queries, retrieval_scores
    from indexer.indexing.run import run_index
    from indexer.store import Store
    from search.query import Searcher
    from search.rerank import rerank_hits

    cfg = build_config(config_path, None, max_length, long_documents)
    folder = Path(folder)
    queries, qrels = load_beir_queries(folder, split)
    timing = {}
    with tempfile.TemporaryDirectory(prefix="bertindex-beir-") as tmp:
        cfg = cfg.with_overrides(**{"store.path": store_path or tmp})
        summary = run_index([str(folder)], cfg, collection=collection or folder.name, fmt="beir",
                            progress=show_progress())
        encoder = load_encoder(cfg.model)
        with Store(cfg.store.path, read_only=True) as store:
            searcher = Searcher(cfg, store, encoder)
            ids = list(queries)[:max_queries]
            texts = [queries[q] for q in ids]
            started = time.perf_counter()
            vectors = encoder.encode_queries(texts)
            encode_seconds = time.perf_counter() - started
            scorer = searcher.reranker(rerank) if rerank else None
            tuning = store.fusion_tuning()
            fused = cfg.search.model_dump() | {
                "dense_weight_used": searcher.dense_weight,
                "tuning": tuning.to_dict() if tuning is not None else None}
            per_mode = {}
            for mode in modes or SEARCH_MODES:
                started = time.perf_counter()
                results = searcher.search_many(texts, 100, mode=mode, vectors=vectors,
                                               rerank=False)
                first = time.perf_counter() - started + encode_seconds
                run = {q: [h.id for h in hits] for q, hits in zip(ids, results)}
                per_mode[mode] = retrieval_scores(run, {q: qrels[q] for q in ids})
                if scorer is None:
                    continue
                started = time.perf_counter()
                reranked = [rerank_hits(t, hits, scorer, rerank_depth)
                            for t, hits in zip(texts, results)]
                seconds = time.perf_counter() - started
                run = {q: [h.id for h in hits] for q, hits in zip(ids, reranked)}
                per_mode[f"{mode}+rerank"] = retrieval_scores(run, {q: qrels[q] for q in ids})
                timing[mode] = {"first_stage_s_per_query": round(first / len(ids), 4),
                                "rerank_s_per_query": round(seconds / len(ids), 4),
                                "rerank_share": round(seconds / (seconds + first), 3)}
    scores = {"modes": per_mode, "queries": len(ids), "documents": summary["read"],
              "chunks": summary["chunks"], "max_length": cfg.model.max_length,
              "long_documents": cfg.long_documents.mode, "dtype": encoder.provenance.dtype,
              "fusion": fused}
    if rerank:
        scores["rerank"] = {"head": str(rerank), "depth": rerank_depth,
                            "max_length": scorer.max_length, "timing": timing}
    if as_json:
        print_json(scores)
    else:
        for mode, result in per_mode.items():
            click.echo(f"{mode:>8}  " + "  ".join(f"{key} {value}" for key, value in result.items()))
        for key, value in scores.items():
            if key != "modes":
                click.echo(f"{key:>15}  {value}")


@eval_group.command("sts")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@config_options
@encode_options
@json_option
@handle_errors
def eval_sts(file, config_path, store_path, max_length, long_documents, as_json):
    """Spearman correlation of cosine similarity with gold scores on an STS-B file."""
    import numpy as np

    from indexer.encode.encoder import load_encoder
    from indexer.evaluation import load_sts, spearman

    cfg = build_config(config_path, store_path, max_length, long_documents)
    left, right, gold = load_sts(Path(file))
    encoder = load_encoder(cfg.model)
    a = encoder.encode_texts(left)
    b = encoder.encode_texts(right)
    if not cfg.model.normalize:
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
    result = {"spearman": round(spearman((a * b).sum(axis=1), gold), 5), "pairs": len(gold),
              "dtype": encoder.provenance.dtype}
    if as_json:
        print_json(result)
    else:
        click.echo(f"spearman {result['spearman']:.4f} over {result['pairs']} pairs")
