"""Shared fixtures: a tiny random BERT saved in process (nothing is downloaded), small corpora,
and the path to ../shared/data for the tests that use real data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

TINY_WORDS = ["the", "cat", "dog", "sat", "on", "mat", "rug", "sofa", "slept", "parse", "command", "line", "arguments", "python", "file", "read", "write", "compress", "gzip", "data", "search", "index", "vector", "query", "text", "document", "red", "blue", "green", "apple", "banana", "pear", "river", "mountain", "sea", "city", "house", "car", "train", "fast", "slow", "big", "small"]


def build_tiny_bert(path: Path, layers: int = 4) -> Path:
    """A random BERT (hidden 32, `layers` layers) with a WordPiece vocab, saved to `path`."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS]
    vocab += [c for c in "abcdefghijklmnopqrstuvwxyz"] + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=layers,
                        num_attention_heads=4, intermediate_size=37, max_position_embeddings=512,
                        initializer_range=0.5)  # wide weights: texts get distinct vectors
    BertModel(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-encoder"))


@pytest.fixture
def tiny_config(tiny_model_dir, tmp_path):
    """A Config using the tiny model in fp32 on CPU, with a store under tmp_path.

    Queries are encoded with torch and index runs write no ONNX export (about a second per
    store): tests/test_onnx_query.py sets `search.query_encoder: auto`, the default.
    """
    from indexer.config import Config

    return Config().with_overrides(**{
        "model.name": str(tiny_model_dir), "model.dtype": "fp32", "model.device": "cpu",
        "model.max_length": 16, "long_documents.stride": 4, "store.path": str(tmp_path / "store"),
        "search.query_encoder": "torch",
    })


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    rows = [
        {"id": "a1", "text": "the cat sat on the mat", "kind": "pet", "lang": "en"},
        {"id": "a2", "text": "the dog slept on the sofa", "kind": "pet", "lang": "en"},
        {"id": "b1", "text": "parse command line arguments in python", "kind": "code", "lang": "en"},
        {"id": "b2", "text": "compress a file with gzip and write data", "kind": "code", "lang": "en"},
        {"id": "c1", "text": "red apple green pear blue river big mountain small city fast train "
         "slow car the sea house on a rug banana query vector index search text document data",
         "kind": "long", "lang": "xx"},
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def require_shared(*parts: str) -> Path:
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found: real-data tests need ../shared/data beside the repo")
    return path


@pytest.fixture
def serve_flows(monkeypatch):
    """`serve_flows(config)` runs `bertindex flows serve --config CONFIG` without starting
    Prefect and returns (deployments, limit) as they would have been served."""
    from click.testing import CliRunner

    import flows.runtime
    import flows.schedules
    from search.cli.main import main

    served = {}
    monkeypatch.setattr(flows.runtime, "warm_up_api", lambda services=False, database=None: None)
    monkeypatch.setattr(flows.runtime, "wait_for_api", lambda: None)
    monkeypatch.setattr(flows.schedules, "serve_deployments",
                        lambda deployments, limit: served.update(d=deployments, limit=limit))

    def serve(config: Path) -> tuple[list, int]:
        result = CliRunner().invoke(main, ["flows", "serve", "--config", str(config)])
        assert result.exit_code == 0, result.output
        return served["d"], served["limit"]

    return serve


@pytest.fixture(scope="session")
def prefect_api():
    """One temporary Prefect API for the whole session: starting one costs 8-16 s, so every
    test that runs a flow shares it (tests/test_cli.py, test_flows.py, test_annotate*.py)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
