"""Bringing a store that keeps its vectors as rows of store.duckdb (as every store did before
vector files) to the layout of new ones: `bertindex reindex` with the same encoder, which copies
it into a new generation with its vectors in files (mode `rewrite`), measured.

From a size's folder `benchmarks/scale.py` left (its corpus, config.yaml and near-free
encoder), in `--work`:
1. `index`: the corpus indexed with the vector-file threshold out of reach, so that every
   batch inserts its vectors as rows and the base builds its rescoring codes: an old store;
2. `rewrite`: `run_reindex` with the same configuration (what `bertindex reindex` runs);
3. `next run`: `run_index` of the same corpus (nothing to encode), which collects what no kept
   version reads.
Each runs in its own process: wall, peak RSS (`wait4`), its summary, and the store's bytes on
disk by part after it. Then 200 held-out queries are searched on the rewritten store and
compared with the same searches run before the rewrite (top-10 overlap).

    .venv/bin/python benchmarks/reindex_rewrite.py --scale-dir /work/scale/n1000000 \\
        --work /work/rewrite --out benchmarks/results/reindex_rewrite_1M_intel_s22.json
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
from reindex_files import disk_by_part  # noqa: E402

STEPS = ("index", "search-before", "rewrite", "next-run", "search-after")
QUERIES = 200


def child(step: str, config_path: Path, corpus: Path, out: Path) -> None:
    """One step in this process; prints its summary as JSON."""
    import indexer.indexing.steps as steps
    from flows.reindex import run_reindex
    from indexer.config import load_config
    from indexer.indexing.run import run_index

    config = load_config(config_path)
    if step == "index":
        steps.VECTOR_FILE_MIN_ROWS = 1 << 40  # every batch's vectors inserted as rows
        summary = run_index([str(corpus)], config)
    elif step == "rewrite":
        summary = run_reindex(config, batch_size=2048)
    elif step == "next-run":
        summary = run_index([str(corpus)], config)
    else:
        summary = {"hits": searches(config)}
        out.write_text(json.dumps(summary["hits"]))
        summary = {"queries": len(summary["hits"])}
    print(json.dumps(summary, default=str))


def searches(config) -> list[list[str]]:
    from indexer.query.searcher import Searcher
    from indexer.store import Store

    queries = Path(config.index.tune_queries).read_text().splitlines()[-QUERIES:]
    with Store(config.store.path, read_only=True) as store:
        searcher = Searcher(config, store)
        return [[h.id for h in searcher.search(q, 10, mode="dense")] for q in queries]


def files_recorded(store: Path) -> dict:
    from indexer.store import Store

    with Store(store, read_only=True, snapshot=False) as st:
        return {"files": len(st.vectors.files()), "rows": st.vectors.rows_kept()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale-dir", type=Path, help="a size's folder benchmarks/scale.py left")
    parser.add_argument("--work", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", choices=STEPS, help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--hits", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    corpus = args.scale_dir / "corpus.jsonl"
    if args.child:
        child(args.child, args.config, corpus, args.hits)
        return
    store = args.work / "store"
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    config = yaml.safe_load((args.scale_dir / "config.yaml").read_text())
    config["store"] = {"path": str(store)}
    config_path = args.work / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    report: dict = {"command": " ".join(sys.argv), "machine": machine(), "steps": {}}
    for step in STEPS:
        hits = args.work / f"{step}.json"
        command = [sys.executable, __file__, "--child", step, "--config", str(config_path)]
        command += ["--scale-dir", str(args.scale_dir), "--hits", str(hits)]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        started = time.perf_counter()
        with open(args.work / f"{step}.log", "wb") as err:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, cwd=ROOT, env=env)
            stdout = proc.stdout.read().decode()
            _, status, usage = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        record = {
            "exit": code,
            "wall_s": round(time.perf_counter() - started, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "summary": json.loads(stdout.strip().splitlines()[-1]) if code == 0 else stdout[-2000:],
        }
        if not step.startswith("search"):
            record["disk_bytes"] = disk_by_part(store)
            record["disk_total_gb"] = round(sum(record["disk_bytes"].values()) / 1e9, 3)
            record["vectors"] = files_recorded(store)
        report["steps"][step] = record
        print(step, json.dumps(record)[:500], flush=True)
        write_json(args.out, report)
        if code != 0:
            return
    before = json.loads((args.work / "search-before.json").read_text())
    after = json.loads((args.work / "search-after.json").read_text())
    overlap = [len(set(a) & set(b)) / max(1, len(a)) for a, b in zip(before, after)]
    report["top10_overlap_mean"] = round(sum(overlap) / len(overlap), 4)
    report["top10_identical"] = sum(a == b for a, b in zip(before, after))
    report["disk_after_vs_before"] = round(
        report["steps"]["next-run"]["disk_total_gb"] / report["steps"]["index"]["disk_total_gb"], 3
    )
    write_json(args.out, report)
    print(json.dumps({k: report[k] for k in ("top10_overlap_mean", "disk_after_vs_before")}))


if __name__ == "__main__":
    main()
