"""A base that rescores from the store's vector files instead of codes of its own.

A base with a rescoring stage (`…,RFlat`, `…,Refine(SQfp16)`) keeps a copy of every vector
for it: at 10M, 7.7 GB of half-precision codes beside the 15.4 GB of float32 vectors the store
holds, 1.52x the bytes of one copy of the data (docs/guides/scale.md). When every vector the
base holds is a row of one of the store's vector files (`indexer.store.vector_files`: the
`.npy` files large batches commit, never rewritten), the base is written without its
rescoring stage (the IDMap over the first pass only) and records the files it reads
(`record`); a search rescores its candidates from their float32 rows, read with `pread` as
`rescore.FileRows` reads a stage's rows (`StoreRows`). The scores are then exact, whatever
precision the stage had: the served recall is at least what tuning measured with the codes.

What a base names must stay: the store's collection keeps the files a kept version's base
names (`version_files.named_row_files`), even once none of their chunks exist. A base that
names a file that is gone is refused on load, naming the file (`open_rows`), and rebuilt by
`bertindex doctor --repair` from the vectors still stored.
"""

from __future__ import annotations

import errno
import math
import os
import resource
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import faiss
import numpy as np

from indexer.errors import VectorIndexError
from indexer.index.delta import id_map_over
from indexer.index.rescore import MappedRefine, ids_by_position, rows_refine, search_mapped
from indexer.store.vector_files import VectorFile, folder

ROW_BYTES = 4  # float32


def covering(files: list[VectorFile], ids: np.ndarray) -> list[VectorFile] | None:
    """The files that hold the rows of `ids` (sorted by first chunk id), or None when some id
    is in none of them (a vector kept as a row of the store's `vectors` table)."""
    if not files or not len(ids):
        return None
    files = sorted(files, key=lambda vf: vf.first)
    where = _file_of(*_bounds(files), ids)
    if where is None:
        return None
    return [files[i] for i in np.unique(where).tolist()]


def _bounds(files: list[VectorFile]) -> tuple[np.ndarray, np.ndarray]:
    """(first chunk ids, stops) of `files`, sorted by first."""
    return (
        np.array([vf.first for vf in files], np.int64),
        np.array([vf.stop for vf in files], np.int64),
    )


def _file_of(firsts: np.ndarray, stops: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """Index of each id's file, by the files' `_bounds`; None when an id is in no file."""
    at = np.searchsorted(firsts, ids, side="right") - 1
    if (at < 0).any():
        return None
    return at if bool((ids < stops[at]).all()) else None


def record(files: list[VectorFile] | None) -> list[dict] | None:
    """What a version's provenance.json keeps of the files its base rescores from."""
    if not files:
        return None
    return [{"name": vf.name, "first": vf.first, "rows": vf.rows} for vf in files]


def without_stage(
    base: faiss.Index, offered: list[VectorFile] | None
) -> tuple[faiss.Index, list[VectorFile] | None]:
    """(what to write as the base, the files it rescores from): an IDMap over a rescoring stage
    whose every vector is a row of the `offered` files becomes a plain IDMap over its first
    pass, the same ids (valid while `base` is: the caller writes it at once); any other base
    stays as it is (no files)."""
    top = faiss.downcast_index(base)
    if not offered or not isinstance(top, (faiss.IndexIDMap, faiss.IndexIDMap2)):
        return base, None
    refine = faiss.downcast_index(top.index)
    if not isinstance(refine, faiss.IndexRefine):
        return base, None
    ids = faiss.vector_to_array(top.id_map)
    files = covering(offered, ids)
    if files is None:
        return base, None
    return id_map_over(refine.base_index, ids, base), files


def fill_first_pass(
    index: faiss.Index,
    batches: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]],
    store_dir: Path,
    files: list[VectorFile],
) -> tuple[faiss.Index, StoreRows] | None:
    """A base over the store's `files` built without its rescoring stage: `index` (trained,
    empty; an IDMap over an IndexRefine) gives its first pass, which alone is filled with the
    batches, under a plain IDMap. What `without_stage` makes of a full base, without computing
    the stage's codes (at 10M, 7.7 GB of half-precision codes spilled to disk) only for
    tuning to read and the writer to drop. Returns (that IDMap, the rows it rescores from);
    None when `index` has no rescoring stage, or some vector is not a row of `files` (the
    caller then fills `index` itself: a second pass, which a store with rows in `vectors`
    avoids by not offering files)."""
    top = faiss.downcast_index(index)
    if not files or not isinstance(top, (faiss.IndexIDMap, faiss.IndexIDMap2)):
        return None
    refine = faiss.downcast_index(top.index)
    if not isinstance(refine, faiss.IndexRefine):
        return None
    first = faiss.IndexIDMap(faiss.clone_index(refine.base_index))  # trained, empty
    for ids, vectors in batches():
        first.add_with_ids(np.ascontiguousarray(vectors, np.float32), ids)
    ids = faiss.vector_to_array(first.id_map)
    covered = covering(files, ids)
    if covered is None:
        return None
    return first, StoreRows(store_dir, covered, int(index.d), ids)


