"""Prefect flow `train_head`: read the labelled splits → `indexer.heads.train.train_head`
(load base, encode, fit, score, baseline, save). No training logic here; runs in process.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

import flows  # noqa: F401  (applies the project's Prefect settings)
from flows.retry import transient
from indexer.core.progress import ProgressArg
from indexer.heads import train as head_train
from indexer.heads.data import HeadData, read_head_data
from indexer.heads.train import TrainSettings
from indexer.review.training import add_reviewed


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=1, retry_condition_fn=transient)
def read_splits(
    task_name: str, data: str, validation: str | None, test: str | None, fmt: str
) -> HeadData:
    """Read the splits from files (I/O: retried)."""
    return read_head_data(task_name, data, validation, test, fmt)


@task(cache_policy=NO_CACHE)
def train(splits: HeadData, settings: TrainSettings, progress: ProgressArg) -> dict:
    """The library's one training path; not retried (a failed fit is not an I/O hiccup)."""
    return head_train.train_head(splits, settings, progress=progress)


@flow(name="train_head", log_prints=False)
def train_head(
    settings: TrainSettings,
    data: str,
    validation: str | None = None,
    test: str | None = None,
    fmt: str = "auto",
    progress: ProgressArg = False,
    reviewed: str | None = None,
    store: str | None = None,
) -> dict:
    """Fine-tune a head on the base encoder and save it; returns the run receipt.

    `reviewed`: a head whose human labels in `store` join the train split."""
    splits = read_splits(settings.task, data, validation, test, fmt)
    if reviewed:
        splits = add_reviewed(splits, store, reviewed)
    return train(splits, settings, progress)
