"""Tasks run at the end of the index and annotate flows: place new documents into the stored
near-duplicate groups (`dedup.keep_current`), and after an annotate run write the scheduled
report (`schedules.report`). Thin wrappers over `indexer.dedup` and `indexer.report`."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

import flows  # noqa: F401  (Prefect settings first)
from flows.retry import transient
from indexer.config import Config
from indexer.dedup.groups import keep_current
from indexer.report.trends import write_scheduled_report


@task(
    name="keep_dedup_current",
    cache_policy=NONE,
    retries=2,
    retry_delay_seconds=1,
    retry_condition_fn=transient,
)
def keep_dedup_current(config: Config) -> dict:
    """Groups of every collection grouped before, brought up to date ({collection: summary})."""
    return keep_current(config)


@task(
    name="write_report",
    cache_policy=NONE,
    retries=2,
    retry_delay_seconds=1,
    retry_condition_fn=transient,
)
def write_report(config: Config) -> dict | None:
    """report.json and report.html in `schedules.report.folder` (None: not scheduled)."""
    return write_scheduled_report(config)
