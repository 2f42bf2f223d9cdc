"""Build the pack the GPU run (benchmarks/gpu_check.py) reads: a bf16 copy of the model with its
tokenizer and sentence-transformers files, the SciFact corpus, CPU fp32 reference vectors of its
documents, a trained head's own tensors (its backbone is the packaged model's), the tweets, and
the wheels of what the lent GPU image lacks (pydantic); within 64 MiB, size printed.

The reference vectors are cached in the pack: a rebuild with the same model, documents and max
length keeps them (encoding 5,183 abstracts on this CPU takes minutes). Does not train the head
(`make gpu-pack` runs `bertindex train classifier --head-only` first) and holds no code: the
run uses the working tree, which the device tool copies. Usage:
    python benchmarks/gpu_pack.py --out gpu-pack --head .bench/gpu-head-offensive
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from gpu_check import (
    CORPUS,
    HEAD,
    HEAD_INFO,
    HEAD_TENSORS,
    MANIFEST,
    MAX_LENGTH,
    MODEL,
    REFERENCE,
    REFERENCE_INFO,
    TWEETS,
    WHEELS,
    PackError,
    document_texts,
)

SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
MAX_MIB = 64  # what the device tool carries, the working tree included
# packages the encoder and heads import that the lent GPU image lacks (see KINDS.md there);
# typing_extensions rides along because pydantic needs a recent one
WHEEL_PACKAGES = (
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_inspection",
    "typing_extensions",
)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".h5", ".msgpack")
SKIP_FILES = {"README.md", ".gitattributes", "data_config.json"}


def copy_model_bf16(source: Path, dest: Path) -> str:
    """`dest`: the model's tensors in bf16 (model.safetensors) and every small file beside them.

    Returns:
        The source's weights hash; unchanged when `dest` already holds a copy of it.
    """
    import torch
    from safetensors.torch import load_file, save_file

    from indexer.records.provenance import weights_hash

    digest = weights_hash(source)
    stamp = dest / "bf16-source.json"
    if stamp.is_file() and json.loads(stamp.read_text()).get("weights_hash") == digest:
        return digest
    if not (source / "model.safetensors").is_file():
        raise PackError(
            f"{source}: no model.safetensors; give --model a safetensors model directory"
        )
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for path in source.rglob("*"):
        rel = path.relative_to(source)
        if (
            path.is_file()
            and path.suffix not in WEIGHT_SUFFIXES
            and path.name not in SKIP_FILES
            and not any(p.startswith(".") or p == "onnx" for p in rel.parts)
        ):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / rel)
    tensors = load_file(source / "model.safetensors")
    save_file(
        {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in tensors.items()},
        dest / "model.safetensors",
        metadata={"format": "pt"},
    )
    config = json.loads((dest / "config.json").read_text())
    for key in [k for k in ("torch_dtype", "dtype") if k in config] or ["torch_dtype"]:
        config[key] = "bfloat16"
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    stamp.write_text(json.dumps({"weights_hash": digest, "source": str(source)}) + "\n")
    return digest


def reference_vectors(
    model: Path,
    digest: str,
    ids: list[str],
    texts: list[str],
    pack: Path,
    max_length: int = MAX_LENGTH,
) -> bool:
    """Write the CPU fp32 vectors of `texts` (float16 on disk) unless the pack holds those of
    the same model, ids and max length. Returns True when they were computed now."""
    import numpy as np

    key = {
        "weights_hash": digest,
        "max_length": max_length,
        "dtype": "fp32",
        "device": "cpu",
        "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
        "texts": "title + ' ' + text",
    }
    info_path, vectors_path = pack / REFERENCE_INFO, pack / REFERENCE
    if info_path.is_file() and vectors_path.is_file():
        old = json.loads(info_path.read_text())
        if {k: old.get(k) for k in key} == key:
            return False
    from indexer.config import ModelConfig
    from indexer.encode.encoder import Encoder

    encoder = Encoder(
        ModelConfig(name=str(model), device="cpu", dtype="fp32", max_length=max_length)
    )
    vectors = encoder.encode_texts(texts, progress=sys.stderr.isatty() or "lines")
    np.save(vectors_path, vectors.astype(np.float16))  # unit vectors: fp16 costs < 1e-6 cosine
    info_path.write_text(json.dumps({**key, "ids": ids, "cpu": _cpu()}) + "\n")
    return True


def split_head(head: Path, model: Path, pack: Path) -> dict:
    """The head's own tensors (those that are not the model's, e.g. pooler and classifier) into
    the pack's HEAD_TENSORS, with its config and tokenizer files (HEAD) and HEAD_INFO.

    Raises:
        PackError: a backbone tensor of the model is missing from the head or differs (a head
            fine-tuned in full carries its own 90 MB backbone, more than the pack holds).
    """
    import torch
    from safetensors.torch import load_file, save_file

    weights = head / "model.safetensors"
    if not weights.is_file():
        raise PackError(
            f"{head}: no model.safetensors; give --head a head directory written by "
            "`bertindex train classifier --head-only`"
        )
    theirs, base = load_file(weights), load_file(model / "model.safetensors")
    probe = "embeddings.word_embeddings.weight"
    prefix = next((k[: -len(probe)] for k in theirs if k.endswith(probe)), None)
    if prefix is None or probe not in base:
        raise PackError(
            f"{head}: no '{probe}' matching {model}'s; is it a BERT head on this model?"
        )
    own = {
        k: v
        for k, v in theirs.items()
        if not (
            k.startswith(prefix)
            and k[len(prefix) :] in base
            and torch.equal(v, base[k[len(prefix) :]].to(v.dtype))
        )
    }
    # buffers (int position ids) are rebuilt by the model, and newer transformers do not save them
    bad = [
        prefix + k
        for k, v in base.items()
        if v.is_floating_point()
        and not k.startswith("pooler.")
        and (prefix + k not in theirs or prefix + k in own)
    ]
    if bad:
        raise PackError(
            f"{head}: backbone tensor {bad[0]} is not {model}'s ({len(bad)} such); the "
            "pack carries head-only heads on the packaged model: train with --head-only"
        )
    dest = pack / HEAD
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for path in head.iterdir():
        if path.is_file() and path.suffix not in WEIGHT_SUFFIXES:
            shutil.copy2(path, dest / path.name)
    save_file(
        {k: v.contiguous() for k, v in own.items()}, pack / HEAD_TENSORS, metadata={"format": "pt"}
    )
    info = {"prefix": prefix, "source": str(head), "own_tensors": sorted(own)}
    (pack / HEAD_INFO).write_text(json.dumps(info, indent=1) + "\n")
    return info


def fetch_wheels(dest: Path) -> list[str]:
    """cp312 manylinux wheels of WHEEL_PACKAGES at the versions installed here (kept when
    present)."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in WHEEL_PACKAGES]
    have = {p.name.lower() for p in dest.glob("*.whl")}
    wanted = [
        pin
        for pin in pins
        if not any(h.startswith(pin.replace("==", "-").lower() + "-") for h in have)
    ]
    if wanted:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--implementation",
                "cp",
                "--platform",
                "manylinux_2_17_x86_64",
                "--platform",
                "manylinux2014_x86_64",
                "-d",
                str(dest),
                *wanted,
            ],
            check=True,
        )
    return sorted(p.name for p in dest.glob("*.whl"))


