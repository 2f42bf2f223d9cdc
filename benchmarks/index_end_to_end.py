"""End to end, as whole processes: `bertindex index` (default config, Prefect flow included)
against a hand-written sentence-transformers + FAISS + DuckDB script, on the same SciFact
abstracts (max length 256, truncate), run one after the other in this process's machine.

The JSON names the machine (`indexer.encode.limits.machine_info`: CPU, ISA flags, libraries,
threads, matmul peak for the path `dtype: auto` takes here), that path and why, and the share
of the matmul limit the whole `bertindex index` process reached (encoding FLOPs of the
truncated abstracts over its wall time: start-up, reading and writing included, so a floor).
`--emulate avx2`: both processes run with the kernels limited to AVX2 and the CPU flags
overridden (figures marked emulated).

Usage: python benchmarks/index_end_to_end.py [--docs 1500] [--repeat 1] [--emulate avx2] [--dtype
int8]
       [--out benchmarks/results/index_end_to_end.json]
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
sys.path.insert(0, str(ROOT))
from machine import missing, write_json

from indexer.core.machine import add_emulate_option, reexec_emulated

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
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument(
        "--dtype", default=None, help="model.dtype for bertindex (default: the config's, auto)"
    )
    add_emulate_option(parser)
    args = parser.parse_args()
    reexec_emulated(args.emulate)
    if missing(CORPUS, "scifact"):
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
            extra = []
            if args.dtype:
                config = Path(tmp) / "config.yaml"
                config.write_text(f"model:\n  dtype: {args.dtype}\n")
                extra = ["--config", str(config)]
            ours.append(
                run(
                    [
                        str(BIN / "bertindex"),
                        "index",
                        str(corpus),
                        "--store",
                        str(store),
                        "--max-length",
                        "256",
                        "--long-documents",
                        "truncate",
                        "--json",
                        *extra,
                    ]
                )
            )
            out = Path(tmp) / "reference"
            shutil.rmtree(out, ignore_errors=True)
            theirs.append(
                run(
                    [
                        sys.executable,
                        str(ROOT / "benchmarks" / "reference_st_index.py"),
                        str(corpus),
                        str(out),
                        "--max-length",
                        "256",
                    ]
                )
            )
    best_ours, best_theirs = min(ours), min(theirs)
    machine, path, flops = describe(args.docs, args.dtype)
    peak = machine["matmul_peak_gflops"][path["dtype"]]
    print(f"documents {args.docs}")
    print(f"bertindex index (whole process):            {best_ours:7.1f} s")
    print(f"sentence-transformers + FAISS + DuckDB script: {best_theirs:7.1f} s")
    print(f"speed-up {best_theirs / best_ours:.2f}x")
    from indexer.encode.limits import limit_share

    result = {
        "docs": args.docs,
        "bertindex_s": round(best_ours, 2),
        "reference_s": round(best_theirs, 2),
        "speedup": round(best_theirs / best_ours, 2),
        "runs": {
            "bertindex_s": [round(t, 2) for t in ours],
            "reference_s": [round(t, 2) for t in theirs],
        },
        "encoder_path": path,
        "gflop_per_doc": round(flops / args.docs / 1e9, 3),
        "bertindex_whole_process_limit_share": limit_share(flops, best_ours, peak),
        "reference_whole_process_fp32_limit_share": limit_share(
            flops, best_theirs, machine["matmul_peak_gflops"]["fp32"]
        ),
        "machine": machine,
    }
    print(
        f"{result['bertindex_whole_process_limit_share']:.0%} of the {path['dtype']} matmul "
        f"peak ({peak} GFLOP/s) over the whole bertindex process; path: {path['reason']}"
    )
    print(json.dumps(result))
    write_json(args.out, result)
    return 0


def describe(docs: int, dtype: str | None) -> tuple[dict, dict, float]:
    """(machine, the encoder path `bertindex index` takes, encoding FLOPs of the corpus)."""
    from transformers import AutoConfig, AutoTokenizer

    from indexer.config import Config, resolve_model_path
    from indexer.encode.limits import encode_flops, machine_info
    from indexer.encode.policy import describe_path

    config = Config().model
    if dtype:
        config = config.model_copy(update={"dtype": dtype})
    path = describe_path(config)
    model_dir = resolve_model_path(config.name)
    texts = []
    with gzip.open(CORPUS, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if n >= docs:
                break
            row = json.loads(line)
            texts.append(f"{row.get('title', '')} {row['text']}".strip())
    ids = AutoTokenizer.from_pretrained(model_dir)(texts, add_special_tokens=False)["input_ids"]
    flops = encode_flops(AutoConfig.from_pretrained(model_dir), [min(len(i), 254) + 2 for i in ids])
    return machine_info(["fp32", path["dtype"]]), path, flops


if __name__ == "__main__":
    sys.exit(main())
