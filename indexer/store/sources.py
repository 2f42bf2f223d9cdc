"""Files known unchanged (`store.sources`): what an index run records of each file it read
whole, so that a later run over the same bytes with the same reading settings skips the file
instead of reading, hashing and planning every row again (a nightly re-run of a 10M-document
corpus with nothing changed costs the files' SHA-256, not 16 minutes: docs/guides/scale.md).

A row per (collection, resolved path): size, modification time, SHA-256 of the bytes, the
reading settings (`settings`: format, field mapping, `long_documents.max_chars`, reader
version), records and rejections; and in a file of `<store>/sources/`, the accepted ids'
128-bit fingerprints (16 bytes each, `.npy`), which a
later run claims in the file's place so that another file's record with one of its ids is
still rejected as a duplicate, exactly as if the file had been read.

When a record stops being true, it goes:
- any document deletion (`bertindex delete`, `on_missing: delete`, dedup, repairs) forgets
  every record (`forget_all`, inside the deleting transaction): a skipped file would not bring
  a deleted document back;
- a run that changes stored documents (new text or metadata) keeps the records of its own
  files only (`record(..., keep=...)`): another file's documents may be among
  those it changed;
- a file whose batches did not all commit (a failed or refused batch) is not recorded, and a
  run killed before the end records nothing: the next run reads those files again.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from indexer.core.fsio import fsync_dir
from indexer.errors import StoreError
from indexer.store.core import StoreCore

if TYPE_CHECKING:
    pass

SELECT_ONE = (
    "SELECT bytes, mtime_ns, sha256, settings, records, rejected, source, run_id "
    "FROM source_files WHERE collection = ? AND path = ?"
)
FOLDER = "sources"  # <store>/sources/<name>.npy: a recorded file's fingerprints
LIST_PATHS = "SELECT collection, path FROM source_files"
CARRY_REJECTED = (
    "INSERT INTO rejected SELECT ?, ?, row_number, external_id, reason, ? FROM rejected "
    "WHERE run_id = ? AND source = ? ORDER BY row_number"
)
SELECT_CARRIED = (
    "SELECT source, row_number, external_id, reason FROM rejected WHERE run_id = ? "
    "AND source = ? ORDER BY row_number LIMIT ?"
)
MOVE_RECORD = "UPDATE source_files SET source = ?, run_id = ? WHERE collection = ? AND path = ?"
DELETE_ONE = "DELETE FROM source_files WHERE collection = ? AND path = ?"
DELETE_OTHERS = "DELETE FROM source_files WHERE collection = ? AND path NOT IN {paths}"
DELETE_ALL = "DELETE FROM source_files"
INSERT = "INSERT INTO source_files BY NAME SELECT * FROM {view}"  # columns by name
LIST = (
    "SELECT collection, path, bytes, records, rejected, recorded_at FROM source_files "
    "ORDER BY collection, path"
)
_READ_CHUNK = 8 << 20


@dataclass(frozen=True)
class FileState:
    """What a file is now: its resolved path, size, modification time and SHA-256."""

    path: str
    bytes: int
    mtime_ns: int
    sha256: str

    @classmethod
    def of(cls, path: Path) -> FileState:
        """Stat and hash `path` (~1.2 GB/s on one core of the Xeon this was measured on)."""
        resolved = path.resolve()
        digest = hashlib.sha256()
        with open(resolved, "rb") as f:
            before = os.fstat(f.fileno())
            while block := f.read(_READ_CHUNK):
                digest.update(block)
        return cls(str(resolved), before.st_size, before.st_mtime_ns, digest.hexdigest())


@dataclass
class SourceFile:
    """One file read whole by a run, to record: its state, settings, counts and ids; the
    name the run read it by (`source`, as in `rejected.source`) and the run (`run_id`)."""

    state: FileState
    settings: str
    records: int
    rejected: int
    ids: np.ndarray  # (n, 2) uint64: the accepted ids' fingerprints
    source: str = ""
    run_id: str | None = None


class SourceFiles:
    """The `source_files` table (`store.sources`).

    Args:
        core: the open store.
    """

    def __init__(self, core: StoreCore):
        self.core = core

    def unchanged(self, collection: str, state: FileState, settings: str) -> SourceFile | None:
        """The recorded file, when its bytes and reading settings are `state`'s and
        `settings`; None when it must be read (never recorded, changed, or read otherwise)."""
        row = self.core.con.execute(SELECT_ONE, [collection, state.path]).fetchone()
        if row is None:
            return None
        size, _mtime, sha, recorded_settings, records, rejected, source, run_id = row
        if size != state.bytes or sha != state.sha256 or recorded_settings != settings:
            return None
        try:
            keys = np.load(self._ids_file(collection, state.path), allow_pickle=False)
        except (OSError, ValueError):  # missing or damaged: read the file again
            return None
        if keys.shape != (records, 2):
            return None
        return SourceFile(state, settings, int(records), int(rejected), keys, source, run_id)

    def _ids_file(self, collection: str, path: str) -> Path:
        name = hashlib.sha256(f"{collection}\0{path}".encode("utf-8", "surrogatepass"))
        return self.core.path / FOLDER / f"{name.hexdigest()[:40]}.npy"

    def carry_rejections(
        self, collection: str, skipped: SourceFile, source: str, run_id: str, listed: int
    ) -> list[tuple]:
        """Copy a skipped file's rejected rows from the run that read it to `run_id` (named
        `source`, as this run names the file), and make that run the record's: a re-run
        reports the same rejections as a full read. Returns the first `listed` of them as
        (source, row, external id, reason)."""
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        with self.core.transaction():
            if skipped.rejected:
                self.core.con.execute(
                    CARRY_REJECTED, [run_id, source, now, skipped.run_id, skipped.source]
                )
            self.core.con.execute(MOVE_RECORD, [source, run_id, collection, skipped.state.path])
        if not skipped.rejected or listed <= 0:
            return []
        return self.core.con.execute(SELECT_CARRIED, [run_id, source, listed]).fetchall()

    def record(
        self, collection: str, files: list[SourceFile], run_id: str, keep: list[str] | None
    ) -> None:
        import duckdb

        try:
            self._record(collection, files, run_id, keep)
        except duckdb.Error as exc:  # rolled back: nothing is recorded
            raise StoreError(f"{self.core.db_path}: recording files read whole: {exc}") from exc

    def _record(
        self, collection: str, files: list[SourceFile], run_id: str, keep: list[str] | None
    ) -> None:
        """Record `files` as read whole by run `run_id`: a file's old row goes first, then
        its fingerprints are written to `<store>/sources/` (temporary name, synced, renamed),
        its new row last. A writer killed between leaves a file without a row (read again),
        never a row without its fingerprints. (In DuckDB, a 10M-row file's 160 MB of them
        outgrew the writer's 128 MB of memory, even 4 MiB at a time.) Fingerprint files no
        row names any more are removed at the end.

        Args:
            collection: the collection they were read into.
            files: the files to record (replacing earlier records of the same paths).
            run_id: the run.
            keep: when not None, forget the collection's records of every other path (the
                run changed stored documents, which may be other files').
        """
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        with self.core.transaction():
            if keep is not None:
                with self.core.bound(keep, pa.string()) as paths:
                    self.core.con.execute(DELETE_OTHERS.format(paths=paths), [collection])
            for f in files:
                self.core.con.execute(DELETE_ONE, [collection, f.state.path])
        for f in files:
            self._write_ids(self._ids_file(collection, f.state.path), f.ids)
            row = {
                "collection": [collection],
                "path": [f.state.path],
                "source": [f.source],
                "bytes": [f.state.bytes],
                "mtime_ns": [f.state.mtime_ns],
                "sha256": [f.state.sha256],
                "settings": [f.settings],
                "records": [f.records],
                "rejected": [f.rejected],
                "run_id": [run_id],
                "recorded_at": [now],
            }
            with self.core.transaction():
                self.core.insert_view(INSERT, pa.table(row))
        self._remove_unnamed()

    @staticmethod
    def _write_ids(target: Path, ids: np.ndarray) -> None:
        target.parent.mkdir(exist_ok=True)
        temporary = target.with_suffix(".tmp")
        with open(temporary, "wb") as f:
            np.save(f, np.ascontiguousarray(ids, dtype="<u8").reshape(-1, 2))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)
        fsync_dir(target.parent)

    def _remove_unnamed(self) -> None:
        """Remove fingerprint files no row names (forgotten records, killed writes)."""
        folder = self.core.path / FOLDER
        if not folder.is_dir():
            return
        named = {self._ids_file(c, p).name for c, p in self.core.con.execute(LIST_PATHS).fetchall()}
        for stale in folder.iterdir():
            if stale.name not in named:
                stale.unlink(missing_ok=True)

    def forget_all(self) -> None:
        """Forget every record (documents were deleted), inside the caller's transaction."""
        self.core.con.execute(DELETE_ALL)

    def listed(self) -> list[dict]:
        """Every record without its ids: collection, path, bytes, records, rejected, when."""
        keys = ("collection", "path", "bytes", "records", "rejected", "recorded_at")
        return [dict(zip(keys, row)) for row in self.core.con.execute(LIST).fetchall()]
