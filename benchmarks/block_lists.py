"""A fast-scan base with its lists read into the process (FAISS's `BlockInvertedLists`) against
one with its lists in a file beside it and mapped (`indexer.index.block_lists`), each in a
fresh process: load time, the process's private memory after loading and after the searches,
and ms a search (one thread, the first pass at `--nprobe` with `--k-factor` candidates a result
rescored by FAISS's `IndexRefine`), with the top-10 overlap of the two. The two bases may come
from two builds of the same vectors (`bertindex reindex`); `--lists-bytes` is the mapped one's
lists file size when it is not beside it under the usual name.

    .venv/bin/python benchmarks/block_lists.py --read DIR/index/bases/v3.faiss \\
        --mapped DIR/index/bases/v4.faiss --queries-file DIR/tune_queries.txt \\
        --config DIR/config.yaml --out benchmarks/results/block_lists_10m_intel.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from machine import machine, write_json

CHILD = r"""
import json, resource, sys, time
import faiss, numpy as np
from pathlib import Path
from indexer.index.block_lists import lists_path, populate
from indexer.index.version_files import read_faiss
faiss.omp_set_num_threads(1)
path, mapped, queries = sys.argv[1], sys.argv[2] != "0", sys.argv[5]
nprobe, k_factor = int(sys.argv[3]), int(sys.argv[4])
def private_mb():
    out = 0
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("Anonymous:"):
            out += int(line.split()[1])
    return out / 1024
def rss_mb():
    return int([l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1]) / 1024
before = private_mb()
t = time.perf_counter()
lists = lists_path(Path(path)).stat().st_size if mapped else None
index = read_faiss(Path(path), None, True, "", Path(path).parent, lists)
load_s = time.perf_counter() - t
t = time.perf_counter()
populated = sys.argv[2] == "2" and populate(index)
populate_s = time.perf_counter() - t
loaded = private_mb() - before
ivf = faiss.extract_index_ivf(index)
ivf.nprobe = nprobe
q = np.load(queries)
first = faiss.SearchParametersIVF(nprobe=nprobe)
params = faiss.IndexRefineSearchParameters(k_factor=k_factor, base_index_params=first)
for v in q[:50]:
    index.search(v[None, :], 10, params=params)
t = time.perf_counter()
found = []
for v in q[50:]:
    found.append(index.search(v[None, :], 10, params=params)[1][0])
ms = (time.perf_counter() - t) * 1000 / len(q[50:])
print(json.dumps({"load_s": round(load_s, 3), "populated": populated,
                  "populate_s": round(populate_s, 3), "private_mb_after_load": round(loaded, 1),
                  "private_mb_after_searches": round(private_mb() - before, 1),
                  "rss_mb": round(rss_mb(), 1), "ms_per_search": round(ms, 3),
                  "lists": type(faiss.downcast_InvertedLists(ivf.invlists)).__name__,
                  "found": np.array(found).tolist()}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read", type=Path, required=True, help="a base with in-file lists")
    parser.add_argument("--mapped", type=Path, required=True, help="a base with a .lists file")
    parser.add_argument("--queries-file", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True, help="the store's (its encoder)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--nprobe", type=int, default=210)
    parser.add_argument("--k-factor", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)  # alternating, fresh processes
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import numpy as np

    from indexer.config import load_config
    from indexer.query.searcher import Searcher

    texts = [t.strip() for t in args.queries_file.read_text().splitlines() if t.strip()]
    with Searcher.open(load_config(args.config)) as searcher:
        vectors = np.asarray(searcher.encode_queries(texts[: args.queries + 50]), np.float32)
    queries = args.out.with_suffix(".queries.npy") if args.out else Path("/tmp/bl_queries.npy")
    np.save(queries, vectors)
    runs: dict[str, list[dict]] = {"read": [], "mapped": [], "mapped_populated": []}
    variants = [("read", args.read, 0), ("mapped", args.mapped, 1)]
    variants.append(("mapped_populated", args.mapped, 2))  # what a `serve` worker does
    for _ in range(args.rounds):
        for name, path, how in variants:
            command = [sys.executable, "-c", CHILD, str(path), str(how)]
            command += [str(args.nprobe), str(args.k_factor), str(queries)]
            out = subprocess.run(command, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    queries.unlink()
    a, b = (np.array(runs[n][-1].pop("found")) for n in ("read", "mapped"))
    for r in runs["read"] + runs["mapped"] + runs["mapped_populated"]:
        r.pop("found", None)
    overlap = float(np.mean([len(set(x) & set(y)) / 10 for x, y in zip(a, b)]))
    result = {
        "machine": machine(),
        "read": str(args.read),
        "mapped": str(args.mapped),
        "nprobe": args.nprobe,
        "k_factor": args.k_factor,
        "queries": args.queries,
        "runs": runs,
        "top10_overlap": round(overlap, 4),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))
    write_json(args.out, result)


if __name__ == "__main__":
    main()
