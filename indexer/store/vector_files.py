"""Vectors kept as files in the store's folder instead of rows of `vectors`: one `.npy` file
(float32, (rows, dim), the vectors as committed) per large batch under `<store>/vectors/`,
recorded in the `vector_files` table by the transaction that commits the batch's chunks. Row
i of a file is chunk `first + i`: chunk ids are drawn as one consecutive range per batch.

Why files: a writer that inserts every vector into DuckDB pays the insert, the log written at
each commit and the checkpoint that rewrites them (`docs/benchmarks.md`, importing vectors),
which caps what one writer absorbs from a GPU or a cluster. A file is written once, at disk
speed, and can be written by whoever has the vectors (a cluster worker writes it under
`vectors/incoming/`; the writer moves it in and records it). `.npy` rather than Parquet:
fixed-width rows map from disk, so fetching a few hundred vectors reads a few hundred pages.

Crash safety: a file is written and synced under a temporary name, renamed, and only then
recorded; a writer killed before the commit leaves a file nothing records, which `unrecorded`
lists for collection. A recorded file is never rewritten. Rows of chunks deleted later stay in
their file, unread (readers keep only the chunks that exist); a file none of whose chunks
exist is dropped by the collection.

Plain file plumbing: no SQL (`indexer.store.vectors` records and reads them).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.core.fsio import fsync_dir, fsync_fh
from indexer.errors import StoreError
from indexer.store.core import DB_NAME
from indexer.store.rows import WorkerFile

FOLDER = "vectors"  # under the store's folder
INCOMING = "incoming"  # under FOLDER: files written by cluster workers, not yet recorded
SUFFIX = ".npy"
PARTIAL = ".partial"  # a file still being written
NEXT_GENERATION = Path("generations") / "next"  # `bertindex reindex` builds its next store here
# A batch of at least this many chunks keeps its vectors in a file; smaller ones are rows of
# `vectors`, which a base build moves into a file while they are few
# (`Vectors.move_rows_to_files`). Every full batch of an encoded run (2,048 documents, a chunk
# or more each, less any refused) is a file: a base then rescores from the files instead of
# codes of its own (`indexer.index.store_rows`: 1.14x one copy of the data on disk at 10M,
# against 1.52x). The cost: thousands of files (4,883 of 3 MB at 10M), each written once.
VECTOR_FILE_MIN_ROWS = 1024


@dataclass(frozen=True)
class VectorFile:
    """One recorded file: its name under `<store>/vectors/` and the chunk ids it holds,
    `first` to `stop - 1`."""

    name: str
    first: int
    rows: int

    @property
    def stop(self) -> int:
        return self.first + self.rows


def folder(store_dir: str | Path) -> Path:
    """`<store>/vectors`."""
    return Path(store_dir) / FOLDER


def file_name(first: int) -> str:
    """A new file's name: its first chunk id (for a person listing the folder) and a random
    part (a file never takes the name of one collected or of another store generation's)."""
    return f"c{first:012d}-{secrets.token_hex(4)}{SUFFIX}"


def write_npy(path: Path, vectors: np.ndarray) -> int:
    """Write `vectors` as an `.npy` file at `path`, durably: written under a temporary name,
    synced, renamed, the folder synced.

    Args:
        path: where the file goes (its folder exists).
        vectors: (rows, dim) float32.
    Returns:
        The file's size in bytes.
    """
    tmp = path.with_name(path.name + PARTIAL)
    with open(tmp, "wb") as fh:
        np.lib.format.write_array(fh, np.ascontiguousarray(vectors, dtype=np.float32))
        fsync_fh(fh)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return path.stat().st_size


def write(store_dir: str | Path, first: int, vectors: np.ndarray) -> tuple[VectorFile, int]:
    """Write one batch's vectors as a new file of the store (not yet recorded).

    Args:
        store_dir: the store's folder.
        first: the chunk id of row 0.
        vectors: (rows, dim) float32, in chunk id order.
    Returns:
        (the file, its size in bytes).
    """
    target = folder(store_dir)
    target.mkdir(parents=True, exist_ok=True)
    name = file_name(first)
    size = write_npy(target / name, vectors)
    return VectorFile(name, int(first), len(vectors)), size


def adopt(
    store_dir: str | Path, path: str | Path, first: int, rows: int, dim: int
) -> tuple[VectorFile, int]:
    """Move a file a worker wrote (under `vectors/incoming/`) in as the store's file for the
    chunks `first` to `first + rows - 1`, after checking its shape.

    Args:
        store_dir: the store's folder.
        path: the worker's file.
        first: the chunk id its row 0 becomes.
        rows, dim: the shape it must have.
    Returns:
        (the file, its size in bytes).
    Raises:
        StoreError: naming the file, when it is missing or of another shape.
    """
    source = Path(path)
    try:
        shape = np.load(source, mmap_mode="r").shape
    except (OSError, ValueError) as exc:
        raise StoreError(
            f"vector file {source} from a worker cannot be read ({exc}); the partition is "
            "encoded again by the next index run"
        ) from None
    if shape != (rows, dim):
        raise StoreError(
            f"vector file {source} from a worker holds {shape}, its partition has {rows} "
            f"chunks of {dim} dimensions; the partition is encoded again by the next index run"
        )
    target = folder(store_dir)
    target.mkdir(parents=True, exist_ok=True)
    name = file_name(first)
    os.replace(source, target / name)
    fsync_dir(target)
    return VectorFile(name, int(first), rows), (target / name).stat().st_size


def open_rows(store_dir: str | Path, vf: VectorFile, dim: int) -> np.ndarray:
    """A recorded file's vectors, mapped from disk (read-only).

    Raises:
        StoreError: naming the file when it is missing or not the shape recorded (the store's
            folder was copied without it, or it was damaged): `bertindex doctor` names the
            documents, and re-indexing their source writes their vectors again.
    """
    path = folder(store_dir) / vf.name
    try:
        rows = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise StoreError(
            f"vector file {path} of chunks {vf.first}..{vf.stop - 1} cannot be read ({exc}); "
            "run `bertindex doctor` to see the documents it held, then index their source "
            "again (or copy the store's folder whole, `vectors/` with it)"
        ) from None
    if rows.shape != (vf.rows, dim) or rows.dtype != np.float32:
        raise StoreError(
            f"vector file {path} holds {rows.dtype}{rows.shape}, recorded as {vf.rows} rows of "
            f"{dim} float32; run `bertindex doctor`, then index the source of those chunks again"
        )
    return rows


def share_with_generation(store_dir: str | Path, generation: str | Path) -> None:
    """Make the next generation's vector folder (`bertindex reindex`: `<store>/generations/
    next/vectors`) a link to the live store's, so that the files its batches write are already
    where the switched store reads them: the switch renames store.duckdb and moves no vector.

    A generation's files are unrecorded in the live store until the switch: its collection
    leaves every unrecorded file alone while a generation's store file exists
    (`generation_pending`), and a store whose folder is such a link collects nothing.

    Raises:
        StoreError: the generation has a vector folder of its own with files in it.
    """
    link = Path(generation) / FOLDER
    if link.is_symlink():
        return
    if link.is_dir():
        if any(link.iterdir()):
            raise StoreError(
                f"{link} holds files of its own; remove {Path(generation)} (an unfinished "
                "reindex: the next one starts it again)"
            )
        link.rmdir()
    folder(store_dir).mkdir(parents=True, exist_ok=True)
    Path(generation).mkdir(parents=True, exist_ok=True)
    os.symlink(Path("..", "..", FOLDER), link, target_is_directory=True)
    fsync_dir(Path(generation))


def generation_pending(store_dir: str | Path) -> bool:
    """Whether a next generation's store file sits beside the store (a reindex killed before
    its switch, which the next reindex resumes): its vector files are in this store's folder,
    unrecorded here."""
    return (Path(store_dir) / NEXT_GENERATION / DB_NAME).is_file()


def shares_folder(store_dir: str | Path) -> bool:
    """Whether the store's vector folder is a link to another store's (it is a generation)."""
    return folder(store_dir).is_symlink()


def on_disk(store_dir: str | Path) -> list[str]:
    """Names of the vector files (and partial ones) in the store's folder, not those still
    incoming."""
    target = folder(store_dir)
    if not target.is_dir():
        return []
    return sorted(
        p.name
        for p in target.iterdir()
        if p.is_file() and (p.suffix == SUFFIX or p.name.endswith(PARTIAL))
    )


def incoming_probe(store_dir: str | Path) -> tuple[Path, str]:
    """A small file under `<store>/vectors/incoming/` holding a random token: a worker that
    reads the token at that path sees the store's folder as the writer does. The caller
    deletes it (or the next run's collection does).

    Returns:
        (the file's absolute path, the token).
    """
    target = (folder(store_dir) / INCOMING).resolve()
    target.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    path = target / f"probe-{token[:8]}"
    path.write_text(token)
    return path, token


def clear_incoming(store_dir: str | Path) -> int:
    """Delete what workers left under `vectors/incoming/` (partitions no run committed);
    called only before a run's workers start. Returns how many files."""
    target = folder(store_dir) / INCOMING
    if not target.is_dir():
        return 0
    left = [p for p in target.iterdir() if p.is_file()]
    for path in left:
        path.unlink(missing_ok=True)
    return len(left)


def remove(store_dir: str | Path, names: list[str]) -> None:
    """Delete these files of the store's folder (those missing already are skipped)."""
    target = folder(store_dir)
    for name in names:
        (target / name).unlink(missing_ok=True)
    if names:
        fsync_dir(target)


def write_worker_vectors(store_dir: str | Path, label: str, vectors: np.ndarray) -> WorkerFile:
    """A cluster worker's vectors written under `<store>/vectors/incoming/` (the store's
    folder on storage the workers share), for the writer to record rather than receive.

    Args:
        store_dir: the store's folder as the worker sees it.
        label: the partition's id (part of the name, for a person listing the folder).
        vectors: (rows, dim) float32.
    Returns:
        The file, as `ChunkRows.vectors` carries it to the writer.
    """
    target = folder(store_dir) / INCOMING
    target.mkdir(parents=True, exist_ok=True)
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)[-80:]
    path = target / f"{safe}-{secrets.token_hex(4)}{SUFFIX}"
    write_npy(path, vectors)
    return WorkerFile(str(path), int(vectors.shape[0]), int(vectors.shape[1]))
