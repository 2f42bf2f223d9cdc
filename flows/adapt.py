"""Prefect flow `adapt_encoder`: read the unlabelled text (corpus files or a store
collection) → `indexer.adapt.run.adapt` (continued masked-LM pretraining, resumable). No
training logic here; runs in process.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

import flows  # noqa: F401  (applies the project's Prefect settings)
from flows.retry import transient
from indexer.adapt import corpus
from indexer.adapt import run as adapt_run
from indexer.adapt.run import AdaptSettings
from indexer.core.progress import ProgressArg


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=1, retry_condition_fn=transient)
def read_texts(
    paths: list[str], fmt: str, store: str | None, collection: str | None, progress: ProgressArg
) -> tuple[list[str], dict]:
    """The texts and their provenance (I/O: retried)."""
    if paths:
        return corpus.read_file_texts(paths, fmt, progress)
    return corpus.read_store_texts(Path(store), collection)


@task(cache_policy=NO_CACHE)
def train(
    texts: list[str], provenance: dict, settings: AdaptSettings, progress: ProgressArg
) -> dict:
    """The library's one adaptation path; not retried (a rerun resumes from its checkpoint)."""
    return adapt_run.adapt(texts, provenance, settings, progress)


@flow(name="adapt_encoder", log_prints=False)
def adapt_encoder(
    settings: AdaptSettings,
    paths: list[str] | None = None,
    fmt: str = "auto",
    store: str | None = None,
    collection: str | None = None,
    progress: ProgressArg = False,
) -> dict:
    """Continue the encoder's masked-LM pretraining on `paths` (or the store's `collection`)
    and save it to `settings.out`; returns the receipt."""
    texts, provenance = read_texts(paths or [], fmt, store, collection, progress)
    return train(texts, provenance, settings, progress)
