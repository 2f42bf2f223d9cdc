"""Where a benchmark ran: CPU model and AVX-512 flags, cores, load average, date and commit,
written beside every figure so that it can be read against the machine it came from; and the
options and queries the benchmarks on a scale store share (`store_options`, `held_out`)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from indexer.core.machine import proc_cpu_flags, proc_cpuinfo

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict:
    """{"cpu", "avx512", "cores", "load_average", "date", "commit"} of this run."""
    cpu = proc_cpuinfo().get("model name", "unknown")
    flags = sorted(f for f in proc_cpu_flags() if "avx512" in f)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "cpu": cpu,
        "avx512": flags,
        "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
    }


def cpu_name() -> str:
    """One line for a result's `cpu` field: model, cores, and whether AVX-512 / its bf16 are
    there (the two paths `model.dtype: auto` chooses between)."""
    info = machine()
    flags = [f for f in ("avx512f", "avx512_bf16") if f in info["avx512"]]
    return ", ".join([info["cpu"], f"{info['cores']} cores", *flags])


def write_json(path: Path | None, data: dict, indent: int = 1, **dumps) -> None:
    """Write a benchmark's result to `path` (its `--out`; None: nowhere), making its folder."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent, **dumps) + "\n")


def missing(path: Path, data_set: str) -> bool:
    """Whether a shared data file is absent; if so, says which data set the benchmark reads."""
    if path.exists():
        return False
    print(f"{path} not found: this benchmark reads ../shared/data/{data_set}", file=sys.stderr)
    return True


def store_options(parser: argparse.ArgumentParser, skip: int, count: int) -> None:
    """--store, --config, --queries (one a line), --skip (the lines tuning used) and --count:
    a scale store (`benchmarks/scale.py --work`) and held-out queries for it."""
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--queries", type=Path, required=True, help="one query a line")
    parser.add_argument("--skip", type=int, default=skip, help="queries skipped (tuning used)")
    parser.add_argument("--count", type=int, default=count)


def held_out(args: argparse.Namespace, count: int | None = None) -> list[str]:
    """The `--count` (or `count`) queries after the first `--skip` lines of `--queries`."""
    lines = [q.strip() for q in args.queries.read_text().splitlines() if q.strip()]
    return lines[args.skip : args.skip + (args.count if count is None else count)]


def hybrid_run(description: str, skip: int, count: int, encode: bool = False):
    """(args, config, held-out queries, the hybrid depth) for a benchmark of hybrid queries
    on a scale store: `store_options`, --k (documents asked for), --out (JSON), and with
    `encode` an --encode switch (the timed searches encode their queries)."""
    from search.cli.common import build_config

    parser = argparse.ArgumentParser(description=description)
    store_options(parser, skip=skip, count=count)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--out", type=Path)
    if encode:
        parser.add_argument("--encode", action="store_true", help="time the queries' encoding")
    args = parser.parse_args()
    config = build_config(str(args.config), str(args.store), None, None)
    return args, config, held_out(args), max(args.k, config.search.candidates)


def summary(**fields) -> dict:
    """A result record: the command line and the machine (`machine()`), then `fields`."""
    return {"command": " ".join(sys.argv), "machine": machine(), **fields}
