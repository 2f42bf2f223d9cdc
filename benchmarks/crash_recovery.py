"""Crash recovery on real data: `bertindex index` on SciFact with the packaged model, SIGKILLed
at seeded random moments and re-run each time, against one clean run. Reports whether the final
store and index equal the clean ones (documents, chunks, vectors, FAISS ids) and whether the
search results are the same, plus the clean, recovery and unchanged re-run times.

Kill i comes at a seeded random moment within the i-th slice of a clean run's duration
(measured by the clean run, or given with --clean-seconds to reuse `--work`'s clean store), so
every kill lands in real work: reading, encoding, a batch commit or the index save.

Usage: python benchmarks/crash_recovery.py [--kills 4] [--batch-size 256] [--seed 0]
       [--corpus ../shared/data/scifact] [--work DIR] [--clean-seconds S]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent / "bertindex"


def index_cmd(corpus: Path, store: Path, batch_size: int) -> list[str]:
    return [
        str(BIN),
        "index",
        str(corpus),
        "--store",
        str(store),
        "--batch-size",
        str(batch_size),
        "--collection",
        "scifact",
        "--json",
    ]


def timed_run(cmd: list[str]) -> tuple[float, dict]:
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    return time.perf_counter() - start, json.loads(out.stdout)


def children_of(pid: int) -> list[int]:
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except Exception:  # noqa: BLE001  (psutil missing or the process gone)
        return []


def alive(pids: list[int]) -> list[int]:
    import psutil

    return [
        p
        for p in pids
        if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]


def search(store: Path, queries: list[str]) -> list[list[tuple[str, float]]] | None:
    from indexer.config import Config
    from indexer.query.searcher import Searcher
    from indexer.store import Store

    cfg = Config().with_overrides(**{"store.path": str(store)})
    with Store(store, read_only=True) as st:
        searcher = Searcher(cfg, st)
        vectors = searcher.encode_queries(queries)
        hits = searcher.search_vectors(vectors, k=10)
    return [[(h.id, h.score) for h in q] for q in hits]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared/data/scifact")
    parser.add_argument("--kills", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path)
    parser.add_argument(
        "--clean-seconds",
        type=float,
        help="reuse WORK/clean (indexed before) and its measured duration",
    )
    args = parser.parse_args()
    from indexer.config import Config
    from indexer.ops.consistency import check_store

    work = args.work or Path(tempfile.mkdtemp(prefix="bertindex-crash-"))
    clean, crashed = work / "clean", work / "crashed"
    queries = [
        json.loads(line)["text"]
        for line in (args.corpus / "queries.jsonl").read_text().splitlines()[:50]
    ]

    if args.clean_seconds:
        clean_s = args.clean_seconds
        timed_run(index_cmd(args.corpus, clean, args.batch_size))  # migrates an older schema
    else:
        clean_s, clean_summary = timed_run(index_cmd(args.corpus, clean, args.batch_size))
        print(f"clean run: {clean_s:.1f} s, {clean_summary['encoded']} encoded", file=sys.stderr)
    shutil.rmtree(crashed, ignore_errors=True)
    rng = random.Random(args.seed)
    kills = []
    slice_s = clean_s / args.kills
    for i in range(args.kills):
        delay = rng.uniform(0.3, 1.0) * slice_s + 10.0  # + start-up (imports, model, API)
        proc = subprocess.Popen(
            index_cmd(args.corpus, crashed, args.batch_size),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )
        time.sleep(delay)
        kids = children_of(proc.pid)
        proc.send_signal(signal.SIGKILL)
        code = proc.wait()
        time.sleep(2)
        searchable = None
        try:
            searchable = search(crashed, queries[:3]) is not None
        except Exception as exc:  # noqa: BLE001  no version published yet is the only acceptable reason
            searchable = f"{type(exc).__name__}: {exc}"
        kills.append(
            {
                "after_s": round(delay, 1),
                "exit": code,
                "orphans": alive(kids),
                "search_after_kill": searchable,
            }
        )
        print(f"kill {i + 1}: {kills[-1]}", file=sys.stderr)
    recover_s, recover_summary = timed_run(index_cmd(args.corpus, crashed, args.batch_size))
    rerun_s, rerun_summary = timed_run(index_cmd(args.corpus, crashed, args.batch_size))

    a = check_store(Config().with_overrides(**{"store.path": str(clean)}))
    b = check_store(Config().with_overrides(**{"store.path": str(crashed)}))
    from indexer.ops.tolerance import same_ranking

    tol = a.tolerance  # the rules of indexer/ops/tolerance.py: near-ties may swap
    same_results = all(
        not same_ranking(g, r, tol)
        for g, r in zip(search(crashed, queries), search(clean, queries))
    )
    report = {
        "corpus": str(args.corpus),
        "documents": len(a.documents),
        "chunks": len(a.chunks),
        "batch_size": args.batch_size,
        "clean_s": round(clean_s, 1),
        "kills": kills,
        "recovery_run": {
            "s": round(recover_s, 1),
            "encoded": recover_summary["encoded"],
            "rebuilt": recover_summary["index"]["rebuilt"],
        },
        "unchanged_rerun": {"s": round(rerun_s, 1), "encoded": rerun_summary["encoded"]},
        "problems_clean": a.problems,
        "problems_crashed": b.problems,
        "differences": b.differences(a),
        "same_search_results": same_results,
        "equal": not a.problems and not b.problems and not b.differences(a) and same_results,
    }
    print(json.dumps(report, indent=2))
    return 0 if report["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
