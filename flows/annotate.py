"""Prefect flow `annotate`: load heads → annotate (the store, files, or an inbox folder) →
publish a snapshot so that searches see the labels.

Store mode annotates every document that misses a head at its current version (a second run
does nothing). File mode writes `--out` and leaves the store alone. Inbox mode takes each new
file in a folder through index → annotate once, by the ledger protocol of
`indexer.annotate.inbox.run_inbox`, with this flow's tasks as its two steps. With `runner: dask`
the heads (store and inbox modes) and the inbox's encoding run on the cluster's workers
(`flows.cluster`) and this process stays the only writer; file mode (`--out`) runs here.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NONE

import flows  # noqa: F401  (Prefect settings first)
from flows.cluster import annotate_pass, maybe_cluster, run_index_on_cluster
from flows.retry import transient
from flows.streams import keep_dedup_current, write_report
from indexer.annotate.annotator import Annotator, load_heads
from indexer.annotate.files import annotate_files
from indexer.annotate.inbox import SharedPass, run_inbox
from indexer.annotate.inbox import index_file as index_in_process
from indexer.annotate.store_pass import annotate_and_publish
from indexer.config import Config
from indexer.core.progress import ProgressArg
from indexer.errors import InputError


def build_annotator(head_args: list[str], config: Config) -> Annotator:
    """Heads plus the encoder settings of the configuration (dtype, device, windows, budget)."""
    return Annotator.for_config(load_heads(head_args), config)


@task(cache_policy=NONE)
def load_annotator(head_args: list[str], config: Config) -> Annotator:
    return build_annotator(head_args, config)


@task(cache_policy=NONE, retries=2, retry_delay_seconds=1, retry_condition_fn=transient)
def annotate_in_store(
    annotator: Annotator,
    config: Config,
    collection: str | None,
    progress: ProgressArg,
    on_cluster: Callable | None = None,
) -> dict:
    """Annotate what is missing, then publish a snapshot with the new labels (`on_cluster`:
    the pass on the cluster's workers, `flows.cluster.annotate_pass`)."""
    return annotate_and_publish(annotator, config, collection, progress, annotate=on_cluster)


@task(cache_policy=NONE)
def annotate_to_file(
    annotator: Annotator, paths: list[str], out: str, progress: ProgressArg = False
) -> dict:
    return annotate_files(paths, annotator, Path(out), progress=progress)


@task(cache_policy=NONE, retries=2, retry_delay_seconds=1, retry_condition_fn=transient)
def index_file(
    path: str,
    config: Config,
    collection: str,
    progress: ProgressArg,
    shared: SharedPass | None = None,
    client=None,
) -> dict:
    if client is not None:  # runner: dask
        return run_index_on_cluster(client, [path], config, collection, progress=progress)
    return index_in_process(path, config, collection, progress, shared)


@dataclass
class Steps:
    """The flow's steps: Prefect tasks inside the flow, plain functions outside it."""

    load: Callable = load_annotator.fn
    annotate_store: Callable = annotate_in_store.fn
    annotate_files: Callable = annotate_to_file.fn
    index_file: Callable = index_file.fn


def flow_steps(head_args: list[str], config: Config, client=None) -> Steps:
    """The flow's steps as Prefect tasks; with a cluster `client` (`runner: dask`) the
    inbox's encoding and the store pass's heads run on its workers."""
    if client is None:
        return Steps(load_annotator, annotate_in_store, annotate_to_file, index_file)
    return Steps(
        load_annotator,
        functools.partial(annotate_in_store, on_cluster=annotate_pass(client, head_args, config)),
        annotate_to_file,
        functools.partial(index_file, client=client),
    )


# `bertindex annotate` runs `annotate_flow`; a `schedules.annotate` entry of config.yaml runs
# `annotate_scheduled` (`bertindex flows serve`), which re-reads the config file each run.
@flow(name="annotate", log_prints=False)
def annotate_flow(
    head_args: list[str],
    config: Config,
    collection: str | None = None,
    paths: list[str] | None = None,
    out: str | None = None,
    inbox: str | None = None,
    progress: ProgressArg = False,
) -> dict:
    """Run heads over the store, files (`paths` + `out`) or an inbox folder; see the module."""
    with maybe_cluster(config) as client:
        summary = run_annotate(
            head_args,
            config,
            collection,
            paths,
            out,
            inbox,
            progress,
            steps=flow_steps(head_args, config, client),
        )
    return summary | after_annotate(config, stored=not paths)


@flow(name="annotate_scheduled", log_prints=False)
def annotate_scheduled(
    config_path: str | None,
    store_path: str,
    heads: list[str],
    inbox: str | None = None,
    collection: str | None = None,
) -> dict:
    """Scheduled `annotate` (`schedules.annotate` in config.yaml): the inbox's new files
    through index → annotate, or without an inbox the stored documents that miss a head."""
    from indexer.config import load_config

    config = load_config(config_path).with_overrides(**{"store.path": store_path})
    with maybe_cluster(config) as client:
        summary = run_annotate(
            heads, config, collection, inbox=inbox, steps=flow_steps(heads, config, client)
        )
    return summary | after_annotate(config, stored=True)


def after_annotate(config: Config, stored: bool) -> dict:
    """Once the store's documents are annotated: dedup groups brought up to date, then the
    scheduled report written (nothing when only files were annotated)."""
    if not stored:
        return {}
    return {"dedup": keep_dedup_current(config), "report": write_report(config)}


def run_annotate(
    head_args: list[str],
    config: Config,
    collection: str | None = None,
    paths: list[str] | None = None,
    out: str | None = None,
    inbox: str | None = None,
    progress: ProgressArg = False,
    *,
    steps: Steps | None = None,
) -> dict:
    """The flow's story, also callable without Prefect.

    Returns:
        The summary: counts, head versions, seconds and documents per second; `files` (inbox).
    """
    steps = steps or Steps()
    if sum(x is not None and x != [] for x in (paths, inbox)) > 1:
        raise InputError("give input files or --inbox DIR, not both")
    if paths and not out:
        raise InputError(
            "annotating files needs --out FILE.jsonl|parquet (the store is "
            "annotated when no files are given)"
        )
    started = time.perf_counter()
    annotator = steps.load(head_args, config)
    loaded = time.perf_counter()
    if inbox is not None:
        summary = run_inbox(
            Path(inbox),
            annotator,
            config,
            collection or "default",
            progress,
            index=steps.index_file,
            annotate=steps.annotate_store,
        )
    elif paths:
        summary = steps.annotate_files(annotator, paths, out, progress)
    else:
        summary = steps.annotate_store(annotator, config, collection, progress)
    done = time.perf_counter()
    work = summary.get("annotated", 0)
    summary["seconds"] = round(done - loaded, 3)
    summary["load_seconds"] = round(loaded - started, 3)
    summary["docs_per_second"] = round(work / (done - loaded), 1) if done > loaded else None
    return summary
