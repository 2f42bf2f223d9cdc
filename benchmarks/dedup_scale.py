"""Near-duplicate grouping at scale: `--n` stored 384-dim vectors grouped by `bertindex dedup`'s
own code (`run_dedup`, full run, then an incremental run after adding `--add` documents), in a
child process whose wall time and peak resident memory (`VmHWM`) are reported.

Vectors: real all-MiniLM-L6-v2 embeddings of TweetEval tweets (the `dedup_quality.py` cache,
else a seeded sample encoded here) as centres, each generated vector a centre plus Gaussian
noise (cosine ~0.7 to its centre, so unrelated documents are not copies of each other), and
1 % of the documents planted as near-copies (cosine ~0.98) in waves of 2-20; texts share their
wave's words, so the word check passes for copies. Like `index_scale.py`, realistic geometry
without encoding a million texts.

    python benchmarks/dedup_scale.py --n 1000000 --add 1000 --out
    benchmarks/results/dedup_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
WORDS = [f"w{i}" for i in range(5000)]
BATCH = 50_000
SPEC = "IVF1024,SQ8"  # the store's search index (what incremental runs search): 1 byte a dim


def centres(cache: Path, limit: int = 20_000) -> tuple[np.ndarray, object]:
    from indexer.config import Config
    from indexer.encode.encoder import load_encoder

    found = sorted(cache.glob("tweets-*.npy"))
    cfg = Config().with_overrides(**{"model.max_length": 128, "long_documents.stride": 16})
    encoder = load_encoder(cfg.model)
    if found:
        return np.concatenate([np.load(p) for p in found])[:limit], encoder.provenance
    from dedup_quality import load_tweets

    _, texts = load_tweets(limit)
    return encoder.encode_texts(texts).astype(np.float32), encoder.provenance


def write_docs(
    store,
    rng: np.random.Generator,
    prng: random.Random,
    start: int,
    n: int,
    centre: np.ndarray,
    collection: str = "gen",
) -> None:
    """n generated documents (ids g{start}...), 1 % of them copies of earlier ones."""
    from indexer.ingest.readers import Record
    from indexer.store import ChunkRows, content_hash

    dim = centre.shape[1]
    for s in range(start, start + n, BATCH):
        k = min(BATCH, start + n - s)
        picks = rng.integers(0, len(centre), k)
        v = centre[picks] + rng.normal(0, 0.05, (k, dim)).astype(np.float32)
        texts = [" ".join(prng.choices(WORDS, k=10)) for _ in range(k)]
        copies = np.nonzero(rng.random(k) < 0.01)[0]
        for j in copies[copies > 20]:  # a copy of a document a little earlier in the batch
            src = int(j - rng.integers(1, 20))
            v[j] = v[src] + rng.normal(0, 0.004, dim).astype(np.float32)
            texts[j] = texts[src] + " " + prng.choice(WORDS)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        doc_ids = store.documents.next_ids("doc_ids", k)
        recs = [Record(f"g{s + j}", texts[j], None, {}, "gen", s + j + 1) for j in range(k)]
        rows = [(d, r, content_hash(r)) for d, r in zip(doc_ids, recs)]
        store.documents.write_batch(
            collection,
            rows,
            [],
            [],
            ChunkRows(doc_ids, [0] * k, [0] * k, [1] * k, [1] * k, v),
            [],
            "gen",
        )


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: reset by exec, unlike `ru_maxrss`, which a
    child inherits from the parent it was forked from)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def child(store_dir: Path, step: str, add: int, cache: Path) -> None:
    """One measured step in this process; prints one JSON line."""
    from indexer.config import Config
    from indexer.dedup.groups import run_dedup
    from indexer.store import Store

    cfg = Config().with_overrides(**{"store.path": str(store_dir), "index.spec": SPEC})
    rss_before = peak_rss_mb()
    t = time.perf_counter()
    if step == "add":
        from indexer.indexing.steps import sync_vector_index

        centre, _ = centres(cache)
        with Store(store_dir) as store:
            base = store.data_version()
            n = store.counts.documents()
            write_docs(store, np.random.default_rng(n), random.Random(n), n, add, centre)
            sync_vector_index(store, cfg, [], [], base)  # the index flow's publish
        out = {"step": "add", "seconds": round(time.perf_counter() - t, 1)}
    else:
        summary = run_dedup(cfg, "gen", rebuild=step == "full", publish=False)
        out = {"step": step, "seconds": round(time.perf_counter() - t, 1), "summary": summary}
    out["peak_rss_mb"] = peak_rss_mb()
    out["rss_after_imports_mb"] = rss_before  # python, faiss, duckdb, pyarrow, scipy
    print(json.dumps(out, default=str), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--add", type=int, default=1000)
    ap.add_argument("--work", type=Path, help="keep the store here (reused when present)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "bertindex-dedup")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", nargs=2, metavar=("STORE", "STEP"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1], args.add, args.cache)
        return
    from machine import machine

    work = args.work or Path(tempfile.mkdtemp(prefix="bertindex-dedupscale-"))
    store_dir = work / f"store-{args.n}"
    report = {"n": args.n, "add": args.add, "load_average_start": list(os.getloadavg())}
    if not (store_dir / "store.duckdb").is_file():
        from indexer.config import Config
        from indexer.indexing.steps import sync_vector_index
        from indexer.store import Store

        t = time.perf_counter()
        centre, provenance = centres(args.cache)
        with Store(store_dir) as store:
            store.vectors.set_provenance(provenance)
            write_docs(store, np.random.default_rng(0), random.Random(0), 0, args.n, centre)
            cfg = Config().with_overrides(**{"store.path": str(store_dir), "index.spec": SPEC})
            report["index"] = sync_vector_index(store, cfg, [], [], None)
        report["generate_s"] = round(time.perf_counter() - t, 1)
    steps = []
    for step in ("full", "add", "incremental"):
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                str(store_dir),
                step,
                "--add",
                str(args.add),
                "--cache",
                str(args.cache),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise SystemExit(done.stderr[-3000:])
        steps.append(json.loads(done.stdout.strip().splitlines()[-1]))
    report["steps"] = steps
    full, inc = steps[0], steps[2]
    report["incremental_vs_full_searched"] = (
        inc["summary"]["searched"],
        full["summary"]["searched"],
    )
    report["incremental_vs_full_seconds"] = (inc["seconds"], full["seconds"])
    report["store_mb"] = round(
        sum(p.stat().st_size for p in store_dir.rglob("*") if p.is_file()) / 2**20
    )
    report |= machine()
    print(json.dumps(report, indent=1, default=str))
    write_json(args.out, report, default=str)


if __name__ == "__main__":
    main()
