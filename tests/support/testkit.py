"""Helpers every test directory may import (tests/support is on pytest's `pythonpath`): the
repository root, ../shared/data, the tiny random BERT's vocabulary and builder, a Config on
that model, and vector files to import. The fixtures built from them live in tests/conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.config import Config

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = Path(__file__).resolve().parent
SHARED_DATA = ROOT.parent / "shared" / "data"

TINY_WORDS = [
    "the",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "rug",
    "sofa",
    "slept",
    "parse",
    "command",
    "line",
    "arguments",
    "python",
    "file",
    "read",
    "write",
    "compress",
    "gzip",
    "data",
    "search",
    "index",
    "vector",
    "query",
    "text",
    "document",
    "red",
    "blue",
    "green",
    "apple",
    "banana",
    "pear",
    "river",
    "mountain",
    "sea",
    "city",
    "house",
    "car",
    "train",
    "fast",
    "slow",
    "big",
    "small",
]


def build_tiny_bert(path: Path, layers: int = 4) -> Path:
    """A random BERT (hidden 32, `layers` layers) with a WordPiece vocab, saved to `path`."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS]
    vocab += [c for c in "abcdefghijklmnopqrstuvwxyz"] + [
        f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"
    ]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=512,
        initializer_range=0.5,
    )  # wide weights: texts get distinct vectors
    BertModel(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def write_vectors(path: Path, ids, vectors, model: str, fixed: bool = True) -> Path:
    """A vector file for `run_index(vectors=...)` in the format its suffix names (.npz or
    .parquet; `fixed`: a fixed-size list column, else a list column)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix == ".npz":
        np.savez(path, ids=np.array(ids), vectors=vectors, model=model)
        return path
    flat = pa.array(np.asarray(vectors, np.float32).ravel())
    column = (
        pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
        if fixed
        else pa.array([list(map(float, row)) for row in vectors], pa.list_(pa.float32()))
    )
    table = pa.table({"id": ids, "vector": column}).replace_schema_metadata({"model": model})
    pq.write_table(table, path)
    return path


def require_shared(*parts: str) -> Path:
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found: real-data tests need ../shared/data beside the repo")
    return path


def tiny_model_config(model_dir: Path, store: Path, **overrides) -> Config:
    """The tiny model in fp32 on CPU, windows of 16 tokens, the store at `store`."""
    return Config().with_overrides(
        **{
            "model.name": str(model_dir),
            "model.dtype": "fp32",
            "model.device": "cpu",
            "model.max_length": 16,
            "long_documents.stride": 4,
            "store.path": str(store),
            **overrides,
        }
    )
