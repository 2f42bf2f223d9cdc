"""Rescoring a mapped base's candidates with their pages asked for first.

A mapped `…,RFlat` base (`VectorIndex.load(mapped=True)`) keeps its full vectors in the file's
pages; a mapped `…,Refine(SQ8)` one keeps 8-bit codes of them (a quarter of the bytes, scored here
as FAISS decodes them: `MappedRefine.scores`), `…,Refine(SQfp16)` half-precision ones. FAISS's
`IndexRefine` reads each candidate's vector in turn, so a query whose candidates are not in the page
cache waits on k·k_factor page faults one after another (a new query on a 1M base: ~26 ms, against
0.4 ms once its pages are resident). Here the first pass runs alone, the candidates' rows are
requested together (`posix_fadvise`/`madvise(WILLNEED)`: the kernel reads them in parallel),
then read from the file with `pread` (`FileRows`; through the mapping where the file cannot be
named) and rescored with the same inner products: ~2 ms for a new query
(`benchmarks/mapped_rescore.py`). Results equal `IndexRefine`'s up to ties.

A searcher's first pass (on how many threads, merged with concurrent queries') is
`indexer.index.first_pass`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import faiss
import numpy as np

from indexer.index import first_pass

log = logging.getLogger(__name__)

PAGE = 4096
MADV_RANDOM, MADV_WILLNEED = 1, 3  # Linux


def ids_by_position(index) -> np.ndarray:
    """An IDMap's ids by position, without a copy (valid while `index` lives): the base file's
    own pages where its reader left them there (`version_files.read_shared_ids`), else a view
    of FAISS's vector."""
    shared = getattr(index, "shared_ids", None)
    if shared is not None:
        return shared
    n = index.id_map.size()
    return faiss.rev_swig_ptr(index.id_map.data(), n) if n else np.zeros(0, np.int64)


def id_view(index) -> tuple[np.ndarray, np.ndarray | None]:
    """An IDMap's ids by position (`ids_by_position`: no copy, 80 MB at 10M) and their argsort
    (None: ascending, as a base is built)."""
    held = ids_by_position(index)
    ascending = bool((held[1:] > held[:-1]).all())  # not np.diff: no second 80 MB array
    return held, None if ascending else np.argsort(held, kind="stable")


class Rows(Protocol):
    """Where rescoring rows are read from by position: `FileRows` (a stage's own file) or
    `store_rows.StoreRows` (the store's vector files)."""

    def read(self, rows: np.ndarray, like: np.ndarray) -> np.ndarray: ...

    def prefetch(self, rows: np.ndarray) -> None: ...


