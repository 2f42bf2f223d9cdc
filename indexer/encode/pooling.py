"""Pooling: turn token states into one vector per text. Pure functions over tensors.

Does not normalise; `l2_normalize` is a separate step so each piece can be checked by hand.
The ONNX query path pools the same way in numpy (`indexer.encode.onnx_pooling`;
tests/indexer/encode/test_pooling.py pins the two equal).
"""

from __future__ import annotations

from typing import get_args

import torch

from indexer.core.choices import PoolingMode

POOLING_MODES: tuple[PoolingMode, ...] = get_args(PoolingMode)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of the token states where attention_mask is 1 (padding never counts).

    Args:
        hidden: (batch, seq, dim) token states.
        attention_mask: (batch, seq), 1 = real token, 0 = padding (HF convention).
    Returns:
        (batch, dim) float32.
    """
    mask = attention_mask.unsqueeze(-1).to(torch.float32)  # (batch, seq, 1)
    summed = (hidden.to(torch.float32) * mask).sum(dim=1)
    counts = mask.sum(dim=1).clamp(min=1.0)
    return summed / counts


def cls_pool(hidden: torch.Tensor) -> torch.Tensor:
    """The state of the first token ([CLS]): (batch, seq, dim) -> (batch, dim) float32."""
    return hidden[:, 0].to(torch.float32)


def last4_pool(
    hidden_states: tuple[torch.Tensor, ...], attention_mask: torch.Tensor
) -> torch.Tensor:
    """Mean over the attention mask of each of the last four layers, concatenated.

    Args:
        hidden_states: embeddings output plus one (batch, seq, dim) tensor per layer.
        attention_mask: (batch, seq).
    Returns:
        (batch, 4 * dim) float32, layers in order [-4, -3, -2, -1].
    """
    if len(hidden_states) < 5:
        raise ValueError("last4 pooling needs a model with at least four layers")
    return torch.cat([mean_pool(h, attention_mask) for h in hidden_states[-4:]], dim=-1)


def pool(outputs, attention_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Apply one pooling mode to a HF model output.

    Args:
        outputs: a `BaseModelOutputWithPooling` (with `hidden_states` for `last4`).
        attention_mask: (batch, seq).
        mode: one of POOLING_MODES.
    Returns:
        (batch, dim) float32; (batch, 4 * dim) for `last4`.
    """
    if mode == "mean":
        return mean_pool(outputs.last_hidden_state, attention_mask)
    if mode == "cls":
        return cls_pool(outputs.last_hidden_state)
    if mode == "pooler":
        if getattr(outputs, "pooler_output", None) is None:
            raise ValueError("pooling 'pooler' needs a model with a pooler layer; use mean or cls")
        return outputs.pooler_output.to(torch.float32)
    if mode == "last4":
        return last4_pool(outputs.hidden_states, attention_mask)
    raise ValueError(f"unknown pooling '{mode}'; choose one of {', '.join(POOLING_MODES)}")


def l2_normalize(vectors: torch.Tensor) -> torch.Tensor:
    """Scale each row to unit length (rows of zeros stay zero)."""
    return torch.nn.functional.normalize(vectors, p=2.0, dim=-1)
