"""The measured limit of encoding on this machine: the matmul peak in fp32, bf16 or int8 (the
int8 path is the encoder's own `Int8Linear`), the FLOPs of encoding, the share of the peak a run
reached, and the machine facts a benchmark's JSON carries beside them.
"""

from __future__ import annotations

import os
import time

from indexer.core.machine import (
    ISA_FLAGS,
    cpu_flags,
    cpu_model,
    emulated,
    isa_class,
    library_versions,
    proc_cpu_flags,
    thread_counts,
)


def matmul_peak(
    dtype: str = "fp32", m: int = 4096, k: int = 384, n: int = 1536, seconds: float = 0.6
) -> float:
    """GFLOP/s of this machine's matmul in `dtype` (fp32, bf16 or int8) on all torch threads.

    The shape is a BERT-small linear layer over a batch of tokens (tokens x hidden @ hidden x
    4 hidden); int8 is `Int8Linear` (per-token int8 via `torch._int_mm`, what `dtype: int8`
    runs, its quantise and rescale steps included). Best of
    repeated runs over about `seconds`, so a busy machine lowers it less than it lowers a mean.
    """
    import torch

    torch.manual_seed(0)
    a = torch.randn(m, k)
    if dtype == "int8":
        from indexer.encode.quantize import Int8Linear

        layer = Int8Linear(torch.nn.Linear(k, n, bias=False))

        def step():
            return layer(a)
    elif dtype in ("fp32", "bf16"):
        torch_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
        a = a.to(torch_dtype)
        b = torch.randn(k, n).to(torch_dtype)

        def step():
            return a @ b
    else:
        raise ValueError(f"matmul_peak: dtype fp32, bf16 or int8, not {dtype!r}")
    with torch.inference_mode():
        step()
        best, deadline = float("inf"), time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            step()
            best = min(best, time.perf_counter() - start)
    return round(2 * m * k * n / best / 1e9, 1)


def encode_flops(config, lengths) -> float:
    """FLOPs of encoding sequences of these token lengths with a BERT of this HF config:
    per layer 2·t·(4·h² + 2·h·f) for the linear layers and 4·t²·h for attention, no padding
    (the way docs/benchmarks.md counts ≈ 6 GFLOP per 256-token MiniLM passage)."""
    h, f = config.hidden_size, config.intermediate_size
    layers = config.num_hidden_layers
    return float(sum(layers * (2 * t * (4 * h * h + 2 * h * f) + 4 * t * t * h) for t in lengths))


def limit_share(flops: float, seconds: float, peak_gflops: float) -> float:
    """Share of the matmul peak a run reached: (flops / seconds) / peak."""
    return round(flops / seconds / (peak_gflops * 1e9), 3)


def machine_info(dtypes=("fp32",), peak: bool = True) -> dict:
    """Everything a benchmark's JSON needs to say where it ran."""
    import torch

    flags, source = cpu_flags()
    real = proc_cpu_flags()
    info = {
        "cpu_model": cpu_model(),
        "isa": {f: f in flags for f in ISA_FLAGS},
        "isa_source": source,
        "isa_class": isa_class(),
        "real_isa": {f: True for f in ISA_FLAGS if f in real},
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "emulated": emulated(),
        "libraries": library_versions(),
        "threads": thread_counts(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    if peak:
        info["matmul_peak_gflops"] = {d: matmul_peak(d) for d in dict.fromkeys(dtypes)}
    return info
