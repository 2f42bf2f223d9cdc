"""Prefect flow `annotate`: load heads → annotate (the store, files, or an inbox folder) →
publish a snapshot so that searches see the labels.

Store mode annotates every document that misses a head at its current version (a second run
does nothing). File mode writes `--out` and leaves the store alone. Inbox mode takes each new
file in a folder through index → annotate, recorded in the `inbox_ledger` table: 'started' is
committed before the work and 'done' after it, so a file is processed once, and a run killed
part way redoes its 'started' files (indexing and annotating are idempotent).
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NONE

import flows  # noqa: F401  (Prefect settings first)
from flows.index_corpus import run_index
from indexer.annotate import Annotator, load_heads
from indexer.annotate_files import annotate_files
from indexer.annotation_store import annotate_store, ledger_done, ledger_start, ledger_status
from indexer.config import Config
from indexer.errors import InputError
from indexer.faults import crash_point
from indexer.pipeline import sync_vector_index
from indexer.store import Store

log = logging.getLogger(__name__)

INBOX_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".csv", ".tsv", ".parquet")


def build_annotator(head_args: list[str], config: Config) -> Annotator:
    """Heads plus the encoder settings of the configuration (dtype, device, windows, budget)."""
    m = config.model
    return Annotator(load_heads(head_args), dtype=m.dtype, device=m.device,
                     max_length=m.max_length, stride=config.long_documents.stride,
                     batch_tokens=m.batch_tokens)


@task(cache_policy=NONE)
def load_annotator(head_args: list[str], config: Config) -> Annotator:
    return build_annotator(head_args, config)


@task(cache_policy=NONE, retries=2, retry_delay_seconds=1)
def annotate_in_store(annotator: Annotator, config: Config, collection: str | None,
                      progress: bool) -> dict:
    """Annotate what is missing, then publish a snapshot with the new labels."""
    with Store(Path(config.store.path)) as store:
        base = store.data_version()
        summary = annotate_store(store, annotator, collection, progress=progress)
        summary["index"] = sync_vector_index(store, config, [], [], base)
    return summary


@task(cache_policy=NONE)
def annotate_to_file(annotator: Annotator, paths: list[str], out: str) -> dict:
    return annotate_files(paths, annotator, Path(out))


@task(cache_policy=NONE, retries=2, retry_delay_seconds=1)
def index_file(path: str, config: Config, collection: str, progress: bool) -> dict:
    return run_index([path], config, collection, progress=progress)


@dataclass
class Steps:
    """The flow's steps: Prefect tasks inside the flow, plain functions outside it."""

    load: Callable = load_annotator.fn
    annotate_store: Callable = annotate_in_store.fn
    annotate_files: Callable = annotate_to_file.fn
    index_file: Callable = index_file.fn


# The module attribute is `annotate_flow`, not `annotate`: `flows serve` looks for
# `flows.annotate.annotate(config_path, store_path)` for a scheduled run, which needs the heads
# and the inbox in config.yaml (not there yet), so that schedule stays "skipped" meanwhile.
@flow(name="annotate", log_prints=False)
def annotate_flow(head_args: list[str], config: Config, collection: str | None = None,
             paths: list[str] | None = None, out: str | None = None, inbox: str | None = None,
             progress: bool = False) -> dict:
    """Run heads over the store, files (`paths` + `out`) or an inbox folder; see the module."""
    steps = Steps(load_annotator, annotate_in_store, annotate_to_file, index_file)
    return run_annotate(head_args, config, collection, paths, out, inbox, progress, steps=steps)


def run_annotate(head_args: list[str], config: Config, collection: str | None = None,
                 paths: list[str] | None = None, out: str | None = None,
                 inbox: str | None = None, progress: bool = False, *,
                 steps: Steps | None = None) -> dict:
    """The flow's story, also callable without Prefect.

    Returns:
        The summary: counts, head versions, seconds and documents per second; `files` (inbox).
    """
    steps = steps or Steps()
    if sum(x is not None and x != [] for x in (paths, inbox)) > 1:
        raise InputError("give input files or --inbox DIR, not both")
    if paths and not out:
        raise InputError("annotating files needs --out FILE.jsonl|parquet (the store is "
                         "annotated when no files are given)")
    started = time.perf_counter()
    annotator = steps.load(head_args, config)
    loaded = time.perf_counter()
    if inbox is not None:
        summary = run_inbox(Path(inbox), annotator, config, collection or "default", progress,
                            steps)
    elif paths:
        summary = steps.annotate_files(annotator, paths, out)
    else:
        summary = steps.annotate_store(annotator, config, collection, progress)
    done = time.perf_counter()
    work = summary.get("annotated", 0)
    summary["seconds"] = round(done - loaded, 3)
    summary["load_seconds"] = round(loaded - started, 3)
    summary["docs_per_second"] = round(work / (done - loaded), 1) if done > loaded else None
    return summary


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:32]


def inbox_files(folder: Path) -> list[Path]:
    """Corpus files in `folder`, oldest first; names starting with '.' (uploads still being
    written, then renamed) are left for a later run."""
    if not folder.is_dir():
        raise InputError(f"--inbox {folder}: not a directory")
    found = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
             and p.name.lower().endswith(INBOX_SUFFIXES)]
    return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))


def run_inbox(folder: Path, annotator: Annotator, config: Config, collection: str,
              progress: bool, steps: Steps) -> dict:
    """Index and annotate each file of the inbox not yet 'done' in the ledger."""
    run_id = uuid.uuid4().hex[:12]
    files, rejections = [], []
    totals = {"read": 0, "rejected": 0, "annotated": 0, "skipped_files": 0}
    for path in inbox_files(folder):
        digest = file_hash(path)
        with Store(Path(config.store.path)) as store:
            status = ledger_status(store, digest)
            if status == "done":
                totals["skipped_files"] += 1
                files.append({"path": str(path), "content_hash": digest, "status": "skipped"})
                continue
            ledger_start(store, digest, str(path), run_id)  # committed before the work
        crash_point("inbox.after_start")
        indexed = steps.index_file(str(path), config, collection, progress)
        annotated = steps.annotate_store(annotator, config, collection, progress)
        rows = indexed["read"]
        with Store(Path(config.store.path)) as store:
            ledger_done(store, digest, rows, {"index": {k: indexed[k] for k in (
                "read", "encoded", "skipped_unchanged", "rejected", "chunks")},
                "annotated": annotated["annotated"]})
        totals["read"] += rows
        totals["rejected"] += indexed["rejected"]
        totals["annotated"] += annotated["annotated"]
        rejections.extend(indexed["rejections"])
        files.append({"path": str(path), "content_hash": digest, "rows": rows,
                      "rejected": indexed["rejected"], "annotated": annotated["annotated"],
                      "status": "redone" if status == "started" else "done"})
    return totals | {"files": files, "rejections": rejections[:100],
                     "heads": annotator.versions(), "dtype": annotator.dtype_name,
                     "collection": collection}
