"""Planning a batch against a large store: `DocumentWrites.existing` finding a batch's 2,048
stored documents by the run's map of stored ids (`indexer.store.stored_ids`) against the
reference, the join that scans every stored id once per batch, in one run, for batches of
stored ids in file order, stored ids drawn at random, and new ids.

    .venv/bin/python benchmarks/plan_lookup.py --sizes 1000000 3000000 \\
        --out benchmarks/results/plan_lookup.json
    # or on a store an index run left (the scale benchmark's): --store DIR, and with
    # --corpus FILE (its corpus) reading and planning its batches alone, one thread

Generated stores hold N documents of collection `default` with ids `doc-<i>`, inserted by
SQL (no model); the scale benchmark's ids are the same form.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine, write_json  # noqa: E402

from indexer.store import Store  # noqa: E402

BATCH = 2048
FILL = (
    "INSERT INTO documents SELECT i, 'default', 'doc-' || i, NULL, 'text of ' || i, NULL, "
    "md5('text of ' || i), now()::TIMESTAMP FROM range(?, ?) t(i)"
)


def generated(folder: Path, n: int) -> Path:
    with Store(folder) as store:  # generating only: more than the writer's 128 MB
        store.con.execute("SET memory_limit = '4GB'")
        for start in range(1, n + 1, 1_000_000):
            store.con.execute(FILL, [start, min(n + 1, start + 1_000_000)])
        store.con.execute("CHECKPOINT")
    return folder


def timed(store: Store, batches: list[list[str]], up_to: int | None) -> dict:
    walls = []
    found = 0
    for ids in batches:
        started = time.perf_counter()
        found += len(store.documents.existing("default", ids, up_to=up_to))
        walls.append(time.perf_counter() - started)
    return {
        "ms_per_batch_p50": round(statistics.median(walls) * 1e3, 2),
        "ms_per_batch_mean": round(statistics.fmean(walls) * 1e3, 2),
        "found": found,
    }


def measure(folder: Path, batches_each: int) -> dict:
    with Store(folder) as store:
        n = store.counts.documents()
        last = store.documents.last_doc_id()
        ids = [
            r[0]
            for r in store.con.execute(
                "SELECT external_id FROM documents ORDER BY doc_id LIMIT ?", [batches_each * BATCH]
            ).fetchall()
        ]
        in_order = [ids[i : i + BATCH] for i in range(0, len(ids), BATCH)]
        drawn = np.random.default_rng(0).choice(last, batches_each * BATCH, replace=False) + 1
        rows = store.con.execute(
            "SELECT external_id FROM documents WHERE doc_id IN (SELECT unnest(?::BIGINT[]))",
            [drawn.tolist()],
        ).fetchall()
        shuffled = [r[0] for r in rows]
        np.random.default_rng(1).shuffle(shuffled)
        at_random = [shuffled[i : i + BATCH] for i in range(0, len(shuffled), BATCH)]
        new = [[f"new-{b}-{i}" for i in range(BATCH)] for b in range(batches_each)]
        started = time.perf_counter()
        store.documents.existing("default", ids[:1], up_to=last)  # builds the map
        build_s = time.perf_counter() - started
        out = {"n": n, "map_build_s": round(build_s, 2)}
        for name, batches in (("in_order", in_order), ("at_random", at_random), ("new", new)):
            now = timed(store, batches, last)
            reference = timed(store, batches, None)  # None: the join over every stored id
            assert now["found"] == reference["found"], (name, now, reference)
            out[name] = {
                "now": now,
                "reference": reference,
                "speedup": round(reference["ms_per_batch_p50"] / now["ms_per_batch_p50"], 1),
            }
        return out


def whole_plan(store_dir: Path, corpus: Path, batches: int) -> dict:
    """Reading `batches` batches of `corpus` and planning them (`plan_batch`) against the store,
    one after the other in this thread: what each costs without the run's other threads."""
    from indexer.indexing.steps import plan_batch
    from indexer.ingest.readers import FieldMap, IdRegistry, read_batches

    read, started = [], time.perf_counter()
    for batch in read_batches(corpus, "auto", FieldMap(), BATCH, ids=IdRegistry()):
        read.append(batch)
        if len(read) == batches + 1:
            break
    read_ms = (time.perf_counter() - started) / len(read) * 1e3
    walls, skipped = [], 0
    with Store(store_dir) as store:
        up_to = store.documents.last_doc_id()
        plan_batch(read[0], store, "default", up_to)  # builds the run's map of stored ids
        for batch in read[1:]:
            started = time.perf_counter()
            skipped += plan_batch(batch, store, "default", up_to).skipped_unchanged
            walls.append(time.perf_counter() - started)
    return {
        "read_ms_per_batch": round(read_ms, 2),
        "plan_ms_per_batch_p50": round(statistics.median(walls) * 1e3, 2),
        "plan_ms_per_batch_mean": round(statistics.fmean(walls) * 1e3, 2),
        "skipped_unchanged": skipped,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000_000, 3_000_000])
    parser.add_argument("--store", type=Path, help="measure this store instead")
    parser.add_argument("--batches", type=int, default=20, help="batches of each kind")
    parser.add_argument(
        "--corpus", type=Path, help="with --store: also read and plan this file's first batches"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/plan_lookup.json"))
    args = parser.parse_args()
    rows = []
    if args.store:
        rows.append(measure(args.store, args.batches) | {"store": str(args.store)})
        if args.corpus:
            rows[-1]["whole_plan"] = whole_plan(args.store, args.corpus, args.batches)
        print(rows[-1], flush=True)
    for n in args.sizes if not args.store else []:
        with tempfile.TemporaryDirectory(prefix="plan-lookup-") as tmp:
            rows.append(measure(generated(Path(tmp) / "store", n), args.batches))
            print(rows[-1], flush=True)
    write_json(args.out, {"command": " ".join(sys.argv), "machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
