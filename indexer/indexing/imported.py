"""Precomputed vectors joined to an index run's documents (`run_index(vectors=FILE)`): each
document the file has a vector for is stored with it, as one chunk, instead of being encoded.

Checks the file against the configured encoder (model name, dimension) before the run writes
anything; does not read the file (`indexer.ingest.vector_files`) nor write the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.config import ModelConfig
from indexer.errors import InputError
from indexer.indexing.steps import BatchPlan
from indexer.ingest.readers import Batch, Rejected
from indexer.ingest.vector_files import VectorFile, read_vector_file
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


class ImportedVectors:
    """A vector file's vectors by document id, and which of its ids the run's corpus held."""

    def __init__(self, file: VectorFile, normalize: bool):
        self.file = file
        if normalize:  # as the encoder stores them (`model.normalize`): unit length
            norms = np.linalg.norm(file.vectors, axis=1, keepdims=True)
            file.vectors = file.vectors / np.maximum(norms, 1e-12)  # a copy: may be read-only
        self.position = {key: i for i, key in enumerate(file.ids)}
        self.seen = np.zeros(len(file.ids), bool)  # its id was read from the corpus
        self.imported = 0  # documents committed with a vector from the file
        self.not_imported = 0  # the file's rows `unmatched` returned

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
        file = read_vector_file(path, provenance.dim)
        if file.model != provenance.model_name:
            raise InputError(
                f"{file.path}: vectors of model {file.model!r}, but the store holds model "
                f"{provenance.model_name!r}'s: set model.name to the model that made them "
                "(a new --store if this one holds another model's), or export the vectors "
                "with the configured model"
            )
        return cls(file, model.normalize)

    def note(self, batch: Batch) -> None:
        """Mark the ids `batch` read (stored or rejected) as present in the corpus."""
        for key in [r.external_id for r in batch.records] + [
            r.external_id for r in batch.rejected if r.external_id is not None
        ]:
            i = self.position.get(key)
            if i is not None:
                self.seen[i] = True

    def split(self, plan: BatchPlan) -> Split:
        """Divide `plan`'s documents to encode into those the file has a vector for and the
        rest."""
        taken, rows, rest = [], [], []
        for pos, (_, record, _) in enumerate(plan.to_encode):
            i = self.position.get(record.external_id)
            if i is None:
                rest.append(pos)
            else:
                taken.append(pos)
                rows.append(i)
        return Split(taken, self.file.vectors[rows], rest)

    def unmatched(self) -> list[Rejected]:
        """The file's rows that were not imported: unusable ones, and ids the corpus did not
        hold (call once every file of the run is read)."""
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
            "file": str(self.file.path),
            "model": self.file.model,
            "imported": self.imported,
            "not_imported": self.not_imported,
        }
