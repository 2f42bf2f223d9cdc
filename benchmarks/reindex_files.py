"""`bertindex reindex` to another encoder, its new generation's vectors as rows of DuckDB (as
before the sixteenth session) against files of the live store's folder, in one run.

Both reindex a copy of the same store (one `benchmarks/scale.py` left: its config.yaml and
near-free encoder) with `model.max_length: 192` instead of the encoder's 256: another encoder
set-up, so every document is encoded again into a new generation and switched, into nearly
the same vectors (a handful of the longest documents take two windows), so that both build
the same base (`pooling: cls` would do too, but a 0-layer encoder's [CLS] vector is the same
for every text). Each runs in its own
process (`run_reindex`, what `bertindex reindex` runs); the rows mode has the vector-file
threshold out of reach: the generation inserts its vectors into `vectors`, and the new base
builds its rescoring codes (spilled, then written). Reported per mode: wall, peak RSS
(`wait4`), the reindex summary, the store's bytes on disk after the switch by part (the
previous version's base and vector files are still kept, for readers, until a later publish)
and those of the files the new store records. That the base over the files answers as one
with float32 codes of its own is tested (`tests/indexer/index/test_store_rows.py`).

    .venv/bin/python benchmarks/reindex_files.py --scale-dir /work/scale/n1000000 \\
        --work /work/reindex --out benchmarks/results/reindex_files_1M_intel_s21.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import machine, write_json  # noqa: E402

MODES = ("rows", "files")


def child(mode: str, config_path: Path) -> None:
    """One reindex; prints its summary as JSON."""
    import indexer.indexing.steps as steps
    from flows.reindex import run_reindex
    from indexer.config import load_config

    if mode == "rows":
        steps.VECTOR_FILE_MIN_ROWS = 1 << 40  # every batch's vectors inserted as rows
    config = load_config(config_path).with_overrides(**{"model.max_length": 192})
    summary = run_reindex(config, batch_size=2048)
    print(json.dumps(summary, default=str))


def disk_by_part(store: Path) -> dict[str, int]:
    """Bytes under the store by top part (`vectors`, `store.duckdb`, `index/bases`, ...)."""
    out: dict[str, int] = {}
    for path in store.rglob("*"):
        if path.is_file() and not path.is_symlink():
            rel = path.relative_to(store).parts
            key = "/".join(rel[:2]) if rel[0] == "index" and len(rel) > 2 else rel[0]
            if rel[:2] == ("index", "bases"):  # by version: the previous one is kept a while
                key += "/" + rel[2].split(".")[0]
            out[key] = out.get(key, 0) + path.stat().st_size
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def recorded_bytes(store: Path) -> int:
    """Bytes of the vector files the switched store records (the rest belong to the previous
    version, collected once no kept version reads them)."""
    from indexer.store import Store

    with Store(store, read_only=True, snapshot=False) as st:
        return sum((store / "vectors" / vf.name).stat().st_size for vf in st.vectors.files())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale-dir", type=Path, help="a size's folder benchmarks/scale.py left")
    parser.add_argument("--work", type=Path, help="the two copies go here")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.config)
        return
    source = args.scale_dir / "store"
    base_config = yaml.safe_load((args.scale_dir / "config.yaml").read_text())
    report: dict = {"command": " ".join(sys.argv), "machine": machine(), "modes": {}}
    for mode in MODES:
        store = args.work / mode / "store"
        shutil.rmtree(store.parent, ignore_errors=True)
        store.parent.mkdir(parents=True)
        started = time.perf_counter()
        shutil.copytree(source, store, symlinks=True)
        copied = round(time.perf_counter() - started, 1)
        config = dict(base_config, store={"path": str(store)})
        config_path = store.parent / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        command = [sys.executable, __file__, "--child", mode, "--config", str(config_path)]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        started = time.perf_counter()
        with open(store.parent / "reindex.log", "wb") as err:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, cwd=ROOT, env=env)
            stdout = proc.stdout.read().decode()
            _, status, usage = os.wait4(proc.pid, 0)
        wall = round(time.perf_counter() - started, 1)
        code = os.waitstatus_to_exitcode(status)
        record = {
            "copy_s": copied,
            "exit": code,
            "wall_s": wall,
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "summary": json.loads(stdout.strip().splitlines()[-1]) if code == 0 else stdout[-2000:],
            "disk_bytes": disk_by_part(store),
        }
        record["disk_total_gb"] = round(sum(record["disk_bytes"].values()) / 1e9, 3)
        record["vector_files_recorded_bytes"] = recorded_bytes(store)
        report["modes"][mode] = record
        print(mode, json.dumps(record)[:600], flush=True)
        write_json(args.out, report)
        if mode == "rows":
            shutil.rmtree(store.parent, ignore_errors=True)  # room for the next copy
    rows, files = (report["modes"][m] for m in MODES)
    if rows["exit"] == 0 and files["exit"] == 0:
        report["files_vs_rows"] = {
            "wall": round(files["wall_s"] / rows["wall_s"], 3),
            "disk": round(files["disk_total_gb"] / rows["disk_total_gb"], 3),
        }
    write_json(args.out, report)
    print(json.dumps(report.get("files_vs_rows")))


if __name__ == "__main__":
    main()