@dataclass
class MappedRefine:
    """The parts of a mapped `IDMap(IndexRefine(first pass, IndexFlat | IndexScalarQuantizer))`
    base."""

    first: faiss.Index  # the first pass (IVF with PQ codes), over internal positions
    vectors: np.ndarray  # (n, dim) float32, uint8 (SQ8) or float16: the file's mapped pages
    ids: np.ndarray  # external id of each internal position
    scale: np.ndarray | None = None  # SQ8: a dimension's value is offset + code · scale
    offset: np.ndarray | None = None
    file: Rows | None = None  # the same rows read from a file (`FileRows`), if found
    # a searcher's passes (`first_pass.Merged`: its threads, concurrent queries merged);
    # None: a batch searcher's (as FAISS runs them, on the caller's OpenMP threads)
    passes: first_pass.Merged | None = None

    def candidates(self, queries: np.ndarray, wide: int, params) -> np.ndarray:
        """The first pass's `wide` candidates of each query (`first_pass.run`)."""
        if self.passes is not None:
            return self.passes.search(queries, wide, params)
        return first_pass.run(self.first, queries, wide, params, None)

    def prefetch(self, rows: np.ndarray) -> None:
        """Ask the kernel for the pages of `rows` (no wait)."""
        if self.file is not None:
            self.file.prefetch(rows)
        else:
            prefetch(self.vectors, rows)

    def scores(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Inner products of `query` with the rescoring vectors at `rows`: exact for float32,
        FAISS's own decoding for 8-bit codes (`(code + 0.5) / 255` of each dimension's
        trained range: the same scores `IndexRefine` gives, up to float rounding).

        Not `@`: numpy's BLAS runs a matrix-vector product on a thread per core whose
        spinning after each call cost a served 10M query as much CPU again (22 ms wall, 44 ms
        CPU), halving the throughput of busy servers; einsum stays on this thread."""
        held = self.vectors[rows] if self.file is None else self.file.read(rows, self.vectors)
        if self.scale is None or self.offset is None:
            if held.dtype != np.float32:
                held = held.astype(np.float32)
            return np.einsum("ij,j->i", held, query)
        return np.einsum("ij,j->i", held.astype(np.float32), query * self.scale) + float(
            np.dot(query, self.offset)
        )


def mapped_refine(
    index: faiss.Index,
    ids: np.ndarray | None = None,
    files: bool = True,
    threads: int | None = None,
) -> MappedRefine | None:
    """The parts to rescore `index` here: an IDMap over an IndexRefine in inner product whose
    rescoring stage is float32 (`…,RFlat`), 8-bit (`Refine(SQ8)`) or half-precision
    (`Refine(SQfp16)`) codes, else None (FAISS searches it). `ids`: the IDMap's ids by
    position (None: `ids_by_position`, no copy). `files`: look for the file under the rows
    (`FileRows`); False for an index held in memory, which has none. `threads`: a searcher's
    `index.scan_threads` (`searcher_passes`); None: a batch searcher's."""
    top = faiss.downcast_index(index)
    if not isinstance(top, faiss.IndexIDMap):
        return None
    refine = faiss.downcast_index(top.index)
    if not isinstance(refine, faiss.IndexRefine):
        return None
    stage = faiss.downcast_index(refine.refine_index)
    n, dim = int(stage.ntotal), int(stage.d)
    if not n or stage.metric_type != faiss.METRIC_INNER_PRODUCT:
        return None
    scale = offset = None
    if isinstance(stage, faiss.IndexFlat):
        vectors = faiss.rev_swig_ptr(stage.get_xb(), n * dim).reshape(n, dim)
    elif isinstance(stage, faiss.IndexScalarQuantizer) and stage.sq.qtype in SQ_TYPES:
        codes = faiss.rev_swig_ptr(stage.codes.data(), n * stage.code_size)
        vectors = codes.view(SQ_TYPES[stage.sq.qtype]).reshape(n, dim)
        if stage.sq.qtype == faiss.ScalarQuantizer.QT_8bit:
            trained = faiss.vector_to_array(stage.sq.trained)  # each dimension's min, range
            scale = trained[dim:] / 255
            offset = trained[:dim] + 0.5 * scale
    else:
        return None
    random_access(vectors)
    ids = ids_by_position(index) if ids is None else ids  # (`top` is a new proxy: no attributes)
    first = faiss.downcast_index(refine.base_index)
    rows = FileRows.behind(vectors) if files else None
    return searcher_passes(MappedRefine(first, vectors, ids, scale, offset, rows), threads)


def rows_refine(
    index: faiss.Index, rows: Rows, ids: np.ndarray, dim: int, threads: int | None = None
) -> MappedRefine | None:
    """The parts to rescore a base written without its rescoring stage (an IDMap over the
    first pass) from `rows` (`store_rows.StoreRows`, float32); None: not such a base.
    `threads`: as `mapped_refine`'s."""
    top = faiss.downcast_index(index)
    if not isinstance(top, faiss.IndexIDMap):
        return None
    first = faiss.downcast_index(top.index)
    empty = np.zeros((0, dim), np.float32)
    return searcher_passes(MappedRefine(first, empty, ids, file=rows), threads)


def searcher_passes(parts: MappedRefine, threads: int | None) -> MappedRefine:
    """`parts` with a searcher's first passes (`first_pass.Merged`) when `threads` is given:
    on the idle cores, concurrent queries merged."""
    if threads is not None:
        parts.passes = first_pass.Merged(parts.first, threads)
    return parts


