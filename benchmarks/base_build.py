"""Building a base with a rescoring stage over the store's vector files, against the build
that computed the stage's codes, spilled them to disk and dropped them on writing, in one run.

`--n` vectors (`--dim` wide, L2-normalised, drawn around 1,000 random centres: a stand-in for
embeddings, no model needed) are written as a store's vector files (`indexer.store.vector_files`,
2,048 rows each, as an index run commits them). The `auto` spec for that size is built twice
from the same batches, each in its own process (peak RSS apart):
- `codes`: the path before (`spill.fill`: the stage's codes in an unnamed file of the store's
  folder, tuned with them, then written without them: `store_rows.without_stage`);
- `files`: `store_rows.fill_first_pass` (the first pass only, tuned by rescoring from the
  files).
Each reports its build seconds (train, fill, tune), peak temporary disk (free space sampled
every 50 ms while it builds), peak RSS, the written base's bytes and its tuning; the parent
adds recall@10 of each loaded base against exact search on 1,000 held-out draws.

    .venv/bin/python benchmarks/base_build.py --n 1000000 --work /tmp/base-build \
        --out benchmarks/results/base_build_1M.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from machine import machine, write_json  # noqa: E402

FILE_ROWS = 2048
CENTRES = 1000


def draw(n: int, dim: int, seed: int, start: int = 0) -> np.ndarray:
    """Rows start..start+n of the stand-in embeddings (the same rows whatever the cut)."""
    centres = np.random.default_rng(12345).standard_normal((CENTRES, dim)).astype(np.float32)
    rows = []
    for first in range(start, start + n, FILE_ROWS):
        rng = np.random.default_rng([seed, first])
        count = min(FILE_ROWS, start + n - first)
        at = rng.integers(0, CENTRES, count)
        noise = rng.standard_normal((count, dim)).astype(np.float32)
        rows.append(centres[at] + 0.9 * noise)
    x = np.concatenate(rows)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def write_store(store: Path, n: int, dim: int) -> None:
    from indexer.store import vector_files

    for first in range(0, n, FILE_ROWS):
        vector_files.write(store, first, draw(min(FILE_ROWS, n - first), dim, 0, first))


def files_of(store: Path):
    from indexer.store.vector_files import VectorFile

    out = []
    for path in sorted((store / "vectors").glob("c*.npy")):
        first = int(path.name[1:].split("-")[0])
        rows = int(np.load(path, mmap_mode="r").shape[0])
        out.append(VectorFile(path.name, first, rows))
    return sorted(out, key=lambda vf: vf.first)


def batches_of(store: Path, files):
    def batches():
        for vf in files:
            rows = np.load(store / "vectors" / vf.name, mmap_mode="r")
            yield np.arange(vf.first, vf.first + vf.rows, dtype=np.int64), np.asarray(rows)

    return batches


class DiskPeak:
    """The most disk used under `path` beyond what was used at the start (50 ms samples)."""

    def __init__(self, path: Path):
        self.path, self.peak, self.done = path, 0, False
        self.start = self._used()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _used(self) -> int:
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def _run(self) -> None:
        while not self.done:
            self.peak = max(self.peak, self._used() - self.start)
            time.sleep(0.05)

    def stop(self) -> int:
        self.done = True
        self.thread.join()
        return self.peak


def child(mode: str, store: Path, out: Path, flat_limit: int | None) -> None:
    from indexer.config import IndexConfig
    from indexer.index.auto import choose_spec
    from indexer.index.vector import VectorIndex
    from indexer.index.version_files import bases_dir
    from indexer.records.provenance import Provenance

    files = files_of(store)
    n = sum(vf.rows for vf in files)
    dim = int(np.load(store / "vectors" / files[0].name, mmap_mode="r").shape[1])
    config = IndexConfig() if flat_limit is None else IndexConfig(flat_limit=flat_limit)
    spec = choose_spec(n, dim, config)
    provenance = Provenance(
        model_name="stand-in", weights_hash="-", pooling="mean", normalize=True,
        max_length=128, dim=dim, dtype="fp32",
    )  # fmt: skip
    spill = bases_dir(store)
    spill.mkdir(parents=True, exist_ok=True)
    disk = DiskPeak(store)
    started = time.perf_counter()
    index = VectorIndex.build_from_batches(
        spec, provenance, config, batches_of(store, files), n, spill=spill,
        files=(store, files) if mode == "files" else None,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    peak_disk = disk.stop()  # the build's temporary files (the base written after is counted apart)
    index.row_files = files  # as `steps._rebuild` offers them: `codes` drops its stage here
    version = index.save(store)
    info = json.loads((store / "index" / version / "provenance.json").read_text())
    write_json(
        out,
        {
            "mode": mode,
            "spec": spec,
            "vectors": n,
            "build_s": round(seconds, 1),
            "peak_temporary_disk_mb": round(peak_disk / 2**20, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "base_bytes": info["base"]["bytes"],
            "rescores_from_files": bool(info["base"].get("rows")),
            "tuning": {k: v for k, v in (index.tuning or {}).items() if k != "curve"},
        },
    )


def recall(store: Path, queries: np.ndarray, truth: np.ndarray) -> float:
    from indexer.config import IndexConfig
    from indexer.index.vector import VectorIndex

    index = VectorIndex.load(store, IndexConfig())
    assert index is not None
    found = index.search(queries, 10)[1]
    return float(np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)]))


def exact(store: Path, queries: np.ndarray) -> np.ndarray:
    import faiss

    files = files_of(store)
    best_s = np.full((len(queries), 10), -np.inf, np.float32)
    best_i = np.full((len(queries), 10), -1, np.int64)
    for ids, vectors in batches_of(store, files)():
        s, i = faiss.knn(queries, np.ascontiguousarray(vectors), 10, faiss.METRIC_INNER_PRODUCT)
        s_all = np.concatenate([best_s, s], axis=1)
        i_all = np.concatenate([best_i, ids[i]], axis=1)
        top = np.argsort(-s_all, axis=1)[:, :10]
        best_s = np.take_along_axis(s_all, top, 1)
        best_i = np.take_along_axis(i_all, top, 1)
    return best_i


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bertindex-base-build"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--flat-limit", type=int, help="index.flat_limit (default: the project's)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), Path(args.child[2]), args.flat_limit)
        return
    report: dict = {"machine": machine(), "n": args.n, "dim": args.dim, "modes": {}}
    report["flat_limit"] = args.flat_limit
    source = args.work / "source"
    shutil.rmtree(args.work, ignore_errors=True)
    source.mkdir(parents=True)
    write_store(source, args.n, args.dim)
    queries = draw(1000, args.dim, seed=1)
    truth = exact(source, queries)
    for mode in ("codes", "files"):
        store = args.work / mode
        shutil.copytree(source, store)  # the same files; each mode's versions apart
        out = args.work / f"{mode}.json"
        cmd = [sys.executable, __file__, "--child", mode, str(store), str(out)]
        cmd += [] if args.flat_limit is None else ["--flat-limit", str(args.flat_limit)]
        subprocess.run(cmd, check=True)
        result = json.loads(out.read_text())
        result["recall@10"] = round(recall(store, queries, truth), 4)
        report["modes"][mode] = result
        print(json.dumps(result), flush=True)
        shutil.rmtree(store)
    codes, files = report["modes"]["codes"], report["modes"]["files"]
    report["files_against_codes"] = {
        "build_time": round(files["build_s"] / codes["build_s"], 3),
        "peak_temporary_disk_mb": [
            codes["peak_temporary_disk_mb"],
            files["peak_temporary_disk_mb"],
        ],
        "same_tuned_value": codes["tuning"].get("value") == files["tuning"].get("value"),
    }
    print(json.dumps(report["files_against_codes"]))
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    main()
