"""A hybrid query's two sides at the same time: the dense side (encoding the query, then
FAISS) on the calling thread, the keyword side on a pool thread.

The query encoder (onnxruntime or torch), FAISS's search, the rescoring's reads and tantivy's
BM25 search all release the GIL, so the sides overlap on a second core. At 10M documents (AMD
EPYC, 2 cores, pages cached) a hybrid query's dense side took 22.8 ms and its keyword side
43.8 ms; the whole ranking 65.4 ms one side after the other, 54.2 ms at the same time
(`benchmarks/hybrid_split.py`). The CPU a query uses is the same either way, so a server's
throughput under load does not change: only a query's wait does.

Only unfiltered queries are split: a filter is answered by the store's DuckDB connection,
which serves one thread at a time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

A = TypeVar("A")
B = TypeVar("B")

# one pool per process, shared by a server's request threads: a query waits for a free
# thread rather than starting one. Made in the process that uses it: a pool inherited through
# a fork counts threads that the child does not have, and would never run its work.
_POOL: tuple[int, ThreadPoolExecutor] | None = None
_MAKING = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _MAKING:
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (os.getpid(), ThreadPoolExecutor(8, thread_name_prefix="bertindex-side"))
        return _POOL[1]


def both(here: Callable[[], A], there: Callable[[], B]) -> tuple[A, B]:
    """(`here()`, `there()`), `there` run on a pool thread while `here` runs on this one. An
    exception of either is raised here (of `here` first); a failed `here` does not wait for
    `there`."""
    later = _pool().submit(there)
    first = here()
    return first, later.result()
