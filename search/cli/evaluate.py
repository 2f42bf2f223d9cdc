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


@click.group("eval")
def eval_group() -> None:
    """Evaluate on public benchmarks (BEIR retrieval, STS similarity, trained heads)."""


@eval_group.command("beir")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option("--split", default="test", show_default=True, help="qrels split to score.")
@click.option("--mode", "modes", multiple=True, type=click.Choice(SEARCH_MODES),
              help="Search mode to score (repeatable; default: every mode).")
@config_options
@encode_options
@json_option
@handle_errors
def eval_beir(folder, split, modes, config_path, store_path, max_length, long_documents,
              as_json):
    """Index a BEIR data set into a temporary store and report nDCG@10, recall@100, MRR@10.

    Each --mode is scored on the same store; JSON: {"modes": {mode: scores}, ...}.
    """
    from indexer.encode.encoder import load_encoder
    from indexer.evaluation import load_beir_queries, retrieval_scores
    from indexer.indexing.run import run_index
    from indexer.store import Store
    from search.query import Searcher

    cfg = build_config(config_path, None, max_length, long_documents)
    folder = Path(folder)
    queries, qrels = load_beir_queries(folder, split)
    with tempfile.TemporaryDirectory(prefix="bertindex-beir-") as tmp:
        cfg = cfg.with_overrides(**{"store.path": store_path or tmp})
        summary = run_index([str(folder)], cfg, collection=folder.name, fmt="beir",
                            progress=show_progress())
        encoder = load_encoder(cfg.model)
        with Store(cfg.store.path, read_only=True) as store:
            searcher = Searcher(cfg, store, encoder)
            ids = list(queries)
            texts = [queries[q] for q in ids]
            vectors = encoder.encode_queries(texts)
            per_mode = {}
            for mode in modes or SEARCH_MODES:
                results = searcher.search_many(texts, 100, mode=mode, vectors=vectors)
                run = {q: [h.id for h in hits] for q, hits in zip(ids, results)}
                per_mode[mode] = retrieval_scores(run, {q: qrels[q] for q in ids})
    scores = {"modes": per_mode, "queries": len(ids), "documents": summary["read"],
              "chunks": summary["chunks"], "max_length": cfg.model.max_length,
              "long_documents": cfg.long_documents.mode, "dtype": encoder.provenance.dtype,
              "fusion": cfg.search.model_dump()}
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
