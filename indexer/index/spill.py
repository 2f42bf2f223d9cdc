"""Building a `…,RFlat` (or `…,Refine(SQfp16|SQ8)`) base whose rescoring vectors do not fit
in memory.

An `IVF…,PQ…,RFlat` index keeps every vector at full precision for its rescoring stage: at 10M
384-wide vectors 15.4 GB, which FAISS's `IndexRefineFlat.add` holds in memory beside the rest of the
writer (the second 10M attempt ran out of memory there); half-precision codes still take 7.7 GB.
Here the first pass (IVF lists of PQ codes: ~100 bytes a vector) fills in memory as before, while
the rescoring codes (the vectors themselves, or FAISS's own scalar-quantised encoding of them) are
written straight to an unnamed file in the store's folder, in FAISS's `IndexFlat` /
`IndexScalarQuantizer` layout; once every batch is in, FAISS maps that file (`IO_FLAG_MMAP_IFC`) and
the rescoring stage is a view of its pages. Writing the base then streams them from the page cache.
The index searches, tunes and serialises byte for byte as the one built in memory (tested); the
writer's private memory is the first pass's, and the spilled pages are the kernel's to evict.

The file has no name (`O_TMPFILE` where the filesystem has it, else removed at once): a killed
writer leaves nothing to clean, and its space returns when the index is dropped.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from indexer.records.index_spec import parse_spec

HEADER_N = slice(8, 16)  # `write_index_header`: fourcc, d (int32), then ntotal (int64)


def fill(
    index: faiss.Index,
    spec: str,
    batches: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]],
    spill: Path | None,
) -> faiss.Index:
    """`index` (trained, empty) with every batch's (ids, vectors) added; one with a flat or
    scalar-quantised rescoring stage with its codes in an unnamed file in `spill` when given
    (`SpilledRefine`).
    Returns the filled index (a new object when spilled)."""
    if spill is not None and spillable(spec, index):
        spilled = SpilledRefine(index, spill)
        try:
            for ids, vectors in batches():
                spilled.add(vectors, ids)
            return spilled.finish()
        finally:
            spilled.close()
    for ids, vectors in batches():
        index.add_with_ids(np.ascontiguousarray(vectors, np.float32), ids)
    return index


def spillable(spec: str, index: faiss.Index) -> bool:
    """Whether `index` (built from `spec`, maybe under an IDMap) rescores with a flat
    (`RFlat`) or scalar-quantised (`Refine(SQ…)`) stage, whose codes can be spilled to a file
    while it fills."""
    refine = parse_spec(spec).refine
    if refine is None or refine.kind not in ("Flat", "SQ"):
        return False
    top = faiss.downcast_index(index)
    inner = faiss.downcast_index(top.index) if isinstance(top, faiss.IndexIDMap) else top
    return isinstance(inner, faiss.IndexRefine) and isinstance(
        faiss.downcast_index(inner.refine_index), SPILLED_STAGES
    )


SPILLED_STAGES = (faiss.IndexFlat, faiss.IndexScalarQuantizer)


def flat_header(dim: int, metric: int, count: int) -> bytes:
    """The bytes FAISS writes before an `IndexFlat`'s vectors, for `count` vectors
    (`stage_header` of an empty one)."""
    return stage_header(faiss.IndexFlat(dim, metric), count)


def stage_header(stage: faiss.Index, count: int) -> bytes:
    """The bytes FAISS writes before the codes of a rescoring `stage` (empty, trained: an
    IndexFlat or IndexScalarQuantizer) holding `count` vectors: its own serialisation with the
    vector count and the codes' length set (floats for IndexFlat, bytes otherwise), checked
    against a real one (`_check_layout`) so that a change of layout fails loudly instead of
    writing garbage."""
    unit = 4 if isinstance(stage, faiss.IndexFlat) else 1  # bytes a counted element
    head = bytearray(faiss.serialize_index(stage).tobytes())
    head[HEADER_N] = np.int64(count).tobytes()
    head[-8:] = np.uint64(count * stage.sa_code_size() // unit).tobytes()
    return bytes(head)


def encoded(stage: faiss.Index, vectors: np.ndarray) -> bytes:
    """The codes `stage` stores for `vectors`: the floats themselves, or FAISS's encoding."""
    if isinstance(stage, faiss.IndexFlat):
        return vectors.tobytes()
    return stage.sa_encode(vectors).tobytes()


