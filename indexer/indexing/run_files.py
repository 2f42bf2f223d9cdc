"""A run's files against what earlier runs recorded of them (`indexer.store.sources`): which
are unchanged since (skipped; their ids claimed in their place) and which are read, with what
the run saw of each, so that those read whole are recorded; and the run's batches read from
them (`RunFiles.batches`). Decisions: docs/guides/indexing.md (Incremental runs)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from indexer.config import Config
from indexer.core.in_process import iterate_in_process
from indexer.core.progress import Progress
from indexer.core.stages import timed
from indexer.indexing.imported import ImportedVectors
from indexer.ingest.readers import Batch, FieldMap, IdRegistry, read_files
from indexer.store import FileState, SourceFile, Store

# Bump when reading a file can give other records from the same bytes and settings: every
# file recorded as read is then read again once.
READER_VERSION = 1
# files read in a child process from this many bytes to read (`RunFiles.batches`): starting it
# costs ~0.15 s of a core, what reading ~2 MB of tweets on a thread costs (docs/design.md)
READ_IN_PROCESS_BYTES = 16 << 20


def reading_settings(fmt: str, fields: FieldMap, config: Config) -> str:
    """What besides its bytes decides the records read from a file (JSON, compared as text)."""
    return json.dumps(
        {
            "reader": READER_VERSION,
            "format": fmt,
            "fields": dataclasses.asdict(fields),
            "max_chars": config.long_documents.max_chars,
        },
        sort_keys=True,
    )


@dataclass
class RunFiles:
    """A run's files: those unchanged since an earlier run recorded them, and those read."""

    collection: str
    settings: str
    unchanged: dict[str, SourceFile]  # str(path) as given -> its record
    reading: dict[str, FileState]  # str(path) -> its state before it was read
    counts: dict[str, list[int]]  # str(path) -> [records, rejected] as read
    enabled: bool
    ids: IdRegistry | None = None  # the run's ids once every file is read
    partial: set[str] = field(default_factory=set)  # files with a row (or rest) unreadable

    @classmethod
    def of(
        cls,
        store: Store,
        collection: str,
        files: list[Path],
        settings: str,
        on_missing: str,
        imported: ImportedVectors | None,
    ) -> RunFiles:
        """Stat and hash every file (SHA-256: seconds for gigabytes) and look each up. Nothing
        is skipped with `on_missing: delete` (which needs every id the files hold as text) or
        a vector file (whose rows name documents)."""
        enabled = on_missing != "delete" and imported is None
        unchanged: dict[str, SourceFile] = {}
        reading: dict[str, FileState] = {}
        for path in files:
            try:
                with timed("read"):
                    state = FileState.of(path)
            except OSError:  # unreadable: read_batches says why, as a rejection
                continue
            found = store.sources.unchanged(collection, state, settings) if enabled else None
            if found is not None:
                unchanged[str(path)] = found
            else:
                reading[str(path)] = state
        return cls(collection, settings, unchanged, reading, {}, enabled)

    def note(self, source: str, batch: Batch) -> None:
        counts = self.counts.setdefault(source, [0, 0])
        counts[0] += len(batch.records)
        counts[1] += len(batch.rejected)
        if any(r.external_id is None for r in batch.rejected):
            self.partial.add(source)  # read again next time, so its rows are reported again

    def to_record(self, failed: set[str]) -> list[SourceFile]:
        """The files read whole (no failed or refused batch, nothing unreadable), to record."""
        if not self.enabled or self.ids is None:
            return []
        keys = self.ids.keys_by_source()
        empty = np.zeros((0, 2), np.uint64)
        return [
            SourceFile(
                state,
                self.settings,
                self.counts.get(source, [0, 0])[0],
                self.counts.get(source, [0, 0])[1],
                keys.get(source, empty),
                source,
            )
            for source, state in self.reading.items()
            if source not in failed and source not in self.partial
        ]

    def batches(
        self,
        files: list[Path],
        refused_files: list,
        fmt: str,
        fields: FieldMap,
        batch_size: int,
        config: Config,
        run_bar: Progress,
    ) -> Iterator[Batch]:
        """The run's batches, file after file; refused files (outside roots.data, or no known
        suffix) first, as rejections: recorded, never read. Ids are unique across the run. A
        file known unchanged is not read: its ids are claimed at its place in the order.

        With `READ_IN_PROCESS_BYTES` or more to read, the files are read in a child process
        (`indexer.core.in_process`): parsing and validating rows holds the GIL, and a reader
        thread had slowed the writer's planning threefold in a re-run with few changes
        (docs/design.md, "Files are read in a child process")."""
        if refused_files:
            yield Batch(rejected=list(refused_files))
        known = {path: found.ids for path, found in self.unchanged.items()}
        args = (files, known, fmt, fields, batch_size, config.long_documents.max_chars)
        to_read = sum(state.bytes for state in self.reading.values())
        items = (
            iterate_in_process(read_files, *args)
            if to_read >= READ_IN_PROCESS_BYTES and sys.executable  # (none: embedded Python)
            else read_files(*args)
        )
        for item in items:
            if isinstance(item, IdRegistry):  # the last: every file is read
                self.ids = item  # the accepted ids, by file, to record
            elif isinstance(item, int):  # the next file's number
                run_bar.set_postfix(f"file {item}/{len(files)}")
            else:
                self.note(*item)
                yield item[1]