@dataclass
class FileRows:
    """The rows of a mapped rescoring stage read from its file with `pread` instead of through
    the mapping.

    A page fault maps the faulting page and, by the kernel's fault-around, up to 15 cached
    neighbours into the process: at 10M, 876 served queries left 9.7 GB of the base's pages
    counted in the servers' Pss, though a query rescores ~320 rows (a few hundred KB). Read
    with `pread`, the rows pass through the page cache (shared, evictable) and nothing of the
    rescoring stage is mapped into a serving process; `posix_fadvise(WILLNEED)` asks for a
    query's rows together first, as `madvise` did for the mapping. The bytes are the same.

    Found only where the mapping's file can be named (Linux /proc/self/maps, the same inode
    still at its path); elsewhere the mapping is read as before.
    """

    fd: int
    start: int  # the file offset of row 0
    width: int  # bytes a row

    @classmethod
    def behind(cls, vectors: np.ndarray) -> FileRows | None:
        """The file under the mapped `vectors` (None: not a file mapping, or not found)."""
        if not READ_FILES or not vectors.size:
            return None
        found = mapped_file(vectors.ctypes.data)
        if found is None:
            return None
        path, start, inode = found
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        if os.fstat(fd).st_ino != inode or os.fstat(fd).st_size < start + vectors.nbytes:
            os.close(fd)  # replaced since it was mapped
            return None
        return cls(fd, start, vectors.shape[1] * vectors.itemsize)

    def __del__(self):
        os.close(self.fd)

    def read(self, rows: np.ndarray, like: np.ndarray) -> np.ndarray:
        """`like[rows]` (the mapped view's dtype and width) read from the file."""
        width = self.width
        out = np.empty(len(rows) * width, np.uint8)
        view = out.data  # a memoryview: preadv fills the array in place
        for i, row in enumerate(rows.tolist()):
            part = view[i * width : (i + 1) * width]
            if os.preadv(self.fd, [part], self.start + row * width) != width:
                raise OSError(f"short read of row {row} from the index file (fd {self.fd})")
        return out.view(like.dtype).reshape(len(rows), like.shape[1])

    def prefetch(self, rows: np.ndarray) -> None:
        """Ask the kernel to read `rows` (no wait)."""
        width = self.width
        for row in np.unique(rows).tolist():
            os.posix_fadvise(self.fd, self.start + row * width, width, os.POSIX_FADV_WILLNEED)


READ_FILES = hasattr(os, "preadv") and hasattr(os, "posix_fadvise")  # benchmarks turn it off


def mapped_file(address: int) -> tuple[str, int, int] | None:
    """(path, file offset, inode) of the file mapped at `address` in this process (Linux
    /proc/self/maps), or None (anonymous memory, a deleted file, no /proc)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6:
            continue
        low, high = (int(x, 16) for x in fields[0].split("-"))
        if low <= address < high:
            path = fields[5]
            if not path.startswith("/") or path.endswith(" (deleted)"):
                return None
            return path, int(fields[2], 16) + address - low, int(fields[4])
    return None


# the scalar quantisers rescored here, and their codes' numpy type
SQ_TYPES = {faiss.ScalarQuantizer.QT_8bit: np.uint8, faiss.ScalarQuantizer.QT_fp16: np.float16}


def _madvise():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        call = libc.madvise
    except (OSError, AttributeError):  # not Linux: no prefetch, the same results
        return None
    call.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return call


MADVISE = _madvise()


def random_access(vectors: np.ndarray) -> None:
    """Tell the kernel that the mapped `vectors` are read at random (`MADV_RANDOM`): a page
    fault then reads its page, not the ~128 KB of readahead around it. A search rescores ~320
    scattered vectors; with readahead, 876 served queries at 10M pulled ~10 GB of the base
    into the server's resident pages (`benchmarks/scale.py`, results/scale_10M_reads_8bit.json)."""
    if MADVISE is None or not vectors.size:
        return
    start = vectors.ctypes.data
    first = start - start % PAGE
    MADVISE(first, start + vectors.nbytes - first, MADV_RANDOM)


def prefetch(vectors: np.ndarray, rows: np.ndarray) -> None:
    """Ask the kernel to read the pages of `rows` of the mapped `vectors` (no wait)."""
    if MADVISE is None or not len(rows):
        return
    width = vectors.shape[1] * vectors.itemsize
    start = vectors.ctypes.data + np.unique(rows).astype(np.int64) * width
    first = start - start % PAGE
    for begin, end in zip(first.tolist(), (start + width).tolist()):
        MADVISE(begin, end - begin, MADV_WILLNEED)


