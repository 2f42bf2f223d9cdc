"""Where and in what the encoder runs: the device, the dtype (`model.dtype: auto` decided by
device, CPU ISA and the model's int8 check record) and how many batches run at once; and the
dtype a head trains, adapts and scores in on CPU (`resolve_dtype`).

Decides only; does not load a model (`indexer.encode.encoder`) nor quantise it
(`indexer.encode.quantize`). CPU flags come from `indexer.core.machine`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, get_args

import torch

from indexer.config import ModelConfig, resolve_model_path
from indexer.core import machine
from indexer.core.choices import DeviceChoice, Dtype, DtypeChoice
from indexer.encode import int8_check
from indexer.encode.quantize import DEFAULT_VARIANT
from indexer.errors import ModelError

log = logging.getLogger(__name__)

# the dtypes a model is loaded in (int8 is loaded in fp32, then quantised)
TORCH_DTYPES: dict[Dtype, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
DTYPE_CHOICES: tuple[DtypeChoice, ...] = get_args(DtypeChoice)


def cpu_has_bf16() -> bool:
    """True when the CPU has native bf16 matrix instructions (AVX512-BF16 or AMX).

    Reads `indexer.core.machine.cpu_flags`, which `BERTINDEX_CPU_FEATURES` overrides.
    """
    return machine.has_bf16()


def resolve_dtype(dtype: str) -> Literal["fp32", "bf16"]:
    """`model.dtype` of the config for a head on CPU (training, adapting, and `PairScorer`
    scoring): auto -> bf16 on CPUs with native bf16.

    Raises:
        ModelError: a dtype a head cannot run in on CPU (int8, fp16).
    """
    if dtype == "auto":
        return "bf16" if cpu_has_bf16() else "fp32"
    if dtype not in ("fp32", "bf16"):
        raise ModelError(f"a head on CPU runs in model.dtype fp32, bf16 or auto, not '{dtype}'")
    return dtype  # type: ignore[return-value]


def choose_device(device: DeviceChoice | str) -> torch.device:
    """The torch device for `model.device`.

    Args:
        device: `auto` (CUDA when torch sees it, else the CPU), `cpu` or `cuda`.
    Returns:
        The torch device.
    Raises:
        ModelError: `cuda` asked for and torch sees no CUDA device.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelError("model.device is 'cuda' but torch sees no CUDA device; use auto or cpu")
    return torch.device(device)


@dataclass(frozen=True)
class EncoderPath:
    """How the encoder runs here: `dtype` (fp32, bf16, fp16 or int8), the int8 variant, and
    why `dtype: auto` (or the configured dtype) led there."""

    dtype: Dtype
    reason: str
    variant: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def choose_path(
    dtype: DtypeChoice | str, device: torch.device, model_dir: Path | None = None
) -> EncoderPath:
    """The encoder path for `model.dtype` on this device (and, for int8, this model).

    `auto` on CUDA: bf16 where supported, else fp16. On a CPU: int8 where the model has a
    passed int8 check record for this CPU's ISA class that was faster than the path `auto`
    would otherwise take; else bf16 with native bf16 (AVX512-BF16/AMX); else fp32.

    Args:
        dtype: `model.dtype`.
        device: the device the model runs on (`choose_device`).
        model_dir: the model directory, whose int8 check record is read (None: none).
    Returns:
        The EncoderPath: the dtype, the int8 variant and why.
    Raises:
        ModelError: fp16 on a CPU, int8 off a CPU, or an unknown dtype.
    """
    if dtype == "fp16" and device.type == "cpu":
        raise ModelError("fp16 is not supported on CPU; use fp32, bf16 or int8")
    if dtype == "int8":
        if device.type != "cpu":
            raise ModelError("int8 runs on CPU only; use model.device cpu, or dtype auto on CUDA")
        record = int8_check.find(model_dir) if model_dir is not None else None
        verdict = int8_check.verdict(record, machine.isa_class())
        if not verdict.passed:
            log.warning(
                "int8 on this model: %s; vectors may differ from fp32 more than the "
                "quality gates allow",
                verdict.why,
            )
        return EncoderPath("int8", f"configured; {verdict.why}", verdict.variant or DEFAULT_VARIANT)
    if dtype != "auto":
        if dtype not in TORCH_DTYPES:
            raise ModelError(f"unknown model.dtype {dtype!r}; one of {', '.join(DTYPE_CHOICES)}")
        return EncoderPath(dtype, "configured")
    if device.type == "cuda":
        bf16 = torch.cuda.is_bf16_supported()
        return EncoderPath(
            "bf16" if bf16 else "fp16",
            "auto on CUDA: " + ("bf16 supported" if bf16 else "no bf16, fp16"),
        )
    flags, source = machine.cpu_flags()
    native = [f for f in machine.BF16_FLAGS if f in flags]
    fallback: Dtype = "bf16" if native else "fp32"
    why = (
        f"auto on CPU: native bf16 ({', '.join(native)})"
        if native
        else "auto on CPU: no native bf16 (no avx512_bf16/amx_bf16)"
    ) + f" per {source}"
    if model_dir is not None:
        verdict = int8_check.verdict(int8_check.find(model_dir), machine.isa_class())
        if verdict.passed and verdict.faster_than(fallback):
            return EncoderPath(
                "int8",
                f"{why}; int8 check passed and faster than {fallback} "
                f"on {machine.isa_class()} ({verdict.why})",
                verdict.variant,
            )
        why += f"; int8 not chosen: {verdict.why if not verdict.passed else 'not faster'}"
    return EncoderPath(fallback, why)


def describe_path(config: ModelConfig) -> dict:
    """The encoder path this configuration takes on this machine, without loading the model:
    {dtype, reason, variant, device, cpu_model, isa_class, isa_source, emulated}."""
    device = choose_device(config.device)
    try:
        model_dir = resolve_model_path(config.name)
    except Exception:  # noqa: BLE001 - a missing model is reported by the commands that load it
        model_dir = None
    path = choose_path(config.dtype, device, model_dir)
    flags, source = machine.cpu_flags()
    return {
        **path.to_dict(),
        "configured": config.dtype,
        "device": device.type,
        "cpu_model": machine.cpu_model(),
        "isa_class": machine.isa_class(),
        "isa_flags": sorted(f for f in machine.ISA_FLAGS if f in flags),
        "isa_source": source,
        "emulated": machine.emulated(),
    }


def choose_dtype(dtype: DtypeChoice | str, device: torch.device) -> torch.dtype:
    """The torch dtype the model is loaded in: `auto` as `choose_path` without int8; int8 is
    loaded in fp32 and quantised afterwards."""
    return load_dtype(choose_path(dtype, device).dtype)


def load_dtype(name: Dtype) -> torch.dtype:
    """The torch dtype a model runs `name` in: int8 is loaded in fp32 and quantised after."""
    return torch.float32 if name == "int8" else TORCH_DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """The name (`fp32`, `bf16`, `fp16`) of a torch dtype a model is loaded in."""
    return {v: k for k, v in TORCH_DTYPES.items()}[dtype]


def default_streams(device: torch.device, threads: int | None = None) -> int:
    """Batches in flight at once: one per torch thread on CPU (at most 8), one on CUDA."""
    if device.type == "cuda":
        return 1
    return max(1, min(threads or torch.get_num_threads(), 8))
