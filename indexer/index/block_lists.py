"""A fast-scan base's inverted lists in a file beside it that every reader maps.

FAISS keeps fast-scan lists (`…x4fs`: codes packed in blocks of 32 for SIMD) in
`BlockInvertedLists`, memory each process owns: reading a base copies all of them (1.1 GB at
10M documents: ~0.6 s of every cold `bertindex search`, and 1.1 GB private in every `serve`
worker), and FAISS cannot map them (`IO_FLAG_MMAP` is for flat codes and plain lists).

FAISS's `OnDiskInvertedLists` maps a file of lists, each `capacity` codes of `code_size`
bytes followed by `capacity` ids, and hands a search a pointer into the mapping. A fast-scan
list of n vectors is ceil(n / 32) blocks of 32 codes, i.e. exactly `capacity` = 32·ceil(n/32)
codes of `block_size / 32` bytes; so each block list is written as an on-disk list of that
capacity holding the blocks byte for byte, its size n, its ids padded. The fast-scan search
reads the blocks through the generic list interface and gives the same results
(`tests/indexer/index/test_block_lists.py`).

Files: `index/bases/<name>.lists` beside `<name>.faiss`, written (fsynced, renamed) before
it; the base records the file's size (provenance `base.lists_bytes`). FAISS stores the lists
file's absolute path in the base; a reader reads the base without its list data
(`IO_FLAG_SKIP_IVF_DATA`), points it at the file beside the base (a store may move) and maps
it read-only (`open_lists`). It is collected with its base (`version_files.collect_bases`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import faiss
import numpy as np

from indexer.core.fsio import fsync_file
from indexer.index.first_pass import ivf_of
from indexer.index.rescore import MADVISE

SUFFIX = ".lists"
_STDOUT = threading.Lock()
_BLOCKS = getattr(faiss, "BlockInvertedLists")  # not in FAISS's type stubs


def lists_path(base_file: Path) -> Path:
    """Where the lists of the base `index/bases/<name>.faiss` live."""
    return base_file.with_name(base_file.name.removesuffix(".faiss") + SUFFIX)


def _lists(index: faiss.Index):
    """The IVF index inside `index` and its lists (downcast), or (None, None)."""
    ivf = ivf_of(index)
    if ivf is None or ivf.invlists is None:
        return None, None
    return ivf, faiss.downcast_InvertedLists(ivf.invlists)


def has_block_lists(index: faiss.Index) -> bool:
    """Whether `index` is (or wraps) an IVF index whose lists are fast-scan blocks in memory."""
    return isinstance(_lists(index)[1], _BLOCKS)


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """FAISS's on-disk lists print each growth of their file to the C stdout, where a
    `--json` command writes its result: send fd 1 to /dev/null meanwhile."""
    with _STDOUT:
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 1)
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def move_to_file(index: faiss.Index, path: Path) -> int:
    """Write the fast-scan block lists of `index` to `path` (a temporary name, fsynced,
    renamed) and swap them in: `index` then reads its lists from the mapped file (its
    memory freed) and `faiss.write_index` records on-disk lists. Returns the file's size.

    Raises:
        ValueError: `index` has no fast-scan block lists.
    """
    ivf, blocks = _lists(index)
    if ivf is None or not isinstance(blocks, _BLOCKS):
        raise ValueError("not a fast-scan IVF index")
    per_block, block_size = int(blocks.n_per_block), int(blocks.block_size)
    code_size = block_size // per_block
    sizes = np.array([blocks.list_size(i) for i in range(blocks.nlist)], np.int64)
    capacities = -(-sizes // per_block) * per_block
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    with _quiet_stdout():
        lists = faiss.OnDiskInvertedLists(blocks.nlist, code_size, str(tmp))
        lists.update_totsize(int(capacities.sum()) * (code_size + 8))  # grown once
        for i in np.flatnonzero(sizes).tolist():
            n, capacity = int(sizes[i]), int(capacities[i])
            codes = faiss.rev_swig_ptr(blocks.get_codes(i), capacity * code_size)
            ids = np.full(capacity, -1, np.int64)
            ids[:n] = faiss.rev_swig_ptr(blocks.get_ids(i), n)
            lists.resize(i, capacity)
            lists.update_entries(i, 0, capacity, faiss.swig_ptr(ids), faiss.swig_ptr(codes))
            lists.resize(i, n)
    fsync_file(tmp)
    os.replace(tmp, path)
    lists.filename = str(path)  # what the base records (the mapping follows the inode)
    lists.prefetch_nthread = 0  # FAISS's read-ahead threads: 32 started by every search
    ivf.replace_invlists(lists, True)
    getattr(lists, "this").disown()  # the IVF index frees it
    return path.stat().st_size


def open_lists(index: faiss.Index, base_file: Path, written: int) -> None:
    """Map the lists of a base read with `IO_FLAG_SKIP_IVF_DATA` from the file beside it,
    read-only.

    Raises:
        RuntimeError: the file is missing, or not the `written` size the base records (read
            as damage by the caller).
    """
    lists = _lists(index)[1]
    if not isinstance(lists, faiss.OnDiskInvertedLists):
        raise RuntimeError("Error: the base records no on-disk lists")
    path = lists_path(base_file)
    if not path.is_file():
        raise RuntimeError(f"Error: {path.name} missing")
    size = path.stat().st_size
    if size != written or size < lists.totsize:  # a short file would fault when read
        raise RuntimeError(f"Error: {path.name} is {size} bytes, {written} written")
    lists.filename = str(path)
    lists.read_only = True
    lists.prefetch_nthread = 0  # else each search starts 32 threads to read its lists ahead
    lists.do_mmap()


MADV_POPULATE_READ = 22  # Linux 5.14: fault the pages in (read), no copy


def populate(index: faiss.Index) -> bool:
    """Fill this process's page table for the mapped lists of `index` from the page cache
    (`MADV_POPULATE_READ`, reading what is not cached): a long-lived reader (a `serve`
    worker) then scans them without a page fault per 4 KB of each list it first probes
    (10M, `benchmarks/block_lists.py`: 6.10-6.36 ms a search populated, 6.26-6.64 not;
    0.036 s to populate from the page cache). False where there are no mapped lists or the
    kernel cannot."""
    lists = _lists(index)[1]
    if MADVISE is None or not isinstance(lists, faiss.OnDiskInvertedLists) or not lists.totsize:
        return False
    address = int(faiss.rev_swig_ptr(lists.ptr, 1).ctypes.data)  # the mapping's start
    return MADVISE(address, int(lists.totsize), MADV_POPULATE_READ) == 0
