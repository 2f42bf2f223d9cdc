"""Cold `bertindex search` latency: the ONNX query encoder against the torch one, a new process
per query, alternating the two (`search.query_encoder: onnx | torch`), p50/p90 wall time.

Also, with --compare STORE: the SciFact test queries searched through both query paths on one
store (ids, order, scores; against torch fp32 and torch bf16), and with --bulk N: bulk encoding
of N SciFact abstracts by torch bf16 (the index path here), torch fp32, ONNX Runtime fp32 and
ONNX Runtime dynamic int8, with throughput and cosine to torch fp32.

    nice -n 5 .venv/bin/python benchmarks/cli_latency.py --store .demo/store --runs 20 \\
        --compare .bench/scifact --bulk 2000 --out benchmarks/results/cli_latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import write_json

from indexer.core.machine import cpu_model, proc_cpu_flags

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
QUERY = "parse command line arguments"


def machine() -> dict:
    info = {
        "cpu": platform.processor(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }
    info["cpu"] = cpu_model()
    info["isa"] = sorted(
        f for f in proc_cpu_flags() if f.startswith(("avx512", "amx", "avx2", "avx_vnni"))
    )
    info["load_average"] = os.getloadavg()
    versions = {}
    for name in ("onnxruntime", "onnx", "torch", "transformers", "tokenizers", "faiss", "numpy"):
        try:
            from importlib.metadata import version

            versions[name] = version(name if name != "faiss" else "faiss-cpu")
        except Exception:  # noqa: BLE001 - a missing package is reported as such
            versions[name] = None
    info["versions"] = versions
    return info


def percentiles(values: list[float]) -> dict:
    return {
        "p50": round(float(np.percentile(values, 50)), 3),
        "p90": round(float(np.percentile(values, 90)), 3),
        "min": round(min(values), 3),
        "runs": len(values),
    }


def cli_latency(store: str, runs: int, query: str) -> dict:
    """Alternate onnx and torch cold searches (hybrid, the default mode), `runs` each."""
    with tempfile.TemporaryDirectory() as tmp:
        configs = {}
        for path in ("onnx", "torch"):
            configs[path] = Path(tmp) / f"{path}.yaml"
            configs[path].write_text(f"search:\n  query_encoder: {path}\n")
        times: dict[str, list[float]] = {"onnx": [], "torch": []}
        cpu: dict[str, list[float]] = {"onnx": [], "torch": []}
        outputs = {}
        for i in range(runs + 1):  # run 0 of each warms the page cache, not counted
            for path in ("onnx", "torch") if i % 2 == 0 else ("torch", "onnx"):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "search.cli.main",
                        "search",
                        query,
                        "--store",
                        store,
                        "--config",
                        str(configs[path]),
                        "--json",
                    ],
                    cwd=ROOT,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                    capture_output=True,
                    text=True,
                    check=False,
                    timeout=300,
                )
                elapsed = time.perf_counter() - start
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if done.returncode != 0:
                    raise SystemExit(f"{path} search failed: {done.stderr.strip()}")
                if i:
                    times[path].append(elapsed)
                    cpu[path].append(
                        after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                    )
                print(f"{path} run {i}: {elapsed:.2f} s wall", file=sys.stderr, flush=True)
                outputs[path] = [json.loads(line)["id"] for line in done.stdout.splitlines()]
    out = {path: percentiles(t) for path, t in times.items()}
    out["speedup_p50"] = round(out["torch"]["p50"] / out["onnx"]["p50"], 2)
    # CPU seconds (user + system) of each search process: what a quiet machine's wall time
    # approaches when the process runs mostly on one thread
    out["cpu_seconds"] = {path: percentiles(c) for path, c in cpu.items()}
    out["same_ids"] = outputs["onnx"] == outputs["torch"]
    return out


def compare(store: str, split: str = "test") -> dict:
    """The SciFact queries through ONNX, torch fp32 and torch bf16 on one store."""
    from indexer.config import Config
    from indexer.encode.encoder import Encoder
    from indexer.evaluation.beir import load_beir_queries
    from indexer.query.searcher import Searcher
    from indexer.store import Store

    queries, _ = load_beir_queries(DATA / "scifact", split)
    texts = list(queries.values())
    base = Config().with_overrides(**{"store.path": store})
    onnx_cfg = base.with_overrides(**{"search.query_encoder": "onnx"})
    result: dict = {"queries": len(texts)}
    with Store(store, read_only=True) as st:
        onnx_searcher = Searcher(onnx_cfg, st)
        onnx_vectors = onnx_searcher.encode_queries(texts)
        for dtype in ("fp32", "bf16"):
            cfg = base.with_overrides(**{"model.dtype": dtype, "search.query_encoder": "torch"})
            torch_searcher = Searcher(cfg, st, Encoder(cfg.model))
            torch_vectors = torch_searcher.encode_queries(texts)
            cos = (onnx_vectors * torch_vectors).sum(axis=1)
            row = {
                "vector_max_abs_diff": float(np.abs(onnx_vectors - torch_vectors).max()),
                "cosine_min": float(cos.min()),
            }
            for mode in ("hybrid", "dense"):
                a = onnx_searcher.search_many(texts, 10, mode=mode, vectors=onnx_vectors)
                b = torch_searcher.search_many(texts, 10, mode=mode, vectors=torch_vectors)
                differ = [
                    i
                    for i, (x, y) in enumerate(zip(a, b))
                    if [h.id for h in x] != [h.id for h in y]
                ]
                diffs = [
                    abs(h.score - g.score)
                    for x, y in zip(a, b)
                    for h, g in zip(x, y)
                    if h.id == g.id
                ]
                gaps = []  # the torch ranking's score gap where the two orders part
                for i in differ:
                    x, y = a[i], b[i]
                    j = next(j for j, (h, g) in enumerate(zip(x, y)) if h.id != g.id)
                    gaps.append(
                        round(abs(y[j].score - y[j + 1].score) if j + 1 < len(y) else 0.0, 6)
                    )
                row[mode] = {
                    "queries_same_ids_and_order": len(texts) - len(differ),
                    "max_score_diff": float(max(diffs, default=0.0)),
                    "differing_queries": differ[:20],
                    "score_gap_where_they_part": gaps[:20],
                }
            result[f"torch_{dtype}"] = row
    return result


def bulk(n: int) -> dict:
    """Bulk encoding of n SciFact abstracts: torch bf16 / fp32, ONNX Runtime fp32 / int8."""
    import gzip

    import onnxruntime as ort
    import torch

    from indexer.config import Config
    from indexer.encode.encoder import Encoder
    from indexer.encode.onnx_export import export_encoder

    with gzip.open(DATA / "scifact/corpus.jsonl.gz", "rt") as fh:
        rows = [json.loads(line) for line in fh][:n]
    texts = [(r.get("title", "") + "\n" + r["text"]).strip() for r in rows]
    out: dict = {"texts": len(texts), "torch_threads": torch.get_num_threads()}
    encoders = {
        d: Encoder(Config().model.model_copy(update={"dtype": d})) for d in ("fp32", "bf16")
    }
    ref = encoders["fp32"]
    seqs = [ref.wrap(ids[: ref.config.max_length - 2]) for ids in ref.tokenize(texts)]
    tokens = sum(len(s) for s in seqs)
    out["tokens"] = tokens
    vectors = {}
    for name, enc in (("torch_fp32", encoders["fp32"]), ("torch_bf16", encoders["bf16"])):
        enc.encode_ids(seqs[:64])  # warm-up
        start = time.perf_counter()
        vectors[name] = enc.encode_ids(seqs)
        out[name] = {"seconds": round(time.perf_counter() - start, 2)}
    with tempfile.TemporaryDirectory() as tmp:
        record = export_encoder(ref, tmp)
        fp32_file = Path(tmp) / record["path"]
        int8_file = fp32_file.with_name("model.int8.onnx")
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(
            str(fp32_file), str(int8_file), weight_type=QuantType.QInt8, per_channel=True
        )
        for name, path in (("onnx_fp32", fp32_file), ("onnx_int8", int8_file)):
            options = ort.SessionOptions()
            options.intra_op_num_threads = os.cpu_count() or 1
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            batches = ref.plan([len(s) for s in seqs])

            def run(positions, session=session):
                width = len(seqs[positions[0]])
                ids = np.full((len(positions), width), ref.pad_id, dtype=np.int64)
                mask = np.zeros_like(ids)
                for r, i in enumerate(positions):
                    ids[r, : len(seqs[i])] = seqs[i]
                    mask[r, : len(seqs[i])] = 1
                (states,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
                m = mask[:, :, None].astype(np.float32)
                v = (states * m).sum(1) / np.maximum(m.sum(1), 1)
                return v / np.linalg.norm(v, axis=1, keepdims=True)

            run(batches[-1])  # warm-up
            start = time.perf_counter()
            result = np.zeros((len(seqs), ref.dim), np.float32)
            for positions in batches:
                result[positions] = run(positions)
            out[name] = {
                "seconds": round(time.perf_counter() - start, 2),
                "file_mb": round(path.stat().st_size / 2**20, 1),
            }
            vectors[name] = result
    for name in ("torch_fp32", "torch_bf16", "onnx_fp32", "onnx_int8"):
        cos = (vectors[name] * vectors["torch_fp32"]).sum(axis=1)
        out[name].update(
            {
                "tokens_per_s": round(tokens / out[name]["seconds"]),
                "cosine_to_torch_fp32_min": round(float(cos.min()), 5),
                "cosine_to_torch_fp32_mean": round(float(cos.mean()), 5),
                "speed_vs_torch_bf16": round(
                    out["torch_bf16"]["seconds"] / out[name]["seconds"], 2
                ),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store",
        default=str(ROOT / ".demo/store"),
        help="store for the cold CLI searches (`make demo` builds .demo/store)",
    )
    parser.add_argument("--runs", type=int, default=20, help="cold searches per query path")
    parser.add_argument("--query", default=QUERY)
    parser.add_argument(
        "--compare",
        metavar="STORE",
        help="a SciFact store: compare the 300 test queries through both paths",
    )
    parser.add_argument(
        "--bulk",
        type=int,
        default=0,
        metavar="N",
        help="also time bulk encoding of N SciFact abstracts",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report = {"machine": machine(), "store": args.store, "query": args.query}
    if args.runs:
        report["cli"] = cli_latency(args.store, args.runs, args.query)
        print(json.dumps(report["cli"]), flush=True)
    if args.compare:
        report["compare"] = compare(args.compare)
        print(json.dumps(report["compare"]), flush=True)
    if args.bulk:
        report["bulk"] = bulk(args.bulk)
        print(json.dumps(report["bulk"]), flush=True)
    report["machine"]["load_average_end"] = os.getloadavg()
    report["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    write_json(args.out, report, indent=2)


if __name__ == "__main__":
    main()
