"""The GPU run of issue 31 in one call and one JSON report, over a pack that `make gpu-pack`
(benchmarks/gpu_pack.py) built: (a) bf16 vectors of the SciFact documents against the CPU fp32
reference vectors carried in the pack; (b) encoding speed against sentence-transformers fp16 on
the same device, same texts, max length 256, both warm, and the share of the bf16 matmul peak;
(c) one classifier head over the pack's tweets (bertindex's Annotator) against transformers'
`pipeline(...)`; (d) faiss on the GPU, or what was tried to carry it.

Imports only what the encoder and the heads need (torch, transformers, sentence-transformers,
numpy, pyarrow, pyyaml, pydantic): no duckdb, polars, faiss, prefect or tantivy. pydantic, absent
on the lent GPU image, is installed from the pack's wheels into a temporary folder when it is
missing. The project's code is the working tree the device tool copies (the pack holds data
only). Does not build the pack; `--device cpu --limit 200` is the dry run
tests/project/test_gpu_check.py runs on a mini pack. Usage:
    python benchmarks/gpu_check.py --pack gpu-pack --device cuda --out $OUT/gpu_check.json
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# the pack's layout, relative to its folder (benchmarks/gpu_pack.py writes it)
MODEL = "model"  # bf16 safetensors, config, tokenizer and sentence-transformers files
CORPUS = "scifact/corpus.jsonl.gz"  # BEIR corpus, as in ../shared/data/scifact
REFERENCE = "reference.npy"  # (docs, dim) CPU fp32 vectors, stored as float16
REFERENCE_INFO = "reference.json"  # what produced them: the ids, model hash, max length
HEAD = "head"  # config and tokenizer of the head; its own tensors in head.safetensors
HEAD_TENSORS = "head/head.safetensors"  # the tensors that are not the packaged backbone's
HEAD_INFO = "head/head.json"  # {"prefix": "bert."}: where the backbone's keys go in the head
TWEETS = "tweets.txt"  # one tweet a line
WHEELS = "wheels"  # wheels installed when their package is missing (pydantic)
MANIFEST = "manifest.json"

MAX_LENGTH = 256  # tokens per passage; the CPU dry run passes a shorter --max-length
MIN_COSINE = 0.999  # (a) bf16 on CUDA against the CPU fp32 vectors
GOAL_RATIO, GOAL_PASSAGES_PER_S = 1.3, 20_000  # (b), on CUDA only
# dense bf16 tensor-core peak by GPU name (NVIDIA's data sheets, SXM parts), beside the measured one
NOMINAL_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0}
# (d) what was tried, 2026-12-02, `pip download --no-deps --python-version 3.12 ...` here
FAISS_TRIED = [
    "faiss-gpu-cu12 1.14.1.post1 (cp312): 48.4 MB wheel, needs nvidia-cublas-cu12 and "
    "nvidia-cuda-runtime-cu12 (CUDA 12; the GPU image carries CUDA 13 libraries, "
    "no libcublas.so.12)",
    "faiss-gpu 1.15.1 (abi3): 135.3 MB wheel, needs the same CUDA 12 wheels",
    "faiss-gpu-cu13: no distribution on the package index",
    "the pack's 64 MiB (model 45 MB) leaves under 20 MB: neither wheel fits, "
    "CUDA 12 libraries aside",
]


class PackError(RuntimeError):
    """The pack is missing a file or does not match the run asked for."""


def document_texts(corpus: Path, limit: int | None = None) -> tuple[list[str], list[str]]:
    """(ids, texts) of a BEIR corpus in file order: title and text joined by a space, the text
    bertindex encodes for a BEIR document (`indexer.ingest.readers`).

    Args:
        corpus: corpus.jsonl.gz.
        limit: the first this many documents (None: all).
    """
    ids, texts = [], []
    with gzip.open(corpus, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            ids.append(str(row["_id"]))
            texts.append(f"{row.get('title') or ''} {row['text']}".strip())
            if limit and len(ids) == limit:
                break
    return ids, texts


def need(pack: Path, name: str) -> Path:
    """`pack/name`, or a PackError naming it and the fix."""
    path = pack / name
    if not path.exists():
        raise PackError(
            f"{path} not found: build the pack with `make gpu-pack` "
            f"(python benchmarks/gpu_pack.py --out {pack})"
        )
    return path


def ensure_wheels(pack: Path) -> list[str]:
    """Install the pack's wheels into a temporary folder put first on sys.path when pydantic is
    missing (the lent GPU image has no pydantic). Runs before torch is imported, so that the
    carried typing_extensions is the one loaded. Returns the wheels installed."""
    try:
        importlib.import_module("pydantic")
        return []
    except ImportError:
        pass
    wheels = sorted(need(pack, WHEELS).glob("*.whl"))
    if not wheels:
        raise PackError(
            f"pydantic is missing and {pack / WHEELS} holds no wheels; rebuild the "
            "pack without --no-wheels"
        )
    target = Path(tempfile.mkdtemp(prefix="gpu-check-site-"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--target",
            str(target),
            *map(str, wheels),
        ],
        check=True,
    )
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    return [w.name for w in wheels]


def timed(fn, repeats: int, sync) -> tuple[object, list[float]]:
    """fn() once to warm, then `repeats` timed calls (`sync` waits for the device)."""
    out = fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - start)
    return out, times


def rate(count: int, times: list[float]) -> dict:
    """Per second of the best and the median of `times`."""
    return {
        "best_s": round(min(times), 4),
        "median_s": round(statistics.median(times), 4),
        "per_s": round(count / min(times), 1),
        "per_s_median": round(count / statistics.median(times), 1),
    }


def device_info(device: str) -> dict:
    import numpy
    import sentence_transformers
    import torch
    import transformers

    info = {
        "device": device,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "libraries": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "numpy": numpy.__version__,
            "cuda": torch.version.cuda,
        },
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=props.name,
            capability=f"{props.major}.{props.minor}",
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            bf16_supported=torch.cuda.is_bf16_supported(),
        )
    else:
        from indexer.core.machine import cpu_model

        info["cpu"] = cpu_model()
    return info


def matmul_peak_tflops(device: str, m: int, k: int, n: int, repeats: int = 20) -> float:
    """Best TFLOP/s of an (m, k) @ (k, n) matmul: bf16 on CUDA, fp32 on a CPU."""
    import torch

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    _, times = timed(lambda: a @ b, repeats, sync)
    return round(2 * m * k * n / min(times) / 1e12, 4)


def correctness(encoder, texts: list[str], ids: list[str], reference) -> dict:
    """(a): the encoder's vectors of `texts` against the reference rows (cosine per document)."""
    import numpy as np

    ours = encoder.encode_texts(texts)  # (docs, dim) float32, normalised
    ref = reference.astype(np.float32)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    cos = (ours * ref).sum(axis=1)
    worst = np.argsort(cos)[:5]
    return {
        "documents": len(texts),
        "dtype": encoder.path.dtype,
        "min_cosine": round(float(cos.min()), 6),
        "mean_cosine": round(float(cos.mean()), 6),
        "p001_cosine": round(float(np.quantile(cos, 0.001)), 6),
        "worst": [{"id": ids[i], "cosine": round(float(cos[i]), 6)} for i in worst],
        "goal_min_cosine": MIN_COSINE,
        "passed": bool(cos.min() >= MIN_COSINE),
    }


