"""What a publish costs with Parquet segments against the full copy of `store.duckdb` it
replaced, and what a reader pays for each: a store of N tweet-length documents (random 384-dim
vectors, written through the store API, no model), published once, then 1% of its documents
changed (new text, new chunks and vectors, as a re-index of changed documents writes them) and
published again.

Reported: bytes and seconds of that second publish (the segment files it wrote, merges included)
against the old cost, an fsynced copy of `store.duckdb` measured in the same run (the CHECKPOINT
both start with, which writes the change into the file, is timed apart); and a reader's open +
fetch of 10 documents by doc id + the status counts, over the segment views and over a read-only
open of the copied file (median of `--repeat`).

    .venv/bin/python benchmarks/snapshot_segments.py --docs 200000 \
        --out benchmarks/results/snapshot_segments_200k.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the store helpers the tests use

from machine import machine  # noqa: E402
from store_kit import PROVENANCE, add, chunks_for, publish, record  # noqa: E402
from testkit import TINY_WORDS as WORDS  # noqa: E402

from indexer.core.fsio import fsync_file  # noqa: E402
from indexer.records.versions import SNAPSHOT_FILE, version_dir, write_pointer  # noqa: E402
from indexer.store import Store, content_hash  # noqa: E402
from indexer.store.snapshot import segments_dir  # noqa: E402

DIM = 384
BATCH = 20_000


def tweet(rng: random.Random, i: int) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(12, 30))) + f" {i}"


def build(path: Path, docs: int) -> Store:
    """A fresh store of `docs` documents, one chunk and one 384-dim vector each."""
    rng = random.Random(0)
    store = Store(path)
    store.vectors.set_provenance(dataclasses.replace(PROVENANCE, dim=DIM))
    for start in range(0, docs, BATCH):
        records = [
            record(f"t{i}", tweet(rng, i), lang="en", user=f"u{i % 997}")
            for i in range(start, min(docs, start + BATCH))
        ]
        add(store, "tweets", records, seed=start, dim=DIM)
    return store


def change(store: Store, docs: int, share: float) -> int:
    """Give `share` of the documents new text (and so new chunks and vectors)."""
    rng = random.Random(1)
    picked = sorted(rng.sample(range(docs), max(1, int(docs * share))))
    ids = dict(
        store.con.execute(
            "SELECT external_id, doc_id FROM documents WHERE collection = 'tweets'"
        ).fetchall()
    )
    changed = []
    for i in picked:
        rec = record(f"t{i}", tweet(rng, i) + " edited", lang="en", user=f"u{i % 997}")
        changed.append((ids[f"t{i}"], rec, content_hash(rec)))
    chunks = chunks_for([d for d, _, _ in changed], seed=99, dim=DIM)
    store.documents.write_batch("tweets", [], changed, [], chunks, [], "bench-change")
    return len(changed)


def segment_files(path: Path) -> dict[str, int]:
    where = segments_dir(path)
    return {p.name: p.stat().st_size for p in where.iterdir()} if where.is_dir() else {}


def timed_publish(store: Store) -> dict:
    before = segment_files(store.path)
    start = time.perf_counter()
    version = publish(store)
    seconds = time.perf_counter() - start
    after = segment_files(store.path)
    written = {n: s for n, s in after.items() if n not in before}
    return {"version": version, "seconds": round(seconds, 3), "bytes": sum(written.values())}


def full_copy(store: Store, legacy: Path) -> dict:
    """The old publish: CHECKPOINT, copy store.duckdb into a version folder, fsync."""
    folder = version_dir(legacy, "v1")
    folder.mkdir(parents=True)
    start = time.perf_counter()
    store.con.execute("CHECKPOINT")
    shutil.copyfile(store.db_path, folder / SNAPSHOT_FILE)
    fsync_file(folder / SNAPSHOT_FILE)
    seconds = time.perf_counter() - start
    write_pointer(legacy, "v1")
    return {"seconds": round(seconds, 3), "bytes": (folder / SNAPSHOT_FILE).stat().st_size}


def reader_once(path: Path, doc_ids: list[int]) -> dict:
    start = time.perf_counter()
    store = Store(path, read_only=True)
    opened = time.perf_counter()
    hits = store.reads.fetch_documents(doc_ids)
    fetched = time.perf_counter()
    status = (store.counts.documents(), store.counts.chunks(), store.counts.collections())
    counted = time.perf_counter()
    store.close()
    assert len(hits) == len(doc_ids) and status[0] > 0
    return {"open": opened - start, "fetch10": fetched - opened, "status": counted - fetched}


def reader(path: Path, doc_ids: list[int], repeat: int) -> dict:
    runs = [reader_once(path, doc_ids) for _ in range(repeat)]
    return {k: round(statistics.median(r[k] for r in runs) * 1000, 2) for k in runs[0]} | {
        "unit": "ms"
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--share", type=float, default=0.01, help="documents changed")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(dir=args.work))
    try:
        start = time.perf_counter()
        store = build(work / "store", args.docs)
        built = time.perf_counter() - start
        first = timed_publish(store)
        changed = change(store, args.docs, args.share)
        start = time.perf_counter()
        store.con.execute("CHECKPOINT")  # both ways start with one: timed apart
        checkpoint = time.perf_counter() - start
        second = timed_publish(store)
        copy = full_copy(store, work / "legacy")
        doc_ids = [
            r[0]
            for r in store.con.execute("SELECT doc_id FROM documents USING SAMPLE 10").fetchall()
        ]
        store.close()
        result = {
            "benchmark": "snapshot_segments",
            "docs": args.docs,
            "changed": changed,
            "build_seconds": round(built, 1),
            "store_bytes": (work / "store" / "store.duckdb").stat().st_size,
            "first_publish_segments": first,
            "publish_after_change": {
                "checkpoint_seconds": round(checkpoint, 3),
                "segments": second,
                "full_copy": copy,
            },
            "reader": {
                "segments": reader(work / "store", doc_ids, args.repeat),
                "copied_store_duckdb": reader(work / "legacy", doc_ids, args.repeat),
            },
            "machine": machine(),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
