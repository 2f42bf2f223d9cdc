"""Building a `…,RFlat` base whose rescoring vectors do not fit in memory.

An `IVF…,PQ…,RFlat` index keeps every vector at full precision for its rescoring stage: at 10M
384-wide vectors 15.4 GB, which FAISS's `IndexRefineFlat.add` holds in memory beside the rest
of the writer (the second 10M attempt ran out of memory there). Here the first pass (IVF lists
of PQ codes: ~100 bytes a vector) fills in memory as before, while the full vectors are written
straight to an unnamed file in the store's folder, in FAISS's `IndexFlat` layout; once every
batch is in, FAISS maps that file (`IO_FLAG_MMAP_IFC`) and the rescoring stage is a view of its
pages. Writing the base then streams them from the page cache. The index searches, tunes and
serialises byte for byte as the one built in memory (tested); the writer's private memory is
the first pass's, and the spilled pages are the kernel's to evict.

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
    """`index` (trained, empty) with every batch's (ids, vectors) added; an `…,RFlat` one
    with its full vectors in an unnamed file in `spill` when given (`SpilledRefine`).
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
    """Whether `index` (built from `spec`, maybe under an IDMap) rescores with an exact
    float32 flat stage, whose vectors can be spilled to a file while it fills."""
    refine = parse_spec(spec).refine
    if refine is None or refine.kind != "Flat":
        return False
    top = faiss.downcast_index(index)
    inner = faiss.downcast_index(top.index) if isinstance(top, faiss.IndexIDMap) else top
    return isinstance(inner, faiss.IndexRefine) and isinstance(
        faiss.downcast_index(inner.refine_index), faiss.IndexFlat
    )


def flat_header(dim: int, metric: int, count: int) -> bytes:
    """The bytes FAISS writes before an `IndexFlat`'s vectors, for `count` vectors: its own
    serialisation of an empty one with the two counts (vectors, floats) set, checked once
    against a real one so that a change of layout fails loudly instead of writing garbage."""
    empty = faiss.serialize_index(faiss.IndexFlat(dim, metric)).tobytes()
    head = bytearray(empty)
    head[HEADER_N] = np.int64(count).tobytes()
    head[-8:] = np.uint64(count * dim).tobytes()
    return bytes(head)


def _check_layout() -> None:
    probe = faiss.IndexFlat(3, faiss.METRIC_INNER_PRODUCT)
    vectors = np.arange(6, dtype=np.float32).reshape(2, 3)
    probe.add(vectors)
    written = faiss.serialize_index(probe).tobytes()
    if written != flat_header(3, faiss.METRIC_INNER_PRODUCT, 2) + vectors.tobytes():
        raise RuntimeError(
            f"faiss {faiss.__version__} writes IndexFlat in a layout this build does not "
            "know; set index.spec without RFlat or report it"
        )


class SpilledRefine:
    """Fills an `[IDMap,]IndexRefine(first pass, IndexFlat)` with its flat vectors on disk.

    Args:
        index: the trained, empty index (`spillable`).
        folder: where the unnamed file goes (the store's, on the disk that will hold the base).
    """

    def __init__(self, index: faiss.Index, folder: Path):
        _check_layout()
        self.owner = index  # the wrapper that owns the first pass (downcasts do not)
        top: Any = faiss.downcast_index(index)  # FAISS's wrappers are untyped
        self.id_map = isinstance(top, faiss.IndexIDMap)
        refine: Any = faiss.downcast_index(top.index) if self.id_map else top
        self.k_factor = float(refine.k_factor)
        self.first = faiss.downcast_index(refine.base_index)
        flat = faiss.downcast_index(refine.refine_index)
        self.dim, self.metric = int(flat.d), int(flat.metric_type)
        folder.mkdir(parents=True, exist_ok=True)
        self.named = not Path("/proc/self/fd").is_dir()  # no /proc: a named file, removed
        # open until `finish` (or `close` on failure): it outlives this call
        self.file = (
            tempfile.NamedTemporaryFile(dir=folder, prefix=".spill-", delete=False)  # noqa: SIM115
            if self.named
            else tempfile.TemporaryFile(dir=folder, prefix=".spill-")  # noqa: SIM115
        )
        self.file.write(flat_header(self.dim, self.metric, 0))
        self.count = 0
        self.ids: list[np.ndarray] = []

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Add a batch: codes to the first pass, full vectors to the file."""
        if self.file.closed:
            raise ValueError("the spilled index is finished: add to the index it returned")
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.first.add(vectors)
        self.file.write(vectors.tobytes())
        self.ids.append(np.asarray(ids, dtype=np.int64))
        self.count += len(vectors)

    def close(self) -> None:
        """Drop the file (its space returns at once unless `finish` mapped it)."""
        if not self.file.closed:
            self.file.close()
        if self.named and os.path.exists(self.file.name):
            os.unlink(self.file.name)

    def finish(self) -> faiss.Index:
        """The full index: the first pass with the mapped flat stage, under an IDMap when
        the built one had one (a plain IDMap, as bases are written; `plain_id_map`)."""
        self.file.seek(0)
        self.file.write(flat_header(self.dim, self.metric, self.count))
        self.file.flush()
        os.fsync(self.file.fileno())
        path = self.file.name if self.named else f"/proc/self/fd/{self.file.fileno()}"
        flat = faiss.read_index(path, faiss.IO_FLAG_MMAP_IFC)
        self.close()  # the mapping holds the file; it goes when the index does
        refine = faiss.IndexRefine(self.first, flat)
        refine.k_factor = self.k_factor
        refine.referenced_objects = [self.owner, flat]  # type: ignore[attr-defined]
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
