"""Pooling checked against values computed by hand, and the ONNX path's numpy pooling
checked against the torch one."""

from typing import get_args

import numpy as np
import pytest
import torch

from indexer.core.choices import PoolingMode
from indexer.encode.onnx_files import output_kind
from indexer.encode.onnx_pooling import POOLING_MODES as numpy_modes
from indexer.encode.onnx_pooling import pool_output
from indexer.encode.pooling import (
    POOLING_MODES,
    cls_pool,
    l2_normalize,
    last4_pool,
    mean_pool,
    pool,
)


def test_mean_pool_ignores_padding():
    hidden = torch.tensor(
        [[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]], [[2.0, 0.0], [4.0, 2.0], [6.0, 4.0]]]
    )
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    # row 0: mean of (1,2),(3,4) = (2,3); row 1: mean of three rows = (4,2)
    assert mean_pool(hidden, mask).tolist() == [[2.0, 3.0], [4.0, 2.0]]


def test_cls_pool_takes_first_token():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]])
    assert cls_pool(hidden).tolist() == [[1.0, 2.0], [5.0, 6.0]]


def test_last4_concatenates_means_of_last_four_layers():
    mask = torch.tensor([[1, 0]])
    layers = tuple(torch.tensor([[[float(i), float(-i)], [99.0, 99.0]]]) for i in range(6))
    # layers 2..5, first token only (second is padding)
    assert last4_pool(layers, mask).tolist() == [[2.0, -2.0, 3.0, -3.0, 4.0, -4.0, 5.0, -5.0]]


def test_last4_needs_four_layers():
    with pytest.raises(ValueError, match="four layers"):
        last4_pool(tuple(torch.zeros(1, 1, 2) for _ in range(3)), torch.ones(1, 1))


def test_pool_dispatch_and_pooler():
    class Out:
        last_hidden_state = torch.tensor([[[3.0, 4.0], [1.0, 1.0]]])
        pooler_output = torch.tensor([[0.5, -0.5]])
        hidden_states = None

    mask = torch.tensor([[1, 1]])
    assert pool(Out, mask, "pooler").tolist() == [[0.5, -0.5]]
    assert pool(Out, mask, "cls").tolist() == [[3.0, 4.0]]
    assert pool(Out, mask, "mean").tolist() == [[2.0, 2.5]]
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(Out, mask, "max")


def test_l2_normalize():
    out = l2_normalize(torch.tensor([[3.0, 4.0], [0.0, 0.0]]))
    assert torch.allclose(out, torch.tensor([[0.6, 0.8], [0.0, 0.0]]))


def _outputs(layers, pooler):
    """A HF-like model output over hand-built layers (embeddings + one tensor per layer)."""

    class Out:
        last_hidden_state = layers[-1]
        pooler_output = pooler
        hidden_states = layers

    return Out


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("mode", POOLING_MODES)
def test_numpy_pooling_of_the_onnx_path_equals_torch(mode, normalize):
    """The ONNX path pools the export's output in numpy: equal to `pool` (+ `l2_normalize`)
    for every mode, on rows whose padding differs (padded states hold large values)."""
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    layers = tuple(
        torch.tensor(
            [
                [[i + 1.0, -2.0], [3.0, i * 0.5], [-1.0, 4.0], [2.0, 2.0]],
                [[0.5, i - 2.0], [i * 1.5, 1.0], [900.0, -900.0], [700.0, 800.0]],
                [[-3.0, i + 0.25], [500.0, 600.0], [-400.0, 300.0], [200.0, 100.0]],
            ]
        )
        for i in range(6)
    )
    pooler = torch.tensor([[0.25, -1.0], [2.0, 2.0], [-0.5, 0.0]])
    want = pool(_outputs(layers, pooler), mask, mode)
    if normalize:
        want = l2_normalize(want)
    kind = output_kind(mode)
    exported = {"states": layers[-1], "pooler": pooler, "last4": torch.cat(layers[-4:], dim=-1)}[
        kind
    ]  # what the export returns
    got = pool_output(exported.numpy(), mask.numpy(), kind, mode, normalize)
    assert got.dtype == np.float32 and got.shape == tuple(want.shape)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)


def test_both_poolings_know_every_mode():
    assert POOLING_MODES == numpy_modes == get_args(PoolingMode)
    with pytest.raises(ValueError, match="unknown pooling 'max'; choose one of mean, cls"):
        pool_output(np.zeros((1, 1, 2), np.float32), np.ones((1, 1)), "states", "max", False)
