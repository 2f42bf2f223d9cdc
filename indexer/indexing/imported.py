"""Precomputed vectors joined to an index run's documents (`run_index(vectors=FILE)`): each
document the file has a vector for is stored with it, as one chunk, instead of being encoded.

Checks the file against the configured encoder (model name, dimension) before the run writes
anything; does not read the file (`indexer.ingest.vector_files`) nor write the store.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.config import ModelConfig
from indexer.core.stages import in_context, timed
from indexer.errors import InputError
from indexer.indexing.steps import BatchPlan
from indexer.ingest.readers import Batch, Rejected
from indexer.ingest.vector_files import VectorFile, peek_vector_file, read_vector_file
from indexer.records.provenance import Provenance
from indexer.store import ChunkRows


@dataclass
class Split:
    """A batch plan's documents to encode, divided: `taken` have a vector from the file
    (`vectors[i]` for plan position `taken[i]`), `rest` are encoded (plan positions)."""

    taken: list[int]
    vectors: np.ndarray  # (len(taken), dim) float32
    rest: list[int]

    def join(self, plan: BatchPlan, encoded: ChunkRows | None) -> ChunkRows:
        """The batch's chunks: one per taken document (the whole text), then the encoded
        ones, whose doc ids (positions into the rest's texts) become plan positions.

        Args:
            plan: the batch plan this split was made from.
            encoded: the encoded chunks of the rest (None: nothing was left to encode).
        Returns:
            ChunkRows whose doc_ids are positions into `plan.texts`.
        """
        ends = [len(plan.texts[p]) for p in self.taken]
        n = len(self.taken)
        mine = ChunkRows(list(self.taken), [0] * n, [0] * n, ends, [0] * n, self.vectors)
        if encoded is None or not encoded.doc_ids:
            return mine
        return ChunkRows(
            mine.doc_ids + [self.rest[d] for d in encoded.doc_ids],
            mine.ordinals + list(encoded.ordinals),
            mine.starts + list(encoded.starts),
            mine.ends + list(encoded.ends),
            mine.n_tokens + list(encoded.n_tokens),
            np.concatenate([mine.vectors, encoded.vectors]),
        )


_BLOCK = 8192  # rows per step of a pass over the file's vectors: no file-sized temporaries
_UNIT = 1e-5  # a norm this close to 1 is left as it is (float32 rounding of a unit vector)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """`vectors` scaled to unit length: the array itself when every row already is (a file
    from a normalizing encoder), else a scaled copy (the file's may be read-only).

    Args:
        vectors: (n, dim) float32.
    Returns:
        (n, dim) float32 rows of norm 1 (zero rows stay zero).
    """
    norms = np.empty(len(vectors), np.float32)
    for at in range(0, len(vectors), _BLOCK):
        block = vectors[at : at + _BLOCK]
        norms[at : at + _BLOCK] = np.sqrt(np.einsum("ij,ij->i", block, block))
    if np.all(np.abs(norms - 1) <= _UNIT):
        return vectors
    return vectors / np.maximum(norms, 1e-12)[:, None]


def _checked(path: str | Path, provenance: Provenance) -> VectorFile:
    """The file read, refused when it declares another model than the configured one."""
    file = read_vector_file(path, provenance.dim)
    _same_model(file.path, file.model, provenance)
    return file


def _same_model(path: Path, model: str, provenance: Provenance) -> None:
    if model != provenance.model_name:
        raise InputError(
            f"{path}: vectors of model {model!r}, but the store holds model "
            f"{provenance.model_name!r}'s: set model.name to the model that made them "
            "(a new --store if this one holds another model's), or export the vectors "
            "with the configured model"
        )


class ImportedVectors:
    """A vector file's vectors by document id, and which of its ids the run's corpus held.

    `opening` reads the file on a thread while the run reads its first corpus batches; the
    first `split` (or `file`, `unmatched`) waits for it and raises what reading it raised."""

    def __init__(self, file: VectorFile | Future, normalize: bool, path: Path | None = None):
        self._pending = file if isinstance(file, Future) else None
        self._file = None if isinstance(file, Future) else file
        self._normalize = normalize
        self.path = path if path is not None else self._file.path  # type: ignore[union-attr]
        self._noted: list[str] = []  # ids read before the file was: marked once it is
        self.position: dict[str, int] = {}
        self.seen = np.zeros(0, bool)  # its id was read from the corpus
        self.imported = 0  # documents committed with a vector from the file
        self.not_imported = 0  # the file's rows `unmatched` returned
        if self._file is not None:
            self._ready(self._file)

    def _ready(self, file: VectorFile) -> None:
        if self._normalize:  # as the encoder stores them (`model.normalize`): unit length
            file.vectors = unit_rows(file.vectors)
        self.position = {key: i for i, key in enumerate(file.ids)}
        self.seen = np.zeros(len(file.ids), bool)
        self._file = file
        self._mark(self._noted)
        self._noted = []

    @property
    def file(self) -> VectorFile:
        """The file's usable rows, once read (waits for the read)."""
        if self._file is None:
            assert self._pending is not None
            with timed("read"):
                file = self._pending.result()  # raises what the read raised
            self._ready(file)
        assert self._file is not None
        return self._file

    @classmethod
    def open(cls, path: str | Path, provenance: Provenance, model: ModelConfig) -> ImportedVectors:
        """Read `path` and check it declares the configured encoder's model and dimension.

        Args:
            path: the vector file (`indexer.ingest.vector_files` formats).
            provenance: the configured encoder's, which the store records.
            model: the `model` section: with `normalize`, the vectors are scaled to unit
                length, as the encoder stores its own.
        Returns:
            The ImportedVectors.
        Raises:
            InputError: the file cannot be read, declares another model, or holds vectors of
                another dimension; the message names the file and the fix.
        """
        return cls(_checked(path, provenance), model.normalize)

    @classmethod
    def opening(
        cls, path: str | Path, provenance: Provenance, model: ModelConfig
    ) -> ImportedVectors:
        """`open`, with the vectors read on a thread: what the file's header shows (the
        suffix, a Parquet file's model and fixed vector width) is checked now, so a file of
        another model is refused before the run writes anything; the rest (a list column's
        widths, an `.npz`'s model) when the first batch is split, before any is committed.

        Raises:
            InputError: as `open`, for what the header shows.
        """
        declared = peek_vector_file(path, provenance.dim)
        if declared is not None:
            _same_model(Path(path), declared, provenance)
        future: Future = Future()

        def read() -> None:
            try:
                future.set_result(_checked(path, provenance))
            except BaseException as exc:  # noqa: BLE001  (raised where the file is awaited)
                future.set_exception(exc)

        threading.Thread(target=in_context(read), name="vector-file", daemon=True).start()
        return cls(future, model.normalize, Path(path))

    def _mark(self, keys: list[str]) -> None:
        for key in keys:
            i = self.position.get(key)
            if i is not None:
                self.seen[i] = True

    def note(self, batch: Batch) -> None:
        """Mark the ids `batch` read (stored or rejected) as present in the corpus."""
        keys = [r.external_id for r in batch.records] + [
            r.external_id for r in batch.rejected if r.external_id is not None
        ]
        if self._file is None:
            self._noted.extend(keys)
        else:
            self._mark(keys)

    def split(self, plan: BatchPlan) -> Split:
        """Divide `plan`'s documents to encode into those the file has a vector for and the
        rest."""
        vectors = self.file.vectors
        taken, rows, rest = [], [], []
        for pos, (_, record, _) in enumerate(plan.to_encode):
            i = self.position.get(record.external_id)
            if i is None:
                rest.append(pos)
            else:
                taken.append(pos)
                rows.append(i)
        return Split(taken, vectors[rows], rest)

    def unmatched(self) -> list[Rejected]:
        """The file's rows that were not imported: unusable ones, and ids the corpus did not
        hold (call once every file of the run is read)."""
        self.file  # noqa: B018  (read, and every noted id marked)
        missing = [
            Rejected(
                str(self.file.path),
                int(self.file.rows[i]),
                self.file.ids[i],
                "id not in the corpus files of this run: add the document to them, or "
                "remove the row",
            )
            for i in np.flatnonzero(~self.seen)
        ]
        self.not_imported = len(self.file.rejected) + len(missing)
        return self.file.rejected + missing

    def summary(self) -> dict:
        """What the run summary says of the import (`vectors`)."""
        return {
            "file": str(self.path),
            "model": self._file.model if self._file is not None else None,
            "imported": self.imported,
            "not_imported": self.not_imported,
        }
