"""`train_reranker`: a pair head trained as a reranker from a BEIR-layout set, in one call
(`bertindex train rerank`): index the corpus, mine pairs from the store's own hybrid hits,
train on whole queries, choose the head's share of the order on the held-out ones and record
how in the head's receipt.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexer.config import Config, resolve_model_path
from indexer.core.progress import ProgressArg, write_line
from indexer.encode.policy import resolve_dtype
from indexer.evaluation.beir import load_beir_queries
from indexer.heads.data import HeadData
from indexer.heads.pair.head_type import REGRESSION
from indexer.heads.receipt import summary, update_receipt
from indexer.heads.registry import head_type
from indexer.heads.train import TrainSettings, train_head
from indexer.indexing.run import run_index
from indexer.query.searcher import Searcher
from indexer.reranker.pairs import (
    DEFAULT_NEGATIVES,
    MINE_DEPTH,
    cut_passages,
    mine_pairs,
    split_queries,
)
from indexer.reranker.weight import tune_rerank_weight

RERANK_MAX_LENGTH = 256  # `max_length="auto"`: query + passage, the passage cut to fit


@dataclass(frozen=True)
class PairSource:
    """Where a reranker's pairs come from: a BEIR-layout folder's `split` judgements, its
    corpus indexed into `collection` (None: the folder's name)."""

    folder: Path
    split: str = "train"
    collection: str | None = None
    max_queries: int | None = None  # the split's first N queries only (recorded)
    negatives: int = DEFAULT_NEGATIVES
    mine_depth: int = MINE_DEPTH
    validation_share: float = 0.2  # queries held out, whole, to pick the epoch and the share


def train_reranker(
    config: Config,
    source: PairSource,
    out: Path,
    *,
    base: str | None = None,
    max_length: int | str = "auto",
    seed: int = 42,
    progress: ProgressArg = False,
    **options: Any,
) -> dict:
    """Train a pair head as a reranker and keep its share of the order in its config.json.

    Args:
        config: the configuration (`store.path` receives the corpus; unchanged documents are
            skipped).
        source: the BEIR set and how its pairs are drawn.
        out: the head's folder.
        base: the encoder it starts from (None: `model.name`).
        max_length: query + passage tokens ("auto": `RERANK_MAX_LENGTH`).
        seed: the draw of negatives, the held-out queries and the training.
        options: further `TrainSettings` fields (epochs, lr, batch_size, head_only, ...).
    Returns:
        {"receipt": the full receipt, "summary": its short form with `rerank_pairs` and
        `rerank_weight`}.
    """
    queries, qrels = load_beir_queries(source.folder, source.split)
    if source.max_queries:
        queries = dict(list(queries.items())[: source.max_queries])
    collection = source.collection or source.folder.name
    run_index([str(source.folder)], config, collection=collection, fmt="beir", progress=progress)
    with Searcher.open(config) as searcher:
        items, record = mine_pairs(
            searcher, collection, queries, qrels, source.negatives, source.mine_depth, seed
        )
    length = RERANK_MAX_LENGTH if max_length == "auto" else int(max_length)
    settings = TrainSettings(
        task="pair",
        base=resolve_model_path(base or config.model.name),
        out=out,
        max_length=length,
        seed=seed,
        dtype=resolve_dtype(config.model.dtype),
        blend="off",
        **options,
    )
    record["passages_cut"] = cut_passages(items, _tokenizer(settings.base), length)
    record["max_length"] = length
    record["max_queries"] = source.max_queries
    train_items, val_items = split_queries(items, source.validation_share, seed)
    held = sorted({i["id"].split("/", 1)[0] for i in val_items})
    record["validation_queries"] = len(held)
    receipt = train_head(
        _head_data(source, config, train_items, val_items), settings, progress=progress
    )
    with Searcher.open(config) as searcher:
        weight = tune_rerank_weight(searcher, collection, out, {q: queries[q] for q in held}, qrels)
    write_line(
        f"reranker's share of the order: {weight['weight']} (validation nDCG@10 "
        f"{weight['ndcg@10']['0.0']:.4f} first stage -> "
        f"{weight['ndcg@10'][str(weight['weight'])]:.4f})",
        progress,
    )
    receipt = update_receipt(out, {"rerank_pairs": record, "rerank_weight": weight}, receipt)
    short = summary(receipt)
    short["rerank_pairs"] = record
    short["rerank_weight"] = {k: weight[k] for k in ("weight", "depth", "queries")}
    return {"receipt": receipt, "summary": short}


def _tokenizer(base: Path):
    """The base encoder's tokenizer, which cuts the passages (transformers loads here)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(base)


def _head_data(
    source: PairSource, config: Config, train_items: list[dict], val_items: list[dict]
) -> HeadData:
    """The mined pairs as a pair head's train and validation splits (regression, 0/1)."""
    kind = head_type("pair")
    where = f"{source.folder} qrels/{source.split}.tsv"
    return HeadData(
        task="pair",
        label_names=list(REGRESSION),
        splits={
            name: [kind.example(i["id"], i, REGRESSION, f"{where}, {i['id']}") for i in rows]
            for name, rows in (("train", train_items), ("validation", val_items))
        },
        sources={
            "train": f"{where}: pairs mined from {config.store.path}",
            "validation": f"{where}: {source.validation_share:.0%} of the queries, held out",
        },
    )
