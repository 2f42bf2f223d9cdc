"""Peak memory of the index pipeline as the corpus grows: a generated corpus of short records
streamed through `run_index` (read -> plan -> encode -> commit -> FAISS and keyword indexes),
each size in its own child process, whose peak resident memory (`ru_maxrss`, from `wait4`) is
reported beside the ratio to the smallest size.

The encoder is a tiny random BERT (1 layer, hidden 32, so 32-dim vectors), saved to a temporary
folder: what is measured is the pipeline, not the model. The FAISS index itself must grow with
the corpus, so every size uses the same compact spec (`--spec`, default `IVF1024,Flat`: n × 32
float32 + an int64 id, 1M vectors ≈ 130 MB; `auto` would switch from Flat to an HNSW graph
above 100k, ~330 more bytes a vector); everything else should stay flat.

    .venv/bin/python benchmarks/memory_bound.py --records 100000 1000000

Each child also reports its peak before the index write step (reading, encoding, committing)
and after the FAISS part of it (the keyword index comes last), and the corpus/store sizes.
`--work DIR` keeps the corpora and stores there (else a temporary folder, removed at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the tiny BERT the tests build

from testkit import TINY_WORDS as WORDS  # noqa: E402


def write_corpus(path: Path, records: int, seed: int = 0) -> None:
    """`records` short JSONL records (4-12 words, one metadata field), written in chunks."""
    rng = random.Random(seed)
    with open(path, "w") as fh:
        for start in range(0, records, 10_000):
            lines = []
            for i in range(start, min(records, start + 10_000)):
                text = " ".join(rng.choices(WORDS, k=rng.randint(4, 12)))
                lines.append(
                    json.dumps({"id": f"r{i}", "text": f"{text} {i}", "group": str(i % 13)})
                )
            fh.write("\n".join(lines) + "\n")


def child(records: int, model_dir: str, work: Path, batch_size: int, spec: str) -> None:
    """Index `records` generated records into a fresh store; print one JSON line."""
    import torch

    torch.set_num_threads(1)
    from indexer.config import Config
    from indexer.index.keyword import sync_keyword_index
    from indexer.indexing.run import Steps, run_index
    from indexer.indexing.steps import sync_vector_index

    corpus = work / f"corpus-{records}.jsonl"
    if not corpus.is_file():
        write_corpus(corpus, records)
    store = work / f"store-{records}"
    shutil.rmtree(store, ignore_errors=True)
    cfg = Config().with_overrides(
        **{
            "model.name": model_dir,
            "model.dtype": "fp32",
            "model.device": "cpu",
            "model.max_length": 64,
            "long_documents.stride": 16,
            "store.path": str(store),
            "index.spec": spec,
        }
    )
    phases: dict = {}

    def write(store, config, added, removed, base_version=None):
        """The index step (`publish_indexes`), with the peak so far noted between parts."""
        phases["peak_before_index_write_mb"] = _maxrss_mb()
        started = time.perf_counter()
        out = sync_vector_index(store, config, added, removed, base_version)
        phases["peak_after_faiss_mb"] = _maxrss_mb()
        out["keyword"] = sync_keyword_index(store, config.keyword.language)
        phases["index_write_s"] = round(time.perf_counter() - started, 1)
        return out

    started = time.perf_counter()
    summary = run_index([str(corpus)], cfg, batch_size=batch_size, steps=Steps(write=write))
    print(
        json.dumps(
            {
                "records": records,
                "encoded": summary["encoded"],
                "chunks": summary["chunks"],
                "rejected": summary["rejected"],
                "index": summary["index"]["spec"],
                "seconds": round(time.perf_counter() - started, 1),
                "corpus_mb": round(corpus.stat().st_size / 2**20, 1),
                "store_mb": round((store / "store.duckdb").stat().st_size / 2**20, 1),
                "index_mb": round(_index_bytes(store) / 2**20, 1),
                **phases,
            }
        )
    )


def _index_bytes(store: Path) -> int:
    """Bytes of the FAISS files the current version reads (its base and delta)."""
    from indexer.index.version_files import version_files
    from indexer.records.versions import current_version

    files = version_files(store, current_version(store))
    return sum(files[kind].stat().st_size for kind in ("base", "delta") if kind in files)


def _maxrss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def measure(records: int, model_dir: Path, work: Path, batch_size: int, spec: str) -> dict:
    """Run one size in a child process; its peak RSS comes from wait4 (that child only)."""
    cmd = [
        sys.executable,
        __file__,
        "--child",
        str(records),
        "--model",
        str(model_dir),
        "--work",
        str(work),
        "--batch-size",
        str(batch_size),
        "--spec",
        spec,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"child for {records} records failed (exit {proc.returncode})")
    info = json.loads(out.strip().splitlines()[-1])
    info["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument(
        "--spec",
        default="IVF1024,Flat",
        help="index.spec for every size (default: a compact IVF index)",
    )
    parser.add_argument("--work", type=Path, help="keep corpora and stores here")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.model, args.work, args.batch_size, args.spec)
        return

    from testkit import build_tiny_bert

    work = args.work or Path(tempfile.mkdtemp(prefix="bertindex-membound-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        model_dir = work / "tiny-encoder"
        if not model_dir.is_dir():
            build_tiny_bert(model_dir, layers=1)
        results = []
        for n in args.records:
            info = measure(n, model_dir, work, args.batch_size, args.spec)
            results.append(info)
            print(json.dumps(info), flush=True)
        base = results[0]["peak_rss_mb"]
        for info in results:
            print(
                f"{info['records']:>9} records: peak RSS {info['peak_rss_mb']:8.1f} MB "
                f"({info['peak_rss_mb'] / base:.2f}x of {results[0]['records']}); peak before the "
                f"index write {info['peak_before_index_write_mb']} MB, after FAISS "
                f"{info['peak_after_faiss_mb']} MB; {info['seconds']} s, "
                f"index {info['index']} {info['index_mb']} MB"
            )
        print(f"load: {os.getloadavg()[0]:.2f} (1-minute average at the end)")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
