"""Helpers shared by the bad-input and hostile-input tests: a Config on the tiny random BERT,
and one torch thread while a module runs (on a small shared machine, torch's default thread
pool spins against other processes, and the tiny model then runs many times slower)."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.config import Config


def tiny_model_config(model_dir: Path, store: Path, **overrides) -> Config:
    """The tiny model in fp32 on CPU, windows of 16 tokens, the store at `store`."""
    return Config().with_overrides(**{
        "model.name": str(model_dir), "model.dtype": "fp32", "model.device": "cpu",
        "model.max_length": 16, "long_documents.stride": 4, "store.path": str(store),
        **overrides,
    })


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
