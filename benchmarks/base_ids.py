"""What reading a base costs each process with its ids in an IDMap2 (FAISS rebuilds the
reverse hash map on every read) against the plain IDMap that bases are now written as
(`indexer.index.version_files.plain_id_map`): seconds, peak RSS and private (anonymous)
memory of a mapped read
(`IO_FLAG_MMAP_IFC`, as `VectorIndex.load` does), each in a fresh process, median of 5. Peak
RSS counts the mapped file's pages the read touched (shared page cache); the private memory
is what each serving process adds.

    .venv/bin/python benchmarks/base_ids.py --base STORE/index/bases/v1.faiss \\
        --out benchmarks/results/base_ids_1m.json

`--base`: an IDMap2 base, e.g. the one `benchmarks/index_delta.py --n 1000000 --dir DIR`
leaves under DIR when run at a commit before plain IDMaps (c1d270b).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import machine, write_json  # noqa: E402

READ = """
import json, resource, sys, time
import faiss
started = time.perf_counter()
index = faiss.read_index(sys.argv[1], faiss.IO_FLAG_MMAP_IFC)
seconds = time.perf_counter() - started
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
rollup = open("/proc/self/smaps_rollup").read().split()
anon = int(rollup[rollup.index("Anonymous:") + 1]) / 1024  # private memory, not file pages
print(json.dumps({"seconds": seconds, "peak_rss_mb": rss, "anonymous_mb": anon,
                  "type": type(index).__name__}))
"""


def read_cost(path: Path, runs: int) -> dict:
    rows = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", READ, str(path)], capture_output=True)
        rows.append(json.loads(done.stdout))
    return {
        "type": rows[0]["type"],
        "seconds_median": round(statistics.median(r["seconds"] for r in rows), 3),
        "peak_rss_mb_median": round(statistics.median(r["peak_rss_mb"] for r in rows), 1),
        "anonymous_mb_median": round(statistics.median(r["anonymous_mb"] for r in rows), 1),
        "bytes": path.stat().st_size,
    }


def main() -> None:
    import faiss

    from indexer.index.version_files import plain_id_map

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="an IDMap2 base file")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    index = faiss.read_index(str(args.base), faiss.IO_FLAG_MMAP_IFC)
    if not isinstance(index, faiss.IndexIDMap2):
        sys.exit(f"{args.base} is not an IDMap2 base ({type(index).__name__})")
    with tempfile.TemporaryDirectory(dir=args.base.parent) as tmp:
        plain = Path(tmp) / "plain.faiss"
        faiss.write_index(plain_id_map(index), str(plain))
        del index
        report = {
            "machine": machine(),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "ntotal": faiss.read_index(str(plain), faiss.IO_FLAG_MMAP_IFC).ntotal,
            "idmap2": read_cost(args.base, args.runs),
            "plain_idmap": read_cost(plain, args.runs),
        }
    print(json.dumps(report["idmap2"]), json.dumps(report["plain_idmap"]), sep="\n")
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    main()
