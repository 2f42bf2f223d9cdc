"""What machine a figure was measured on: CPU model, ISA flags, libraries, threads; and
`set_threads`, the one place that sizes torch's thread pool for a run; `idle_cores`, the cores
no runnable thread holds now (how many threads one served query's scan may use). The
measured matmul peak that bounds encoding speed on it is `indexer.encode.limits`.

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
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

FEATURES_ENV = "BERTINDEX_CPU_FEATURES"
ISA_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
# Environment that limits every kernel library torch uses to one ISA, plus the flags override.
EMULATE = {
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",  # torch's own vectorised kernels
        "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN (bf16 matmuls, some fp32 paths)
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",  # MKL sgemm
        "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",  # FBGEMM (int8 dynamic linear)
        FEATURES_ENV: "sse4_2,avx,avx2,fma,f16c",
    }
}
LIMIT_ENV = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "FBGEMM_ENABLE_INSTRUCTIONS",
)
LIBRARIES = (
    "torch",
    "transformers",
    "tokenizers",
    "faiss-cpu",
    "faiss-gpu",
    "onnxruntime",
    "numpy",
    "sentence-transformers",
    "duckdb",
)


def proc_cpuinfo() -> dict[str, str]:
    """The first CPU's `key: value` lines of /proc/cpuinfo (empty where there is none): the
    one place that reads the file."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first CPU ends at the first blank line
        key, sep, value = line.partition(":")
        if sep:
            info.setdefault(key.strip(), value.strip())
    return info


def proc_cpu_flags() -> set[str]:
    """The flags /proc/cpuinfo lists for the first CPU (empty where there is none)."""
    return set(proc_cpuinfo().get("flags", "").split())


def cpu_flags() -> tuple[set[str], str]:
    """(ISA flags, where they came from): `BERTINDEX_CPU_FEATURES` when set, else /proc/cpuinfo."""
    override = os.environ.get(FEATURES_ENV)
    if override is not None:
        return {
            f.strip().lower() for f in re.split(r"[,\s]+", override) if f.strip()
        }, f"{FEATURES_ENV}={override}"
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
    """The CPU's model name (`platform`'s guess where /proc/cpuinfo has none)."""
    return proc_cpuinfo().get("model name") or platform.processor() or platform.machine()


def emulated() -> dict[str, str]:
    """The kernel limits and the flags override in force (empty: the CPU as it is)."""
    return {k: os.environ[k] for k in (*LIMIT_ENV, FEATURES_ENV) if k in os.environ}


def library_versions(names: Iterable[str] = LIBRARIES) -> dict[str, str]:
    """The Python version and each installed package's version, the one place that asks
    (a machine's figures and a head's run receipt record them).

    Args:
        names: distribution names; those not installed are left out.
    """
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def thread_counts() -> dict:
    import torch

    return {
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        **{k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ},
    }


def set_threads(threads: int | None = None) -> int:
    """Size torch's intra-op pool: `threads`, else OMP_NUM_THREADS, else every CPU this
    process may run on (on a shared machine, OMP_NUM_THREADS=1 avoids spin-wait stalls).

    Returns:
        The threads torch now uses.
    """
    import torch

    if threads is None and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        threads = int(os.environ["OMP_NUM_THREADS"])
    if threads is None:
        threads = usable_cores()
    torch.set_num_threads(max(1, threads))
    return torch.get_num_threads()


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def idle_cores(loadavg: str | None = None) -> int:
    """The cores this process may run on that no other runnable thread holds at this moment,
    this thread's own included (at least 1): from the kernel's count of runnable threads, the
    fourth field of /proc/loadavg ("running/total", the caller counted in it), read in ~10 µs.

    A snapshot, not a reservation: two queries that start together may both see a core
    free; the cost is a core shared for one scan. Where /proc is not mounted, 1.

    Args:
        loadavg: /proc/loadavg's text (tests); None: read it.
    """
    if loadavg is None:
        try:
            with open("/proc/loadavg") as fh:
                loadavg = fh.read()
        except OSError:
            return 1
    try:
        running = int(loadavg.split()[3].split("/")[0])
    except (IndexError, ValueError):
        return 1
    return max(1, usable_cores() - max(running - 1, 0))


def add_emulate_option(parser) -> None:
    parser.add_argument(
        "--emulate",
        choices=sorted(EMULATE),
        default=None,
        help="re-run this script with the kernels limited to this ISA and the "
        "CPU flags overridden (figures are marked emulated)",
    )


def reexec_emulated(target: str | None) -> None:
    """Re-execute this Python process with `EMULATE[target]` in its environment (once): the
    kernel libraries read their limits when they load, so it cannot be set afterwards."""
    if target is None:
        return
    env = EMULATE[target]
    if all(os.environ.get(k) == v for k, v in env.items()):
        return
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **env})
