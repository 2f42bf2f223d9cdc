"""Files known unchanged (`store.sources`): what an index run records of each file it read
whole, so that a later run over the same bytes with the same reading settings skips the file
instead of reading, hashing and planning every row again (a nightly re-run of a 10M-document
corpus with nothing changed costs the files' SHA-256, not 16 minutes: docs/guides/scale.md).

A row per (collection, resolved path): size, modification time, SHA-256 of the bytes, the
reading settings (`settings`: format, field mapping, `long_documents.max_chars`, reader
version), records and rejections; and in `source_file_ids`, in parts of 2^18, the accepted
ids' 128-bit fingerprints, which a
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

import duckdb
import numpy as np
import pyarrow as pa

from indexer.errors import StoreError
from indexer.store.core import StoreCore

SELECT_ONE = (
    "SELECT bytes, mtime_ns, sha256, settings, records, rejected, source, run_id "
    "FROM source_files WHERE collection = ? AND path = ?"
)
SELECT_PART = "SELECT ids FROM source_file_ids WHERE collection = ? AND path = ? AND part = ?"
PART_IDS = 1 << 18  # 4 MiB a row, a transaction each: within the writer's DuckDB memory
CARRY_REJECTED = (
    "INSERT INTO rejected SELECT ?, ?, row_number, external_id, reason, ? FROM rejected "
    "WHERE run_id = ? AND source = ? ORDER BY row_number"
)
SELECT_CARRIED = (
    "SELECT source, row_number, external_id, reason FROM rejected WHERE run_id = ? "
    "AND source = ? ORDER BY row_number LIMIT ?"
)
MOVE_RECORD = "UPDATE source_files SET source = ?, run_id = ? WHERE collection = ? AND path = ?"
TABLES = ("source_files", "source_file_ids")
DELETE_ONE = "DELETE FROM {table} WHERE collection = ? AND path = ?"
DELETE_OTHERS = "DELETE FROM {table} WHERE collection = ? AND path NOT IN {paths}"
DELETE_ALL = "DELETE FROM {table}"
INSERT = "INSERT INTO {table} BY NAME SELECT * FROM {{view}}"  # columns by name
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
        parts: list[np.ndarray] = []
        while (part := self._part(collection, state.path, len(parts))) is not None:
            parts.append(np.frombuffer(part, dtype="<u8").reshape(-1, 2))
        keys = np.concatenate(parts) if parts else np.zeros((0, 2), np.uint64)
        if len(keys) != records:  # parts of a record cut short: read the file again
            return None
        return SourceFile(state, settings, int(records), int(rejected), keys, source, run_id)

    def _part(self, collection: str, path: str, part: int) -> bytes | None:
        row = self.core.con.execute(SELECT_PART, [collection, path, part]).fetchone()
        return None if row is None else row[0]

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
        try:
            self._record(collection, files, run_id, keep)
        except duckdb.Error as exc:  # rolled back: nothing is recorded
            raise StoreError(f"{self.core.db_path}: recording files read whole: {exc}") from exc

    def _record(
        self, collection: str, files: list[SourceFile], run_id: str, keep: list[str] | None
    ) -> None:
        """Record `files` as read whole by run `run_id`: a file's old row goes first, then
        its fingerprints' parts each in a transaction of its own (all of a 10M-row file's in one
        had outgrown the writer's 128 MB of DuckDB memory), its new row last. A writer killed
        between leaves a file without a row (read again), never a row without its parts.

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
                    for table in TABLES:
                        delete = DELETE_OTHERS.format(table=table, paths=paths)
                        self.core.con.execute(delete, [collection])
            for f in files:
                for table in TABLES:
                    delete = DELETE_ONE.format(table=table)
                    self.core.con.execute(delete, [collection, f.state.path])
        for f in files:
            self._write_ids(collection, f.state.path, f.ids)
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
                self.core.insert_view(INSERT.format(table="source_files"), pa.table(row))

    def _write_ids(self, collection: str, path: str, ids: np.ndarray) -> None:
        """A file's fingerprints, PART_IDS a row, a transaction each."""
        flat = np.ascontiguousarray(ids, dtype="<u8")
        for part, start in enumerate(range(0, len(flat), PART_IDS)):
            row = {
                "collection": [collection],
                "path": [path],
                "part": pa.array([part], pa.int32()),
                "ids": pa.array([flat[start : start + PART_IDS].tobytes()], pa.large_binary()),
            }
            with self.core.transaction():
                self.core.insert_view(INSERT.format(table="source_file_ids"), pa.table(row))

    def forget_all(self) -> None:
        """Forget every record (documents were deleted), inside the caller's transaction."""
        for table in TABLES:
            self.core.con.execute(DELETE_ALL.format(table=table))

    def listed(self) -> list[dict]:
        """Every record without its ids: collection, path, bytes, records, rejected, when."""
        keys = ("collection", "path", "bytes", "records", "rejected", "recorded_at")
        return [dict(zip(keys, row)) for row in self.core.con.execute(LIST).fetchall()]
