"""`bertindex eval beir|sts`: score the encoder and the search on public benchmarks (BEIR
retrieval in every search mode, STS-B similarity). Thin layer over `indexer.evaluation`
(`evaluate_beir`, `evaluate_sts`); `eval head` (a trained head) comes from `search.cli.heads`,
added by `search.cli.main`.
"""

from __future__ import annotations

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
@click.option(
    "--mode",
    "modes",
    multiple=True,
    type=click.Choice(SEARCH_MODES),
    help="Search mode to score (repeatable; default: every mode).",
)
@click.option(
    "--collection",
    help="Collection the corpus is indexed into (default: the "
    "folder's name; `default` reuses a `bertindex index` store).",
)
@click.option(
    "--rerank",
    metavar="HEAD",
    type=click.Path(exists=True, file_okay=False),
    help="Also score each mode reranked by this pair head (`MODE+rerank`), with the "
    "reranking's share of the query time.",
)
@click.option(
    "--rerank-depth",
    type=click.IntRange(1, 100),
    default=RERANK_DEPTH,
    show_default=True,
    help="Hits --rerank reorders per query.",
)
@click.option(
    "--max-queries",
    type=click.IntRange(1),
    metavar="N",
    help="Score the first N queries only (a quick check; not the set's figure).",
)
@config_options
@encode_options
@json_option
@handle_errors
def eval_beir(
    folder,
    split,
    modes,
    collection,
    rerank,
    rerank_depth,
    max_queries,
    config_path,
    store_path,
    max_length,
    long_documents,
    as_json,
):
    """Index a BEIR data set into a temporary store and report nDCG@10, recall@100, MRR@10.

    Each --mode is scored on the same store; JSON: {"modes": {mode: scores}, ...}; with
    --rerank also `MODE+rerank` and {"rerank": {depth, seconds, share of the query time}}.
    """
    from indexer.evaluation.beir import evaluate_beir

    cfg = build_config(config_path, None, max_length, long_documents)
    scores = evaluate_beir(
        cfg,
        Path(folder),
        split,
        modes=modes,
        collection=collection,
        rerank=rerank,
        rerank_depth=rerank_depth,
        max_queries=max_queries,
        store=store_path,
        progress=show_progress(),
    )
    if as_json:
        print_json(scores)
    else:
        for mode, result in scores["modes"].items():
            click.echo(
                f"{mode:>8}  " + "  ".join(f"{key} {value}" for key, value in result.items())
            )
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
    from indexer.evaluation.sts import evaluate_sts

    result = evaluate_sts(
        build_config(config_path, store_path, max_length, long_documents), Path(file)
    )
    if as_json:
        print_json(result)
    else:
        click.echo(f"spearman {result['spearman']:.4f} over {result['pairs']} pairs")
