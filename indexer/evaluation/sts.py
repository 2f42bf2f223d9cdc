"""STS-B evaluation: the Spearman correlation of the encoder's cosine similarity with the gold
scores of sentence pairs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from indexer.config import Config
from indexer.encode.encoder import load_encoder
from indexer.errors import InputError
from indexer.heads.metrics import correlations
from indexer.ingest.formats.base import UNSPLIT
from indexer.ingest.formats.stsb import read_stsb


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
    return correlations(b.tolist(), a.tolist())["spearman"]


def evaluate_sts(config: Config, path: Path) -> dict:
    """Score the configured encoder on an STS-B file (`bertindex eval sts`).

    Args:
        config: the configuration (its `model` is the encoder scored).
        path: the STS-B file (`load_sts`).
    Returns:
        {"spearman", "pairs", "dtype"}.
    """
    left, right, gold = load_sts(path)
    encoder = load_encoder(config.model)
    a = encoder.encode_texts(left)
    b = encoder.encode_texts(right)
    if not config.model.normalize:
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return {
        "spearman": round(spearman((a * b).sum(axis=1), gold), 5),
        "pairs": len(gold),
        "dtype": encoder.provenance.dtype,
    }
