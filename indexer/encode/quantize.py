"""int8 encoder: a BERT's linear layers in int8, some kept in fp32.

Two schemes. torch's dynamic quantisation (`torch.ao.quantization.quantize_dynamic`, FBGEMM)
stores each chosen `nn.Linear`'s weights as int8 (per output channel or per tensor) and
quantises its input per tensor at run time. `Int8Linear` (the `per-token` variants) scales
inputs per token and weights per output channel and multiplies with `torch._int_mm`,
optionally after SmoothQuant-style smoothing from a calibration run. Everything else
(embeddings, attention, layer norms, GELU, pooling) stays fp32. Which layers may be quantised
without losing quality is a property of the model, so a variant is chosen by measurement
(`benchmarks/int8_quality.py`) and `dtype: auto` only picks int8 for a model whose check record says
it passed (`INT8_CHECK_FILE` beside the model, see `indexer.encode.int8_check`).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Int8Variant:
    """One way to quantise: which linear layers stay fp32 and how weights are scaled.

    Args:
        name: short label used in check records and benchmark tables.
        keep_fp32: regular expressions over module names (`encoder.layer.3.output.dense`);
            a linear layer whose name matches any of them stays fp32.
        per_channel: one weight scale per output channel (else one per tensor).
    """

    name: str
    keep_fp32: tuple[str, ...] = ()
    per_channel: bool = True
    per_token: bool = False  # activations scaled per token (`Int8Linear`), not per tensor
    smooth: float | None = None  # SmoothQuant alpha: move activation outliers into the weights

    def kept(self, module_name: str) -> bool:
        return any(re.search(p, module_name) for p in self.keep_fp32)


FFN_OUT = r"layer\.\d+\.output\.dense$"  # BertOutput: the FFN's second linear (after GELU)
ATTN_OUT = r"attention\.output\.dense$"  # BertSelfOutput
POOLER = r"^pooler\."

VARIANTS = {
    v.name: v
    for v in (
        Int8Variant("all-per-tensor", (POOLER,), per_channel=False),
        Int8Variant("all", (POOLER,)),
        Int8Variant("keep-ffn-out", (POOLER, FFN_OUT)),
        Int8Variant("keep-ffn-attn-out", (POOLER, FFN_OUT, ATTN_OUT)),
        Int8Variant("keep-first-last", (POOLER, r"layer\.0\.", r"layer\.{last}\.")),
        Int8Variant(
            "keep-ffn-out-first-last", (POOLER, FFN_OUT, r"layer\.0\.", r"layer\.{last}\.")
        ),
        Int8Variant("per-token", (POOLER,), per_token=True),
        Int8Variant("per-token-keep-ffn-out", (POOLER, FFN_OUT), per_token=True),
        Int8Variant("smooth", (POOLER,), per_token=True, smooth=0.5),
        Int8Variant("smooth-keep-ffn-out", (POOLER, FFN_OUT), per_token=True, smooth=0.5),
    )
}
DEFAULT_VARIANT = "smooth"  # the variant that passed the gates (docs/guides/cpus.md)


def _resolve(variant: Int8Variant, model: nn.Module) -> Int8Variant:
    """Fill `{last}` with the model's last layer index."""
    layers = getattr(getattr(model, "config", None), "num_hidden_layers", 0)
    return Int8Variant(
        variant.name,
        tuple(p.replace("{last}", str(max(layers - 1, 0))) for p in variant.keep_fp32),
        variant.per_channel,
        variant.per_token,
        variant.smooth,
    )


def quantizable(model: nn.Module, variant: Int8Variant) -> list[str]:
    """Names of the linear layers this variant turns into int8."""
    variant = _resolve(variant, model)
    return [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and not variant.kept(name)
    ]


def quantize_int8(
    model: nn.Module, variant: Int8Variant | str = DEFAULT_VARIANT, calibration=None
) -> nn.Module:
    """A dynamically quantised copy of an fp32 model (the original is left untouched).

    Args:
        calibration: for a `smooth` variant, a callable that runs the fp32 model over a few
            typical batches (`model` as its argument); each linear layer's input channels'
            largest absolute values seen there set its smoothing scales.
    Raises:
        ValueError: an unknown variant name, a model that is not fp32, or a `smooth` variant
            without calibration.
    """
    from torch.ao.quantization import (
        default_dynamic_qconfig,
        per_channel_dynamic_qconfig,
        quantize_dynamic,
    )

    if isinstance(variant, str):
        if variant not in VARIANTS:
            raise ValueError(f"unknown int8 variant {variant!r}; one of {', '.join(VARIANTS)}")
        variant = VARIANTS[variant]
    if next(model.parameters()).dtype != torch.float32:
        raise ValueError("int8 quantisation starts from an fp32 model")
    if variant.per_token:
        names = quantizable(model, variant)
        amax = None
        if variant.smooth is not None:
            if calibration is None:
                raise ValueError(f"int8 variant {variant.name} needs calibration batches")
            amax = input_amax(model, names, calibration)
        return _per_token(copy.deepcopy(model), names, amax, variant.smooth)
    qconfig = per_channel_dynamic_qconfig if variant.per_channel else default_dynamic_qconfig
    names = quantizable(model, variant)
    if "x86" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "x86"
    return quantize_dynamic(copy.deepcopy(model), {n: qconfig for n in names}, dtype=torch.qint8)