class Rescored:
    """A base over the store's files as `auto.tune_batches` searches an index: the first pass
    with the parameters `auto.search_params` makes, then its candidates rescored from their
    rows, as a served search rescores them (`rescore.search_mapped`), the rows of a whole
    batch of queries gathered at once (`Gathered`)."""

    def __init__(self, parts: MappedRefine, dim: int):
        self.parts, self.d = parts, dim

    def search(self, queries: np.ndarray, k: int, params) -> tuple[np.ndarray, np.ndarray]:
        first, k_factor = params.keep[0], math.ceil(float(params.k_factor))
        return search_mapped(self.parts, queries, k, k_factor, first)

    @classmethod
    def of(cls, built) -> Rescored | None:
        """The base of `built` (a `VectorIndex`) searched so; None when it keeps its own stage."""
        rows = built.rows
        if rows is None:
            return None
        parts = rows_refine(built.index, Gathered(rows), rows.ids, rows.dim)
        return None if parts is None else cls(parts, rows.dim)


class Gathered:
    """`StoreRows` read a batch of queries at a time (`rescore.Rows`): `prefetch`, which
    `search_mapped` calls with every query's candidates before scoring any, reads all their
    rows through the files' mappings in one vectorised gather a file; `read` takes them from
    there. Tuning rescores 1,000 queries × k·k_factor candidates for each value it tries:
    at 200k, one `pread` a row (as a served query reads them) tuned in 6.9 s, gathered 4.1 s,
    the codes in memory 2.5 s (`benchmarks/base_build.py`)."""

    def __init__(self, rows: StoreRows):
        self.rows = rows
        self.held = np.zeros(0, np.int64)
        self.vectors = np.zeros((0, rows.dim), np.float32)

    def prefetch(self, rows: np.ndarray) -> None:
        self.held = np.unique(rows)
        ids = self.rows.ids[self.held]
        at = _file_of(*self.rows._bounds, ids)
        if at is None:
            raise VectorIndexError(f"chunk ids outside the vector files under {self.rows.folder}")
        self.vectors = np.empty((len(ids), self.rows.dim), np.float32)
        order = np.argsort(at, kind="stable")
        cuts = np.flatnonzero(np.diff(at[order])) + 1
        for part in np.split(order, cuts):  # each file mapped while read, then let go
            vf = self.rows.files[int(at[part[0]])]
            mapped = np.load(self.rows.folder / vf.name, mmap_mode="r")
            self.vectors[part] = mapped[ids[part] - vf.first]
            del mapped

    def read(self, rows: np.ndarray, like: np.ndarray | None = None) -> np.ndarray:
        return self.vectors[np.searchsorted(self.held, rows)]