def speed(args, model_dir: Path, texts: list[str], encoder, device: str) -> dict:
    """(b): passages/s and tokens/s of bertindex and sentence-transformers, best of
    `args.repeats` warm passes each, and the share of the matmul peak."""
    import torch
    from sentence_transformers import SentenceTransformer

    from indexer.config import ModelConfig
    from indexer.encode.encoder import Encoder
    from indexer.encode.limits import encode_flops

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    room = args.max_length - 2
    lengths = [min(len(ids), room) + 2 for ids in encoder.tokenize(texts)]
    flops, tokens = encode_flops(encoder.model.config, lengths), sum(lengths)
    # bf16 on CUDA: a square matmul (the chip) and a MiniLM FFN layer over 16,384 tokens;
    # fp32 on a CPU (the dry run): the FFN layer over 4,096 tokens
    peaks = (
        {
            "square_8192": matmul_peak_tflops(device, 8192, 8192, 8192),
            "ffn_16384x384x1536": matmul_peak_tflops(device, 16384, 384, 1536),
        }
        if device == "cuda"
        else {"ffn_4096x384x1536": matmul_peak_tflops(device, 4096, 384, 1536, 5)}
    )
    peak = max(peaks.values())
    name = torch.cuda.get_device_name(0) if device == "cuda" else ""
    nominal = next((v for k, v in NOMINAL_BF16_TFLOPS.items() if k in name), None)

    def row(times: list[float]) -> dict:
        out = rate(len(texts), times)
        best = min(times)
        out.update(
            tokens_per_s=round(tokens / best, 1),
            tflops=round(flops / best / 1e12, 4),
            peak_share=round(flops / best / 1e12 / peak, 4),
        )
        if nominal:
            out["nominal_peak_share"] = round(flops / best / 1e12 / nominal, 4)
        return out

    ours = {}
    for budget in args.batch_tokens:
        enc = (
            encoder
            if budget == encoder.config.batch_tokens
            else Encoder(
                ModelConfig(
                    name=str(model_dir),
                    device=device,
                    dtype=encoder.config.dtype,
                    max_length=args.max_length,
                    batch_tokens=budget,
                )
            )
        )
        vectors, times = timed(lambda enc=enc: enc.encode_texts(texts), args.repeats, sync)
        ours[f"batch_tokens_{budget}"] = row(times)
        del enc
    st_dtype = torch.float16 if device == "cuda" else torch.float32
    st = SentenceTransformer(str(model_dir), device=device).to(st_dtype)
    st.max_seq_length = args.max_length
    theirs, st_vectors = {}, None
    for batch in args.st_batch_sizes:
        st_vectors, times = timed(
            lambda batch=batch: st.encode(
                texts, batch_size=batch, convert_to_tensor=True, show_progress_bar=False
            ),
            args.repeats,
            sync,
        )
        theirs[f"batch_size_{batch}"] = row(times)
    # normalised here too: a model directory without a Normalize module gives raw means
    cos = (
        torch.as_tensor(vectors) * torch.nn.functional.normalize(st_vectors.float().cpu(), dim=-1)
    ).sum(dim=1)
    best_ours = max(ours.values(), key=lambda r: r["per_s"])
    best_st = max(theirs.values(), key=lambda r: r["per_s"])
    ratio = round(best_ours["per_s"] / best_st["per_s"], 3)
    report = {
        "passages": len(texts),
        "tokens": tokens,
        "max_length": args.max_length,
        "gflop_per_passage": round(flops / len(texts) / 1e9, 3),
        "flops_count": "README/docs: per layer 2·t·(4h² + 2hf) + 4t²h, t real tokens",
        "peak_tflops_measured": peaks,
        "peak_used_tflops": peak,
        "peak_tflops_nominal": nominal,
        "bertindex": {"dtype": encoder.path.dtype, **ours},
        "sentence_transformers": {"dtype": str(st_dtype).removeprefix("torch."), **theirs},
        "ratio_best_vs_best": ratio,
        "min_cosine_bertindex_vs_sentence_transformers": round(float(cos.min()), 5),
    }
    if device == "cuda":
        report["goals"] = {
            "ratio": GOAL_RATIO,
            "passages_per_s": GOAL_PASSAGES_PER_S,
            "passed": ratio >= GOAL_RATIO and best_ours["per_s"] >= GOAL_PASSAGES_PER_S,
        }
    return report