def search_mapped(
    parts: MappedRefine,
    queries: np.ndarray,
    k: int,
    k_factor: int,
    first_params,
    exclude: np.ndarray | None = None,
    ranked: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k by inner product over the first pass's k·k_factor candidates a query, as
    `IndexRefine` ranks them (missing results: id -1, score -inf).

    Args:
        first_params: the first pass's search parameters (nprobe, the selector over
            internal positions), as `VectorIndex._search_params` builds them.
        exclude: sorted ids dropped from the candidates before rescoring (the base's deleted
            ids): a selector in the first pass checks every code it scans through two
            lookups, 156,000 a query at 10M, which doubled the first pass with 1 % deleted.
        ranked: how many of the k results are ranked for their own sake (None: k): the first
            pass keeps k_factor candidates for each of these and one for each other result,
            and all of them are rescored (`VectorIndex.search`). The searcher asks for 4·k
            chunks to find k documents; 32 candidates for each of the 40 (1,280 a query)
            cost a served 10M query more than its first pass at nprobe 256, for chunks that
            only widen the pool documents are grouped from.
    """
    wide = candidate_count(parts, k, k_factor, ranked)
    cand = parts.candidates(queries, wide, first_params)
    return rescored(parts, queries, k, cand, exclude)


def search_both(
    base: MappedRefine,
    delta: MappedRefine,
    queries: np.ndarray,
    k: int,
    k_factors: tuple[int, int],
    first_params,
    exclude: np.ndarray | None,
    ranked: int | None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """`search_mapped` of a base and of its probed delta (the base's centroids) with one
    choice of lists: a searcher's in one held pass, merged with concurrent queries'
    (`first_pass.Merged.search_with`). `k_factors`: the base's, the delta's; `exclude`: the
    base's deleted ids. Returns the two top-k, to merge."""
    wide = candidate_count(base, k, k_factors[0], ranked)
    quantizer = faiss.extract_index_ivf(base.first).quantizer
    also = first_pass.Also(delta.first, candidate_count(delta, k, k_factors[1], ranked), quantizer)
    if base.passes is not None:
        cand, more = base.passes.search_with(queries, wide, first_params, also)
    else:
        cand, more = first_pass.run_both(base.first, queries, wide, first_params, also)
    return [rescored(base, queries, k, cand, exclude), rescored(delta, queries, k, more)]


def candidate_count(parts: MappedRefine, k: int, k_factor: int, ranked: int | None) -> int:
    """First-pass candidates a query for `search_mapped`'s k, k_factor and ranked."""
    ranked = k if ranked is None else min(ranked, k)
    return min(ranked * k_factor + (k - ranked), len(parts.ids))


def rescored(
    parts: MappedRefine,
    queries: np.ndarray,
    k: int,
    cand: np.ndarray,
    exclude: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of each query's first-pass candidates `cand` (internal positions, -1 missing)
    rescored here, the `exclude`d ids dropped first (`search_mapped`)."""
    parts.prefetch(cand[cand >= 0])  # (before the deleted are dropped: read meanwhile)
    if exclude is not None and len(exclude):
        # the candidates' ids are pages of the base file (`version_files.read_shared_ids`):
        # asked for together, not faulted in one after another
        seen = np.maximum(cand, 0)
        prefetch(parts.ids[:, None], seen.ravel())
        ids = parts.ids[seen]
        at = np.minimum(np.searchsorted(exclude, ids), len(exclude) - 1)
        cand = np.where(exclude[at] == ids, -1, cand)
    scores = np.full((len(queries), k), -np.inf, np.float32)
    found = np.full((len(queries), k), -1, np.int64)
    for q, row in enumerate(cand):
        row = row[row >= 0]
        if not len(row):
            continue
        exact = parts.scores(row, queries[q])
        top = np.argsort(-exact, kind="stable")[:k]
        scores[q, : len(top)] = exact[top]
        found[q, : len(top)] = parts.ids[row[top]]
    return scores, found
