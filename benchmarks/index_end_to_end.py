"""End to end, as whole processes: `bertindex index` (default config, Prefect flow included)
against a hand-written sentence-transformers + FAISS + DuckDB script, on the same SciFact
abstracts (max length 256, truncate), run one after the other in this process's machine.

Usage: python benchmarks/index_end_to_end.py [--docs 1500] [--repeat 1]
"""

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl.gz"
BIN = Path(sys.executable).parent


def run(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1500)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if not CORPUS.is_file():
        print(f"{CORPUS} not found: this benchmark reads ../shared/data/scifact", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bertindex-e2e-") as tmp:
        corpus = Path(tmp) / "scifact1500.jsonl"
        with gzip.open(CORPUS, "rt", encoding="utf-8") as src, corpus.open("w") as dst:
            for n, line in enumerate(src):
                if n >= args.docs:
                    break
                dst.write(line)
        ours, theirs = [], []
        for _ in range(args.repeat):
            store = Path(tmp) / "store"
            shutil.rmtree(store, ignore_errors=True)
            ours.append(run([str(BIN / "bertindex"), "index", str(corpus), "--store", str(store),
                             "--max-length", "256", "--long-documents", "truncate", "--json"]))
            out = Path(tmp) / "reference"
            shutil.rmtree(out, ignore_errors=True)
            theirs.append(run([sys.executable, str(ROOT / "benchmarks" / "reference_st_index.py"),
                               str(corpus), str(out), "--max-length", "256"]))
    best_ours, best_theirs = min(ours), min(theirs)
    print(f"documents {args.docs}")
    print(f"bertindex index (whole process):            {best_ours:7.1f} s")
    print(f"sentence-transformers + FAISS + DuckDB script: {best_theirs:7.1f} s")
    print(f"speed-up {best_theirs / best_ours:.2f}x")
    print(json.dumps({"docs": args.docs, "bertindex_s": round(best_ours, 2),
                      "reference_s": round(best_theirs, 2),
                      "speedup": round(best_theirs / best_ours, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
