"""Prefect flow `annotate`: load heads → annotate (the store, files, or an inbox folder) →
publish a snapshot so that searches see the labels.

Store mode annotates every document that misses a head at its current version (a second run
does nothing). File mode writes `--out` and leaves the store alone. Inbox mode takes each new
file in a folder through index → annotate, recorded in the `inbox_ledger` table: 'started' is
committed before the work and 'done' after it, so a file is processed once, and a run killed
part way redoes its 'started' files (indexing and annotating are idempotent). When the heads'
backbone is the index's encoder, one pass per batch gives both the vectors and the labels
(`SharedPass`). With `runner: dask` the heads (store and inbox modes) and the inbox's encoding
run on the cluster's workers (`flows.cluster`) and this process stays the only writer; file
mode (`--out`) runs here.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NONE

import flows  # noqa: F401  (Prefect settings first)
from flows.cluster import annotate_pass, maybe_cluster, run_index_on_cluster
from flows.streams import keep_dedup_current, write_report
from indexer.annotate.annotator import Annotator, load_heads
from indexer.annotate.files import annotate_files
from indexer.annotate.store_pass import annotate_and_publish
from indexer.config import Config
from indexer.errors import InputError
from indexer.faults import crash_point
from indexer.fsio import file_sha256
from indexer.indexing.run import Steps as IndexSteps
from indexer.indexing.run import run_index
from indexer.indexing.steps import BatchPlan, BatchResult, commit_batch
from indexer.ingest.formats import corpus_format
from indexer.ingest.paths import escape_reason, real, within
from indexer.ingest.readers import document_text
from indexer.progress import ProgressArg
from indexer.store import Store, new_run_id

log = logging.getLogger(__name__)


def build_annotator(head_args: list[str], config: Config) -> Annotator:
    """Heads plus the encoder settings of the configuration (dtype, device, windows, budget)."""
    return Annotator.for_config(load_heads(head_args), config)


@task(cache_policy=NONE)
def load_annotator(head_args: list[str], config: Config) -> Annotator:
    return build_annotator(head_args, config)


@task(cache_policy=NONE, retries=2, retry_delay_seconds=1)
def annotate_in_store(annotator: Annotator, config: Config, collection: str | None,
                      progress: ProgressArg, on_cluster: Callable | None = None) -> dict:
    """Annotate what is missing, then publish a snapshot with the new labels (`on_cluster`:
    the pass on the cluster's workers, `flows.cluster.annotate_pass`)."""
    return annotate_and_publish(annotator, config, collection, progress, annotate=on_cluster)


@task(cache_policy=NONE)
def annotate_to_file(annotator: Annotator, paths: list[str], out: str,
                     progress: ProgressArg = False) -> dict:
    return annotate_files(paths, annotator, Path(out), progress=progress)


class SharedPass:
    """The inbox's index steps when the heads share the index's encoder
    (`Annotator.share_embedding`): each batch's one backbone pass gives its vectors and its
    labels, and the labels are written right after the batch's documents.

    Only documents whose indexed text is their text take their labels here: the index encodes
    `title + " " + text`, the heads read `text`. Titled documents (and any that a crash left
    between the two writes) are labelled by the store pass that follows each file.
    """

    def __init__(self, annotator: Annotator):
        self.annotator = annotator
        self.annotated = 0

    def encode(self, texts: list[str], config: Config, encoder, progress: ProgressArg):
        return self.annotator.annotate_and_embed(texts)

    def commit(self, plan: BatchPlan, encoded, store: Store, run_id: str) -> BatchResult:
        annotations, chunks = encoded
        result = commit_batch(plan, chunks, store, run_id)
        same = [(doc, a) for doc, a in zip(plan.to_encode, annotations)
                if document_text(doc[1]) == doc[1].text]
        if same:
            store.write_annotations([(d, r.text, h) for (d, r, h), _ in same],
                              [a for _, a in same], self.annotator.versions())
        self.annotated += len(same)
        return result

    def index_steps(self) -> IndexSteps:
        return IndexSteps(encode=self.encode, commit=self.commit)


@task(cache_policy=NONE, retries=2, retry_delay_seconds=1)
def index_file(path: str, config: Config, collection: str, progress: ProgressArg,
               shared: SharedPass | None = None, client=None) -> dict:
    if client is not None:  # runner: dask
        return run_index_on_cluster(client, [path], config, collection, progress=progress)
    steps = shared.index_steps() if shared is not None else None
    return run_index([path], config, collection, progress=progress, steps=steps)


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
    return Steps(load_annotator,
                 functools.partial(annotate_in_store,
                                   on_cluster=annotate_pass(client, head_args, config)),
                 annotate_to_file, functools.partial(index_file, client=client))


# `bertindex annotate` runs `annotate_flow`; a `schedules.annotate` entry of config.yaml runs
# `annotate_scheduled` (`bertindex flows serve`), which re-reads the config file each run.
@flow(name="annotate", log_prints=False)
def annotate_flow(head_args: list[str], config: Config, collection: str | None = None,
             paths: list[str] | None = None, out: str | None = None, inbox: str | None = None,
             progress: ProgressArg = False) -> dict:
    """Run heads over the store, files (`paths` + `out`) or an inbox folder; see the module."""
    with maybe_cluster(config) as client:
        summary = run_annotate(head_args, config, collection, paths, out, inbox, progress,
                               steps=flow_steps(head_args, config, client))
    return summary | after_annotate(config, stored=not paths)


@flow(name="annotate_scheduled", log_prints=False)
def annotate_scheduled(config_path: str | None, store_path: str, heads: list[str],
                       inbox: str | None = None, collection: str | None = None) -> dict:
    """Scheduled `annotate` (`schedules.annotate` in config.yaml): the inbox's new files
    through index → annotate, or without an inbox the stored documents that miss a head."""
    from indexer.config import load_config

    config = load_config(config_path).with_overrides(**{"store.path": store_path})
    with maybe_cluster(config) as client:
        summary = run_annotate(heads, config, collection, inbox=inbox,
                               steps=flow_steps(heads, config, client))
    return summary | after_annotate(config, stored=True)


def after_annotate(config: Config, stored: bool) -> dict:
    """Once the store's documents are annotated: dedup groups brought up to date, then the
    scheduled report written (nothing when only files were annotated)."""
    if not stored:
        return {}
    return {"dedup": keep_dedup_current(config), "report": write_report(config)}


def run_annotate(head_args: list[str], config: Config, collection: str | None = None,
                 paths: list[str] | None = None, out: str | None = None,
                 inbox: str | None = None, progress: ProgressArg = False, *,
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
        summary = steps.annotate_files(annotator, paths, out, progress)
    else:
        summary = steps.annotate_store(annotator, config, collection, progress)
    done = time.perf_counter()
    work = summary.get("annotated", 0)
    summary["seconds"] = round(done - loaded, 3)
    summary["load_seconds"] = round(loaded - started, 3)
    summary["docs_per_second"] = round(work / (done - loaded), 1) if done > loaded else None
    return summary


def file_hash(path: Path) -> str:
    """An inbox file's ledger key: its content, so a renamed or touched file is not redone."""
    return file_sha256(path)[:32]


def inbox_entries(folder: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """(corpus files of `folder` to process, oldest first; (entry, reason) refused).

    The inbox folder is the root of its files: an entry that resolves outside it (a symbolic
    link to another place, or through a linked folder) is refused, never read; a link to a
    file inside the folder is returned as the file it points to.
    """
    if not folder.is_dir():
        raise InputError(f"--inbox {folder}: not a directory")
    found, refused, seen = [], [], set()
    for entry in folder.iterdir():
        if entry.name.startswith(".") or corpus_format(entry) is None:
            continue
        if not within(entry, folder):
            refused.append((entry, "refused: " + escape_reason(
                entry, folder, "the inbox folder",
                fix="copy the file into the inbox instead of linking to it")))
            continue
        target = real(entry) if entry.is_symlink() else entry
        if target.is_file() and real(target) not in seen:
            seen.add(real(target))
            found.append(target)
    found.sort(key=lambda p: (p.stat().st_mtime, p.name))
    return found, refused


def run_inbox(folder: Path, annotator: Annotator, config: Config, collection: str,
              progress: ProgressArg, steps: Steps) -> dict:
    """Index and annotate each file of the inbox not yet 'done' in the ledger."""
    run_id = new_run_id()  # the ledger rows of this inbox pass
    files, rejections = [], []
    totals = {"read": 0, "rejected": 0, "annotated": 0, "skipped_files": 0,
              "refused_files": 0}
    shared: SharedPass | None = None
    separate: str | None = None  # why the index runs its own pass
    if config.roots.data is not None and not within(folder, config.roots.data):
        raise InputError("--inbox " + escape_reason(folder, config.roots.data, "roots.data"))
    accepted, refused = inbox_entries(folder)
    for entry, reason in refused:
        log.warning("inbox %s", reason)
        totals["refused_files"] += 1
        files.append({"path": str(entry), "status": "refused", "reason": reason})
        rejections.append({"source": str(entry), "row": 0, "id": None, "reason": reason})
    for path in accepted:
        digest = file_hash(path)
        with Store(Path(config.store.path)) as store:
            status = store.ledger_status(digest)
            if status == "done":
                totals["skipped_files"] += 1
                files.append({"path": str(path), "content_hash": digest, "status": "skipped"})
                continue
            store.ledger_start(digest, str(path), run_id)  # committed before the work
        crash_point("inbox.after_start")
        if config.runner == "dask" and separate is None:  # the workers encode, not this process
            separate = "runner: dask: the workers index the file, then run the heads"
        if shared is None and separate is None:  # decided once, at the first file to index
            from indexer.encode.encoder import load_encoder  # the index's own (cached) encoder

            separate = annotator.share_embedding(load_encoder(config.model), config)
            if separate is None:
                shared = SharedPass(annotator)
                log.info("inbox: one encoder pass per batch gives the vectors and the labels")
            else:
                log.info("inbox: the index and the heads run separate passes: %s", separate)
        before = shared.annotated if shared is not None else 0
        indexed = steps.index_file(str(path), config, collection, progress, shared)
        in_pass = (shared.annotated if shared is not None else 0) - before
        annotated = steps.annotate_store(annotator, config, collection, progress)
        count = in_pass + annotated["annotated"]
        rows = indexed["read"]
        with Store(Path(config.store.path)) as store:
            store.ledger_done(digest, rows, {"index": {k: indexed[k] for k in (
                "read", "encoded", "skipped_unchanged", "rejected", "chunks")},
                "annotated": count})
        totals["read"] += rows
        totals["rejected"] += indexed["rejected"]
        totals["annotated"] += count
        rejections.extend(indexed["rejections"])
        files.append({"path": str(path), "content_hash": digest, "rows": rows,
                      "rejected": indexed["rejected"], "annotated": count,
                      "status": "redone" if status == "started" else "done"})
    return totals | {"files": files, "rejections": rejections[:100],
                     "heads": annotator.versions(), "dtype": annotator.dtype_name,
                     "collection": collection, "shared_pass": shared is not None,
                     "separate_pass_reason": separate}
