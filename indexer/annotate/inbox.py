"""The inbox protocol: each new file of a folder goes through index -> annotate once, recorded
in the store's `inbox_ledger`: 'started' is committed before the work and 'done' after it, so a
run killed part way redoes its 'started' files (indexing and annotating are idempotent). When
the heads' backbone is the index's encoder, one pass per batch gives both the vectors and the
labels (`SharedPass`). The two steps are arguments, so a flow can run them as its tasks or on a
cluster (`flows.annotate`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from indexer.annotate.annotator import Annotator
from indexer.annotate.store_pass import annotate_and_publish
from indexer.config import Config
from indexer.core.faults import crash_point
from indexer.core.fsio import file_sha256
from indexer.core.progress import ProgressArg
from indexer.encode.encoder import load_encoder
from indexer.errors import InputError
from indexer.indexing.run import Steps as IndexSteps
from indexer.indexing.run import run_index
from indexer.indexing.steps import BatchPlan, BatchResult, commit_batch
from indexer.ingest.formats import corpus_format
from indexer.ingest.paths import escape_reason, real, within
from indexer.ingest.readers import document_text
from indexer.store import Store, new_run_id

log = logging.getLogger(__name__)


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
        same = [
            (doc, a)
            for doc, a in zip(plan.to_encode, annotations)
            if document_text(doc[1]) == doc[1].text
        ]
        if same:
            store.annotations.write(
                [(d, r.text, h) for (d, r, h), _ in same],
                [a for _, a in same],
                self.annotator.versions(),
            )
        self.annotated += len(same)
        return result

    def index_steps(self) -> IndexSteps:
        return IndexSteps(encode=self.encode, commit=self.commit)


def index_file(
    path: str,
    config: Config,
    collection: str,
    progress: ProgressArg,
    shared: SharedPass | None = None,
) -> dict:
    """Index one inbox file in this process (with the shared pass's steps when there is one)."""
    steps = shared.index_steps() if shared is not None else None
    return run_index([path], config, collection, progress=progress, steps=steps)


def annotate_store(
    annotator: Annotator, config: Config, collection: str | None, progress: ProgressArg
) -> dict:
    """Annotate what the store misses and publish a snapshot, in this process."""
    return annotate_and_publish(annotator, config, collection, progress)


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
            refused.append(
                (
                    entry,
                    "refused: "
                    + escape_reason(
                        entry,
                        folder,
                        "the inbox folder",
                        fix="copy the file into the inbox instead of linking to it",
                    ),
                )
            )
            continue
        target = real(entry) if entry.is_symlink() else entry
        if target.is_file() and real(target) not in seen:
            seen.add(real(target))
            found.append(target)
    found.sort(key=lambda p: (p.stat().st_mtime, p.name))
    return found, refused


def run_inbox(
    folder: Path,
    annotator: Annotator,
    config: Config,
    collection: str,
    progress: ProgressArg = False,
    *,
    index: Callable = index_file,
    annotate: Callable = annotate_store,
) -> dict:
    """Index and annotate each file of the inbox not yet 'done' in the ledger.

    Args:
        folder: the inbox (inside `roots.data` when that is set).
        annotator: the heads.
        config: the configuration.
        collection: where the files' documents go.
        index: indexes one file, as `index_file` (a flow's task, or on a cluster's workers).
        annotate: annotates the store after each file, as `annotate_store`.
    Returns:
        Counts, `files` (each file's status), `rejections`, the heads' versions, and whether
        the index and the heads shared one pass (else why not).
    """
    run_id = new_run_id()  # the ledger rows of this inbox pass
    files, rejections = [], []
    totals = {"read": 0, "rejected": 0, "annotated": 0, "skipped_files": 0, "refused_files": 0}
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
        status = _claim(config, digest, path, run_id)
        if status == "done":
            totals["skipped_files"] += 1
            files.append({"path": str(path), "content_hash": digest, "status": "skipped"})
            continue
        crash_point("inbox.after_start")
        if shared is None and separate is None:  # decided once, at the first file to index
            shared, separate = _choose_pass(annotator, config)
        before = shared.annotated if shared is not None else 0
        indexed = index(str(path), config, collection, progress, shared)
        in_pass = (shared.annotated if shared is not None else 0) - before
        count = in_pass + annotate(annotator, config, collection, progress)["annotated"]
        _finish_file(config, digest, indexed, count)
        totals["read"] += indexed["read"]
        totals["rejected"] += indexed["rejected"]
        totals["annotated"] += count
        rejections.extend(indexed["rejections"])
        files.append(
            {
                "path": str(path),
                "content_hash": digest,
                "rows": indexed["read"],
                "rejected": indexed["rejected"],
                "annotated": count,
                "status": "redone" if status == "started" else "done",
            }
        )
    return totals | {
        "files": files,
        "rejections": rejections[:100],
        "heads": annotator.versions(),
        "dtype": annotator.dtype_name,
        "collection": collection,
        "shared_pass": shared is not None,
        "separate_pass_reason": separate,
    }


def _claim(config: Config, digest: str, path: Path, run_id: str) -> str | None:
    """The file's ledger status before this pass; unless done, it is marked started (committed
    before the work, so a killed pass redoes it)."""
    with Store(Path(config.store.path)) as store:
        status = store.annotations.ledger_status(digest)
        if status != "done":
            store.annotations.ledger_start(digest, str(path), run_id)
    return status


def _choose_pass(annotator: Annotator, config: Config) -> tuple[SharedPass | None, str | None]:
    """One encoder pass for the vectors and the labels (a SharedPass), or why not."""
    if config.runner == "dask":  # the workers encode, not this process
        return None, "runner: dask: the workers index the file, then run the heads"
    separate = annotator.share_embedding(load_encoder(config.model), config)
    if separate is None:
        log.info("inbox: one encoder pass per batch gives the vectors and the labels")
        return SharedPass(annotator), None
    log.info("inbox: the index and the heads run separate passes: %s", separate)
    return None, separate


def _finish_file(config: Config, digest: str, indexed: dict, annotated: int) -> None:
    """Mark the file done in the ledger, with what its index run and the heads did."""
    keys = ("read", "encoded", "skipped_unchanged", "rejected", "chunks")
    with Store(Path(config.store.path)) as store:
        store.annotations.ledger_done(
            digest,
            indexed["read"],
            {"index": {k: indexed[k] for k in keys}, "annotated": annotated},
        )
