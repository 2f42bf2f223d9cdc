"""Evaluation on public benchmarks: BEIR retrieval metrics and STS Spearman correlation.

Metrics follow BEIR/MTEB: nDCG@10 with graded gains from the qrels (linear gain, log2
discount), recall@100 over relevant documents, MRR@10 over the first relevant hit.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from indexer.errors import InputError
from indexer.heads.metrics import correlations
from indexer.ingest.formats.base import UNSPLIT
from indexer.ingest.formats.jsonl import read_labelled_jsonl
from indexer.ingest.formats.stsb import read_stsb


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
                raise InputError(f"{path}:{number}: expected `query-id<TAB>corpus-id<TAB>score` "
                                 f"with an integer score, got {chr(9).join(row)[:80]!r}")
            qrels.setdefault(row[0].strip(), {})[row[1].strip()] = int(score)
    return qrels


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def load_beir_queries(folder: Path, split: str = "test") -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """Queries that have judgements in `qrels/<split>.tsv`, and those judgements."""
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise InputError(f"{qrels_path} not found; a BEIR folder holds corpus.jsonl, "
                         "queries.jsonl and qrels/<split>.tsv")
    qrels = read_qrels(qrels_path)
    queries_path = next((p for p in (folder / "queries.jsonl", folder / "queries.jsonl.gz") if p.is_file()), None)
    if queries_path is None:
        raise InputError(f"{folder}: queries.jsonl not found")
    rows = read_labelled_jsonl(queries_path).items[UNSPLIT]  # the one JSONL reader
    queries = {str(q["_id"]): q["text"] for _, q in rows if str(q["_id"]) in qrels}
    return queries, qrels


def retrieval_scores(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict:
    """nDCG@10, recall@100 and MRR@10 averaged over the judged queries.

    Args:
        run: query id -> ranked document ids (best first).
        qrels: query id -> {document id: relevance grade}.
    """
    ndcgs, recalls, mrrs = [], [], []
    for qid, judged in qrels.items():
        ranked = list(run.get(qid, []))
        gains = [judged.get(d, 0) for d in ranked[:10]]
        dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
        ideal = sorted(judged.values(), reverse=True)[:10]
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        ndcgs.append(dcg / idcg if idcg > 0 else 0.0)
        relevant = {d for d, g in judged.items() if g > 0}
        found = len(relevant & set(ranked[:100]))
        recalls.append(found / len(relevant) if relevant else 0.0)
        first = next((i for i, d in enumerate(ranked[:10]) if judged.get(d, 0) > 0), None)
        mrrs.append(1.0 / (first + 1) if first is not None else 0.0)
    return {
        "ndcg@10": round(float(np.mean(ndcgs)), 5),
        "recall@100": round(float(np.mean(recalls)), 5),
        "mrr@10": round(float(np.mean(mrrs)), 5),
        "queries": len(qrels),
    }


def load_sts(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    """STS-B file: tab-separated, no quoting; score in column 5, sentences in 6 and 7 (read by
    the pair heads' reader, `indexer.ingest.formats.stsb`)."""
    if not path.is_file():
        raise InputError(f"{path}: no such STS file")
    items = [item for _, item in read_stsb(path).items[UNSPLIT]]
    try:
        gold = np.asarray([float(item["score"]) for item in items])
    except ValueError as exc:
        raise InputError(f"{path}: a score (5th column) is not a number: {exc}") from None
    return [item["text_a"] for item in items], [item["text_b"] for item in items], gold


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (ties share their average rank): the one the pair heads'
    receipts report (`indexer.heads.metrics.correlations`)."""
    return correlations(b, a)["spearman"]
