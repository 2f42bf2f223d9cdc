"""Prefect flow `reindex`: bring the store to the configured encoder. Another encoder: every
document re-encoded into a new store generation, then an atomic switch; the same encoder: the
FAISS index rebuilt from the stored vectors. See `indexer.ops.reindex`.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NONE

import flows  # noqa: F401  (Prefect settings first)
from flows.retry import transient
from indexer.config import Config
from indexer.core.progress import ProgressArg
from indexer.core.timeutil import utc_now
from indexer.encode.encoder import load_encoder
from indexer.index.keyword import sync_keyword_index
from indexer.ops.reindex import reindex_store
from indexer.store import Store


@task(cache_policy=NONE, retries=1, retry_delay_seconds=5, retry_condition_fn=transient)
def reindex_task(config: Config, batch_size: int, progress: ProgressArg) -> dict:
    return run_reindex(config, batch_size, progress)


@flow(name="reindex", log_prints=False)
def reindex(config: Config, batch_size: int = 2048) -> dict:
    """Re-encode into a new generation and switch, or rebuild the index (same encoder)."""
    return reindex_task(config, batch_size, False)


def run_reindex(config: Config, batch_size: int = 2048, progress: ProgressArg = False) -> dict:
    """The flow's work without Prefect (what `bertindex reindex` runs).

    Returns:
        {"mode", "documents", "encoded", "index", "keyword"}.
    """
    started = utc_now()
    summary = reindex_store(config, load_encoder(config.model), batch_size, progress)
    # recorded once the store holds the new generation (the switch replaced its file)
    with (
        Store(Path(config.store.path)) as store,
        store.runs.recorded_run("reindex", started=started) as run,
    ):
        summary["keyword"] = sync_keyword_index(
            store, config.keyword.language
        )  # doc ids kept: the keyword index holds
        run.summary = summary
    return summary
