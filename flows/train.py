"""Prefect flow `train_head`: read → load base → encode (refuse over-long) → fit → score →
baseline → save. Each task is a thin call into `indexer.heads`; runs in process.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

import flows  # noqa: F401  (applies the project's Prefect settings)
from indexer.heads import data as head_data
from indexer.heads import train as head_train
from indexer.heads.data import HeadData
from indexer.heads.features import Encoded
from indexer.heads.train import FitResult, TrainSettings


@task(cache_policy=NO_CACHE)
def read_splits(task_name: str, data: str, validation: str | None, test: str | None, fmt: str) -> HeadData:
    splits = head_data.read_head_data(task_name, data, validation, test, fmt)
    head_data.require_splits(splits, "train", "validation")
    return splits


@task(cache_policy=NO_CACHE)
def load_base(settings: TrainSettings, label_names: list[str]):
    head_train.check_out_dir_for(settings)
    return head_train.load_base(settings, label_names)


@task(cache_policy=NO_CACHE)
def encode(tokenizer, splits: HeadData, max_length: int) -> dict[str, Encoded]:
    return head_train.encode_splits(tokenizer, splits, max_length)


@task(cache_policy=NO_CACHE)
def fit(model, tokenizer, splits: HeadData, encoded: dict[str, Encoded], settings: TrainSettings,
        progress: bool) -> FitResult:
    return head_train.fit(model, tokenizer, splits, encoded, settings, progress=progress)


@task(cache_policy=NO_CACHE)
def score(model, tokenizer, splits: HeadData, encoded: dict[str, Encoded], split: str) -> dict | None:
    if split not in splits.splits:
        return None
    return head_train.score_split(model, tokenizer, splits, encoded, split)


@task(cache_policy=NO_CACHE)
def baseline(splits: HeadData, seed: int) -> dict | None:
    return head_train.run_baseline(splits, seed)


@task(cache_policy=NO_CACHE, retries=1)
def save(model, tokenizer, receipt: dict, out: Path) -> Path:
    from indexer.heads.receipt import save_head_dir

    return save_head_dir(model, tokenizer, receipt, out)


@flow(name="train_head", log_prints=False)
def train_head(
    settings: TrainSettings,
    data: str,
    validation: str | None = None,
    test: str | None = None,
    fmt: str = "auto",
    progress: bool = False,
) -> dict:
    """Fine-tune a head on the base encoder and save it; returns the run receipt."""
    threads = head_train.set_threads(settings.threads)
    splits = read_splits(settings.task, data, validation, test, fmt)
    model, tokenizer = load_base(settings, splits.label_names)
    encoded = encode(tokenizer, splits, settings.max_length)
    fitted = fit(model, tokenizer, splits, encoded, settings, progress)
    val_scores = score(model, tokenizer, splits, encoded, "validation")
    test_scores = score(model, tokenizer, splits, encoded, "test")
    base_scores = baseline(splits, settings.seed)
    receipt = head_train.build_receipt(settings, splits, fitted, val_scores, test_scores, base_scores, threads)
    save(model, tokenizer, receipt, Path(settings.out))
    return receipt
