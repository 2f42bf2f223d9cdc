"""Pooling checked against values computed by hand."""

import pytest
import torch

from indexer.encode.pooling import cls_pool, l2_normalize, last4_pool, mean_pool, pool


def test_mean_pool_ignores_padding():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]],
                           [[2.0, 0.0], [4.0, 2.0], [6.0, 4.0]]])
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