class StoreRows:
    """The rescoring rows of a base, read from the store's vector files by position: position
    i of the base is chunk `ids[i]`, row `ids[i] - first` of the file that holds it. The same
    interface as `rescore.FileRows` (`read`, `prefetch`), float32 rows.

    Files are opened when first read and stay open (one descriptor each: `_open_fd`); a
    `pread` needs no lock, the opening takes one."""

    def __init__(self, store_dir: str | Path, files: list[VectorFile], dim: int, ids: np.ndarray):
        self.folder = folder(store_dir)
        self.files = sorted(files, key=lambda vf: vf.first)
        self.dim = dim
        self.ids = ids
        self.width = dim * ROW_BYTES
        self._bounds = _bounds(self.files)  # computed once: ~4,900 files at 10M
        self._opened: dict[int, tuple[int, int]] = {}  # file index -> (fd, data offset)
        self._lock = threading.Lock()

    def __del__(self):
        for fd, _ in getattr(self, "_opened", {}).values():
            os.close(fd)

    def _offsets(self, rows: np.ndarray) -> list[tuple[int, int]]:
        """(fd, byte offset) of each base position in `rows`."""
        ids = self.ids[np.asarray(rows, np.int64)]
        at = _file_of(*self._bounds, ids)
        if at is None:
            raise VectorIndexError(
                f"the base names chunk ids outside the vector files it records ({self.folder}); "
                "rebuild it: `bertindex doctor --repair`"
            )
        out = []
        for index, chunk in zip(at.tolist(), ids.tolist()):
            fd, start = self._open(index)
            out.append((fd, start + (chunk - self.files[index].first) * self.width))
        return out

    def _open(self, index: int) -> tuple[int, int]:
        found = self._opened.get(index)
        if found is not None:
            return found
        with self._lock:
            if index not in self._opened:
                self._opened[index] = self._open_file(self.files[index])
            return self._opened[index]

    def _open_file(self, vf: VectorFile) -> tuple[int, int]:
        path = self.folder / vf.name
        try:
            fd = _open_fd(path)
            with os.fdopen(os.dup(fd), "rb") as fh:
                major = np.lib.format.read_magic(fh)[0]
                header = np.lib.format.read_array_header_1_0
                if major > 1:
                    header = np.lib.format.read_array_header_2_0
                shape, fortran, dtype = header(fh)
                start = fh.tell()
        except (OSError, ValueError) as exc:
            raise VectorIndexError(
                f"vector file {path}, which the index base rescores from, cannot be read "
                f"({exc}); run `bertindex doctor --repair`"
            ) from None
        if tuple(shape) != (vf.rows, self.dim) or np.dtype(dtype) != np.float32 or fortran:
            os.close(fd)
            raise VectorIndexError(
                f"vector file {path} holds {dtype}{shape}, the index base reads {vf.rows} rows "
                f"of {self.dim} float32; run `bertindex doctor --repair`"
            )
        return fd, start

    def read(self, rows: np.ndarray, like: np.ndarray | None = None) -> np.ndarray:
        """The float32 vectors at base positions `rows` ((len(rows), dim))."""
        width = self.width
        out = np.empty(len(rows) * width, np.uint8)
        view = out.data
        for i, (fd, offset) in enumerate(self._offsets(rows)):
            if os.preadv(fd, [view[i * width : (i + 1) * width]], offset) != width:
                raise VectorIndexError(
                    f"short read at byte {offset} of a vector file under {self.folder}; run "
                    "`bertindex doctor --repair`"
                )
        return out.view(np.float32).reshape(len(rows), self.dim)

    def prefetch(self, rows: np.ndarray) -> None:
        """Ask the kernel to read the rows at base positions `rows` (no wait)."""
        for fd, offset in self._offsets(np.unique(rows)):
            os.posix_fadvise(fd, offset, self.width, os.POSIX_FADV_WILLNEED)


def _open_fd(path: Path) -> int:
    """A read-only descriptor of `path`; out of descriptors (a 10M store of 2,048-vector files
    has ~4,900 files, and many systems start a process at 1,024), the soft limit is raised to
    the hard one once and the open tried again."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            raise
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == hard:
            raise OSError(
                exc.errno, f"{exc.strerror}: raise the open-file limit (`ulimit -n`, now {soft})"
            ) from None
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def open_rows(
    store_dir: str | Path, recorded: list[dict] | None, dim: int, index, fix: str
) -> StoreRows | None:
    """The rows the loaded base `index` rescores from, as its version records them (None: it
    keeps its own rescoring stage).

    Raises:
        VectorIndexError: naming a recorded file that is not in the store's folder.
    """
    if not recorded:
        return None
    files = [VectorFile(r["name"], int(r["first"]), int(r["rows"])) for r in recorded]
    where = folder(store_dir)
    for vf in files:
        if not (where / vf.name).is_file():
            raise VectorIndexError(
                f"the index base rescores from the vector file {where / vf.name}, which is "
                f"missing (chunks {vf.first}..{vf.stop - 1}); {fix}"
            )
    return StoreRows(store_dir, files, dim, ids_by_position(index))