def assemble_head(pack: Path, model_dir: Path, dest: Path) -> Path:
    """A whole transformers head directory from the pack: the packaged backbone's weights
    (`model/`, upcast to fp32) under the head's prefix, then the head's own tensors."""
    import shutil

    from safetensors.torch import load_file, save_file

    head = need(pack, HEAD)
    prefix = json.loads(need(pack, HEAD_INFO).read_text())["prefix"]
    tensors = {
        prefix + k: v.float()
        for k, v in load_file(model_dir / "model.safetensors").items()
        if v.is_floating_point()
    }  # buffers (int position ids): the model builds its own
    tensors.update(load_file(need(pack, HEAD_TENSORS)))
    dest.mkdir(parents=True, exist_ok=True)
    for path in head.iterdir():
        if path.is_file() and path.name not in (Path(HEAD_TENSORS).name, Path(HEAD_INFO).name):
            shutil.copy2(path, dest / path.name)
    save_file(
        {k: v.contiguous() for k, v in tensors.items()},
        dest / "model.safetensors",
        metadata={"format": "pt"},
    )
    return dest


def annotate(args, pack: Path, model_dir: Path, tweets: list[str], device: str, tmp: Path) -> dict:
    """(c): one classifier head over the tweets, bertindex's Annotator against transformers'
    `pipeline("text-classification")` (fp32, the default, and fp16 on CUDA), both warm."""
    import torch
    from transformers import pipeline

    from indexer.annotate.annotator import Annotator, load_heads

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    head_dir = assemble_head(pack, model_dir, tmp / "head")
    annotator = Annotator(
        load_heads([str(head_dir)]),
        dtype="bf16" if device == "cuda" else "fp32",
        device=device,
        max_length=args.max_length,
    )
    anns, times = timed(lambda: annotator.annotate(tweets), args.repeats, sync)
    ours = [a.labels[0].label for a in anns]
    report = {
        "tweets": len(tweets),
        "head": json.loads((pack / HEAD_INFO).read_text()).get("source"),
        "bertindex": {"dtype": annotator.dtype_name, **rate(len(tweets), times)},
    }
    dtypes = [torch.float32, torch.float16] if device == "cuda" else [torch.float32]
    for dtype in dtypes:
        pipe = pipeline(
            "text-classification",
            model=str(head_dir),
            device=0 if device == "cuda" else -1,
            dtype=dtype,
        )
        out, times = timed(
            lambda pipe=pipe: pipe(tweets, batch_size=args.pipeline_batch_size), args.repeats, sync
        )
        name = str(dtype).removeprefix("torch.")
        report[f"pipeline_{name}"] = {
            "batch_size": args.pipeline_batch_size,
            **rate(len(tweets), times),
            "label_agreement": round(
                sum(o["label"] == t for o, t in zip(out, ours)) / len(ours), 4
            ),
        }
        del pipe
    best = max(v["per_s"] for k, v in report.items() if k.startswith("pipeline_"))
    report["ratio_vs_best_pipeline"] = round(report["bertindex"]["per_s"] / best, 3)
    return report