class Int8Linear(nn.Module):
    """A linear layer in int8: weights per output channel, activations per token (row), both
    symmetric, multiplied by `torch._int_mm` (int8 x int8 -> int32) and scaled back to fp32.

    Per-token scales keep one outlier token from flattening every other token's values, the
    weakness of per-tensor dynamic quantisation on BERT's FFN inputs.

    Weights use 127 levels each side on CPUs with int8 dot-product instructions (VNNI, AMX)
    and 63 elsewhere: without VNNI, oneDNN multiplies int8 pairs into saturating int16 sums
    (`vpmaddubsw`), which overflow for 8-bit weights (measured: `torch._int_mm` inexact under
    `ONEDNN_MAX_CPU_ISA=AVX2` with 127, exact with 63).
    """

    # buffers, registered in __init__ (torch types an unknown attribute as Tensor | Module)
    inv_smooth: torch.Tensor | None
    weight_t: torch.Tensor
    weight_scale: torch.Tensor

    def __init__(
        self,
        linear: nn.Linear,
        act_amax: torch.Tensor | None = None,
        alpha: float = 0.5,
        weight_levels: int | None = None,
    ):
        super().__init__()
        if weight_levels is None:
            from indexer.core.machine import has_vnni

            weight_levels = 127 if has_vnni() else 63
        self.weight_levels = weight_levels
        weight = linear.weight.detach().float()
        inv_smooth = None
        if act_amax is not None:  # SmoothQuant: x W^T = (x / s) (W s)^T
            w_amax = weight.abs().amax(dim=0).clamp(min=1e-5)
            smooth = (act_amax.clamp(min=1e-5) ** alpha / w_amax ** (1 - alpha)).clamp(min=1e-5)
            weight = weight * smooth[None, :]
            inv_smooth = 1.0 / smooth
        self.register_buffer("inv_smooth", inv_smooth)
        scale = weight.abs().amax(dim=1).clamp(min=1e-8) / weight_levels
        self.register_buffer(
            "weight_t",
            torch.round(weight / scale[:, None])
            .clamp(-weight_levels, weight_levels)
            .to(torch.int8)
            .t()
            .contiguous(),
        )
        self.register_buffer("weight_scale", scale)
        self.bias = (
            None
            if linear.bias is None
            else nn.Parameter(linear.bias.detach().float(), requires_grad=False)
        )
        self.out_features = linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if self.inv_smooth is not None:
            rows = rows * self.inv_smooth
        scale = rows.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127
        q = torch.round(rows / scale).to(torch.int8)
        out = torch._int_mm(q, self.weight_t).float().mul_(scale).mul_(self.weight_scale)
        if self.bias is not None:
            out.add_(self.bias)
        return out.reshape(*x.shape[:-1], self.out_features)


def input_amax(model: nn.Module, names: list[str], calibration) -> dict[str, torch.Tensor]:
    """Per input channel, the largest absolute value each named linear layer sees while
    `calibration(model)` runs."""
    amax: dict[str, torch.Tensor] = {}
    hooks = []

    def hook(name):
        def record(_module, args):
            seen = args[0].detach().reshape(-1, args[0].shape[-1]).abs().amax(dim=0).float()
            amax[name] = torch.maximum(amax[name], seen) if name in amax else seen

        return record

    for name in names:
        hooks.append(model.get_submodule(name).register_forward_pre_hook(hook(name)))
    try:
        with torch.inference_mode():
            calibration(model)
    finally:
        for h in hooks:
            h.remove()
    return amax


def _per_token(
    model: nn.Module, names: list[str], amax: dict | None = None, alpha: float | None = None
) -> nn.Module:
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        act = amax.get(name) if amax is not None else None
        setattr(parent, child, Int8Linear(getattr(parent, child), act, alpha or 0.5))
    return model