def tree_bytes() -> int:
    """Bytes of the working tree the device tool sends beside the carried pack (tracked and
    untracked files git does not ignore)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "-co", "--exclude-standard"],
            cwd=ROOT,
            check=False,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    return sum((ROOT / p).stat().st_size for p in listed if p and (ROOT / p).is_file())


def _cpu() -> str:
    from indexer.core.machine import cpu_model

    return cpu_model()


def build(args) -> dict:
    """Write the pack; returns its manifest (files, sizes, total)."""
    from annotate_throughput import load_tweets

    from indexer.config import DEFAULT_MODEL, resolve_model_path

    pack: Path = args.out
    pack.mkdir(parents=True, exist_ok=True)
    source = resolve_model_path(args.model or DEFAULT_MODEL)
    digest = copy_model_bf16(source, pack / MODEL)
    corpus = args.scifact / "corpus.jsonl.gz"
    if not corpus.is_file():
        raise PackError(f"{corpus} not found: give --scifact a BEIR SciFact folder")
    (pack / CORPUS).parent.mkdir(parents=True, exist_ok=True)
    ids, texts = document_texts(corpus, args.limit)
    if args.limit is None:
        shutil.copy2(corpus, pack / CORPUS)
    else:
        with (
            gzip.open(corpus, "rt", encoding="utf-8") as src,
            gzip.open(pack / CORPUS, "wt", encoding="utf-8") as out,
        ):
            out.writelines(line for line, _ in zip(src, range(args.limit)))
    computed = reference_vectors(source, digest, ids, texts, pack, args.max_length)
    head = split_head(args.head, source, pack)
    tweets = load_tweets(args.tweets)
    if len(tweets) < args.tweets:
        raise PackError(
            f"{args.tweets} tweets asked for, TweetEval's test files hold {len(tweets)}"
        )
    (pack / TWEETS).write_text(
        "\n".join(t.replace("\n", " ") for t in tweets) + "\n", encoding="utf-8"
    )
    wheels = [] if args.no_wheels else fetch_wheels(pack / WHEELS)
    files = {
        str(p.relative_to(pack)): p.stat().st_size
        for p in sorted(pack.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    total = sum(files.values())
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
    ).stdout.strip()
    manifest = {
        "built": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "cpu": _cpu(),
        "model": str(source),
        "weights_hash": digest,
        "documents": len(ids),
        "tweets": len(tweets),
        "head": head["source"],
        "head_tensors": head["own_tensors"],
        "wheels": wheels,
        "reference_computed_now": computed,
        "total_bytes": total,
        "total_mib": round(total / 2**20, 2),
        "working_tree_mib": round(tree_bytes() / 2**20, 2),
        "files": files,
    }
    (pack / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if total > args.max_mib * 2**20:
        raise PackError(
            f"{pack}: {total / 2**20:.1f} MiB, over the {args.max_mib} MiB the device "
            "tool carries; use fewer --tweets or --limit"
        )
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-pack", help="the pack folder")
    parser.add_argument(
        "--model", default=None, help="model directory (default: the packaged model)"
    )
    parser.add_argument(
        "--head", type=Path, required=True, help="a --head-only classifier directory"
    )
    parser.add_argument("--scifact", type=Path, default=SCIFACT, help="BEIR SciFact folder")
    parser.add_argument(
        "--limit", type=int, default=None, help="the first N documents (default all)"
    )
    parser.add_argument(
        "--tweets", type=int, default=10_000, help="TweetEval test tweets (seeded sample)"
    )
    parser.add_argument(
        "--max-length",
        type=int,
        default=MAX_LENGTH,
        help="tokens per reference passage (256; the CPU dry run's test: 64)",
    )
    parser.add_argument(
        "--no-wheels", action="store_true", help="carry no wheels (tests; no network)"
    )
    parser.add_argument("--max-mib", type=float, default=MAX_MIB)
    args = parser.parse_args(argv)
    try:
        manifest = build(args)
    except PackError as exc:
        print(f"gpu_pack: {exc}", file=sys.stderr)
        return 1
    print(
        f"{args.out}: {manifest['total_mib']} MiB in {len(manifest['files'])} files "
        f"({manifest['documents']} documents, {manifest['tweets']} tweets; reference vectors "
        f"{'computed' if manifest['reference_computed_now'] else 'cached'}); with the working "
        f"tree ({manifest['working_tree_mib']} MiB) the device tool carries "
        f"{manifest['total_mib'] + manifest['working_tree_mib']:.1f} of its {MAX_MIB} MiB"
    )
    if manifest["total_mib"] + manifest["working_tree_mib"] > MAX_MIB:
        print(
            "gpu_pack: pack and working tree together exceed what the device tool carries; "
            "pass fewer --tweets",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
