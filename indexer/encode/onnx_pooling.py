"""Pooling and normalisation in numpy, for the ONNX query path (no torch): the twin of
`indexer.encode.pooling.pool` + `l2_normalize` on what an export returns.

Pure functions over arrays; does not run the model. tests/indexer/encode/test_pooling.py pins it
equal to the torch pooling for every mode on hand-built, padded inputs.
"""

from __future__ import annotations

from typing import get_args

import numpy as np

from indexer.core.choices import PoolingMode
from indexer.encode.onnx_files import OutputKind

POOLING_MODES: tuple[PoolingMode, ...] = get_args(PoolingMode)


def pool_output(
    output: np.ndarray, mask: np.ndarray, kind: OutputKind, pooling: str, normalize: bool
) -> np.ndarray:
    """One vector per row from an export's output, as the torch encoder pools it.

    Args:
        output: what the export returned: (batch, tokens, hidden) token states for kind
            `states`, (batch, tokens, 4 * hidden) for `last4` (the last four layers
            concatenated), (batch, hidden) for `pooler`.
        mask: (batch, tokens), 1 = real token, 0 = padding.
        kind: the export's output kind (`encoder.json` "output").
        pooling: the `model.pooling` mode, one of POOLING_MODES.
        normalize: scale each vector to unit length (rows of zeros stay zero).
    Returns:
        (batch, dim) float32.
    Raises:
        ValueError: an unknown pooling mode.
    """
    if pooling not in POOLING_MODES:
        raise ValueError(f"unknown pooling '{pooling}'; choose one of {', '.join(POOLING_MODES)}")
    output = output.astype(np.float32, copy=False)
    if kind == "pooler":
        vectors = output  # the pooler output is the vector
    elif pooling == "cls":
        vectors = output[:, 0]
    else:  # mean, and last4 (the mean of each layer, concatenated, is the concatenation's mean)
        m = mask[:, :, None].astype(np.float32)  # (batch, tokens, 1)
        vectors = (output * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
    if normalize:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.maximum(norms, 1e-12)  # torch's F.normalize eps
    return vectors.astype(np.float32)