def _check_layout(stage: faiss.Index) -> None:
    """A copy of the empty `stage` given two vectors must serialise as header + codes, so that
    a change of FAISS's layout fails loudly instead of writing garbage."""
    probe: Any = faiss.deserialize_index(faiss.serialize_index(stage))
    vectors = (np.arange(2 * stage.d, dtype=np.float32).reshape(2, -1) % 7) / 7
    header = stage_header(probe, 2)
    probe.add(vectors)
    if faiss.serialize_index(probe).tobytes() != header + encoded(probe, vectors):
        raise RuntimeError(
            f"faiss {faiss.__version__} writes {type(stage).__name__} in a layout this build "
            "does not know; set index.spec without a rescoring stage or report it"
        )


class SpilledRefine:
    """Fills an `[IDMap,]IndexRefine(first pass, IndexFlat | IndexScalarQuantizer)` with its
    rescoring codes on disk.

    Args:
        index: the trained, empty index (`spillable`).
        folder: where the unnamed file goes (the store's, on the disk that will hold the base).
    """

    def __init__(self, index: faiss.Index, folder: Path):
        self.owner = index  # the wrapper that owns the first pass (downcasts do not)
        top: Any = faiss.downcast_index(index)  # FAISS's wrappers are untyped
        self.id_map = isinstance(top, faiss.IndexIDMap)
        refine: Any = faiss.downcast_index(top.index) if self.id_map else top
        self.k_factor = float(refine.k_factor)
        self.first = faiss.downcast_index(refine.base_index)
        self.stage = faiss.downcast_index(refine.refine_index)  # empty, trained
        _check_layout(self.stage)
        self.dim, self.metric = int(self.stage.d), int(self.stage.metric_type)
        folder.mkdir(parents=True, exist_ok=True)
        self.named = not Path("/proc/self/fd").is_dir()  # no /proc: a named file, removed
        # open until `finish` (or `close` on failure): it outlives this call
        self.file = (
            tempfile.NamedTemporaryFile(dir=folder, prefix=".spill-", delete=False)  # noqa: SIM115
            if self.named
            else tempfile.TemporaryFile(dir=folder, prefix=".spill-")  # noqa: SIM115
        )
        self.file.write(stage_header(self.stage, 0))
        self.count = 0
        self.ids: list[np.ndarray] = []

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Add a batch: codes to the first pass, rescoring codes to the file."""
        if self.file.closed:
            raise ValueError("the spilled index is finished: add to the index it returned")
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.first.add(vectors)
        self.file.write(encoded(self.stage, vectors))
        self.ids.append(np.asarray(ids, dtype=np.int64))
        self.count += len(vectors)

    def close(self) -> None:
        """Drop the file (its space returns at once unless `finish` mapped it)."""
        if not self.file.closed:
            self.file.close()
        if self.named and os.path.exists(self.file.name):
            os.unlink(self.file.name)

    def finish(self) -> faiss.Index:
        """The full index: the first pass with the mapped rescoring stage, under an IDMap when
        the built one had one (a plain IDMap, as bases are written; `plain_id_map`)."""
        self.file.seek(0)
        self.file.write(stage_header(self.stage, self.count))
        self.file.flush()
        os.fsync(self.file.fileno())
        path = self.file.name if self.named else f"/proc/self/fd/{self.file.fileno()}"
        stage = faiss.read_index(path, faiss.IO_FLAG_MMAP_IFC)
        self.close()  # the mapping holds the file; it goes when the index does
        refine = faiss.IndexRefine(self.first, stage)
        refine.k_factor = self.k_factor
        refine.referenced_objects = [self.owner, stage]  # type: ignore[attr-defined]
        if not self.id_map:
            return refine
        # FAISS wraps only an empty index: wrap an empty one, then point at the full one
        top = faiss.IndexIDMap(faiss.IndexFlat(self.dim, self.metric))
        top.own_fields = False
        top.index = refine
        top.referenced_objects = [refine]  # type: ignore[attr-defined]
        top.is_trained = True
        ids = np.concatenate(self.ids) if self.ids else np.zeros(0, np.int64)
        faiss.copy_array_to_vector(ids, top.id_map)
        top.ntotal = refine.ntotal
        return top