def faiss_section(device: str) -> dict:
    """(d): faiss on the GPU where a build with GPUs is importable, else what was tried."""
    try:
        faiss = importlib.import_module("faiss")
    except ImportError:
        return {
            "ran": False,
            "why": "faiss is not installed here and no wheel could be carried",
            "tried": FAISS_TRIED,
        }
    gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    return {
        "ran": False,
        "faiss": faiss.__version__,
        "gpus": gpus,
        "why": "a faiss build is importable, but this check has no 1M-vector GPU build step: "
        "it was written for the image without faiss",
        "tried": FAISS_TRIED,
    }


def run(args) -> dict:
    """Every section in order; a failing section is reported (error and traceback) and the
    next one still runs. Returns the report, also written to `args.out` after each section."""
    import numpy as np

    pack = args.pack
    report: dict = {
        "check": "gpu_check",
        "issue": 31,
        "pack": str(pack),
        "wheels_installed": ensure_wheels(pack),
    }
    report["pack_manifest"] = {
        k: v for k, v in json.loads(need(pack, MANIFEST).read_text()).items() if k != "files"
    }
    report["machine"] = device_info(args.device)
    start = time.perf_counter()

    def save():
        report["wall_s"] = round(time.perf_counter() - start, 1)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1) + "\n")

    def section(name: str, fn):
        t0 = time.perf_counter()
        try:
            report[name] = fn()
        except Exception as exc:  # noqa: BLE001 - one report of the whole run, the error in it
            report[name] = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=8),
            }
        report[name]["section_s"] = round(time.perf_counter() - t0, 1)
        save()

    from indexer.config import ModelConfig
    from indexer.encode.encoder import Encoder

    model_dir = need(pack, MODEL)
    ids, texts = document_texts(need(pack, CORPUS), args.limit)
    info = json.loads(need(pack, REFERENCE_INFO).read_text())
    if info["max_length"] != args.max_length:
        raise PackError(
            f"{pack / REFERENCE_INFO}: reference vectors of max length "
            f"{info['max_length']}, not {args.max_length}; pass --max-length "
            f"{info['max_length']} or rebuild the pack with --max-length {args.max_length}"
        )
    if info["ids"][: len(ids)] != ids:
        raise PackError(
            f"{pack / REFERENCE}: its rows are not the corpus's documents in order "
            f"({pack / CORPUS}); rebuild the pack"
        )
    reference = np.load(need(pack, REFERENCE))[: len(ids)]
    encoder = Encoder(
        ModelConfig(
            name=str(model_dir),
            device=args.device,
            dtype="bf16" if args.device == "cuda" else "fp32",
            max_length=args.max_length,
        )
    )
    section("correctness", lambda: correctness(encoder, texts, ids, reference))
    section("speed", lambda: speed(args, model_dir, texts, encoder, args.device))
    tweets = [t for t in need(pack, TWEETS).read_text(encoding="utf-8").split("\n") if t][
        : args.limit
    ]
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        section("annotate", lambda: annotate(args, pack, model_dir, tweets, args.device, Path(tmp)))
    section("faiss", lambda: faiss_section(args.device))
    report["ok"] = report["correctness"].get("passed") is True and not any(
        "error" in report[s] for s in ("speed", "annotate", "faiss")
    )
    save()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", type=Path, default=ROOT / "gpu-pack", help="the pack folder")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help="the first N documents and N tweets (default: all of the pack's)",
    )
    parser.add_argument(
        "--max-length",
        type=int,
        default=MAX_LENGTH,
        help="tokens per passage (256: the issue's; the pack's reference must match)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed passes after the warm one")
    parser.add_argument(
        "--batch-tokens",
        type=int,
        nargs="+",
        default=[16384, 65536],
        help="bertindex token budgets to time (16384: the default config)",
    )
    parser.add_argument(
        "--st-batch-sizes",
        type=int,
        nargs="+",
        default=[32, 256],
        help="sentence-transformers batch sizes to time (32: its default)",
    )
    parser.add_argument("--pipeline-batch-size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON report here too")
    args = parser.parse_args(argv)
    try:
        report = run(args)
    except PackError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
