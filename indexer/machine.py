"""What machine a figure was measured on: CPU model, ISA flags, libraries, threads, and the
measured matmul peak that bounds encoding speed on it.

`cpu_flags()` is the one place that reads the CPU's ISA flags; the encoder's `dtype: auto`
choice uses it. `BERTINDEX_CPU_FEATURES` (a comma or space separated list of flags, such as
`avx2,fma`) replaces the flags read from /proc/cpuinfo: to see what `auto` picks on another
CPU, or, with the kernel limits of `EMULATE`, to measure an AVX2-only CPU on an AVX-512 one.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import time
from importlib import metadata
from pathlib import Path

FEATURES_ENV = "BERTINDEX_CPU_FEATURES"
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni",
             "amx_tile", "amx_bf16", "amx_int8")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
# Environment that limits every kernel library torch uses to one ISA, plus the flags override.
EMULATE = {
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",          # torch's own vectorised kernels
        "ONEDNN_MAX_CPU_ISA": "AVX2",           # oneDNN (bf16 matmuls, some fp32 paths)
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",      # MKL sgemm
        "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",   # FBGEMM (int8 dynamic linear)
        FEATURES_ENV: "sse4_2,avx,avx2,fma,f16c",
    },
}
LIMIT_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
             "FBGEMM_ENABLE_INSTRUCTIONS")
LIBRARIES = ("torch", "transformers", "tokenizers", "faiss-cpu", "faiss-gpu", "onnxruntime",
             "numpy", "sentence-transformers", "duckdb")


def proc_cpu_flags() -> set[str]:
    """The flags /proc/cpuinfo lists for the first CPU (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    match = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def cpu_flags() -> tuple[set[str], str]:
    """(ISA flags, where they came from): `BERTINDEX_CPU_FEATURES` when set, else /proc/cpuinfo."""
    override = os.environ.get(FEATURES_ENV)
    if override is not None:
        return {f.strip().lower() for f in re.split(r"[,\s]+", override) if f.strip()}, \
            f"{FEATURES_ENV}={override}"
    return proc_cpu_flags(), "/proc/cpuinfo"


def has_bf16() -> bool:
    """Native bf16 matrix instructions (AVX512-BF16 or AMX-BF16)."""
    return any(f in cpu_flags()[0] for f in BF16_FLAGS)


def has_vnni() -> bool:
    """int8 dot-product instructions (AVX512-VNNI, AVX-VNNI or AMX-INT8)."""
    return any(f in cpu_flags()[0] for f in VNNI_FLAGS)


def isa_class() -> str:
    """A short name for the matrix instructions that matter here: `amx`, `avx512-bf16`,
    `avx512-vnni`, `avx512`, `avx2-vnni`, `avx2` or `baseline`."""
    flags = cpu_flags()[0]
    if "amx_bf16" in flags or "amx_int8" in flags:
        return "amx"
    if "avx512_bf16" in flags:
        return "avx512-bf16"
    if "avx512_vnni" in flags:
        return "avx512-vnni"
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags:
        return "avx2-vnni" if "avx_vnni" in flags else "avx2"
    return "baseline"


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    match = re.search(r"^model name\s*:\s*(.*)$", text, re.MULTILINE)
    return match.group(1).strip() if match else platform.machine()


def emulated() -> dict[str, str]:
    """The kernel limits and the flags override in force (empty: the CPU as it is)."""
    return {k: os.environ[k] for k in (*LIMIT_ENV, FEATURES_ENV) if k in os.environ}


def library_versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def thread_counts() -> dict:
    import torch

    return {"cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity") else None,
            "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
            **{k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ}}


def matmul_peak(dtype: str = "fp32", m: int = 4096, k: int = 384, n: int = 1536,
                seconds: float = 0.6) -> float:
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


def add_emulate_option(parser) -> None:
    parser.add_argument("--emulate", choices=sorted(EMULATE), default=None,
                        help="re-run this script with the kernels limited to this ISA and the "
                             "CPU flags overridden (figures are marked emulated)")


def reexec_emulated(target: str | None) -> None:
    """Re-execute this Python process with `EMULATE[target]` in its environment (once): the
    kernel libraries read their limits when they load, so it cannot be set afterwards."""
    if target is None:
        return
    env = EMULATE[target]
    if all(os.environ.get(k) == v for k, v in env.items()):
        return
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **env})
