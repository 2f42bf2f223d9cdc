"""Synthetic unit vectors for index tests: seeded clusters on the sphere (neighbours that an
approximate index can miss) and the provenance of a made-up encoder of their width."""

from __future__ import annotations

import numpy as np

from indexer.records.provenance import Provenance


def clustered(n, dim=32, clusters=64, seed=0, spread=0.35):
    """(n, dim) float32 unit vectors around `clusters` seeded centres."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim))
    x = centres[rng.integers(0, clusters, n)] + spread * rng.normal(size=(n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def synthetic_provenance(dim: int) -> Provenance:
    return Provenance(
        model_name="synthetic",
        weights_hash="-",
        pooling="mean",
        normalize=True,
        max_length=16,
        dim=dim,
        dtype="fp32",
    )
