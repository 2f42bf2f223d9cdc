"""Python's cycle collector held back while a long job runs: objects alive when it starts are
not traversed again, and a full collection comes rarely. Does not turn the collector off.

A process that has imported torch and transformers tracks ~400,000 objects, and each full
collection traverses them all (~0.25 s). An index run allocates records, dicts and tuples by
the million, most freed by reference counting, yet enough live a while (batches read ahead,
held, merged) to set off a full collection every second or two: in a re-run of a million
documents with 1 % changed, 23 full collections took 8.0 of its 42 seconds, 10.7 with the
younger generations (`benchmarks/gc_share.py`; docs/design.md). Within `fewer_collections()`,
what exists at the start is frozen (`gc.freeze`: skipped by every collection) and the
thresholds raised, so young cycles are still collected and old ones after; the settings
before come back on leaving, the last of overlapping callers restoring them.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

# allocations between young collections, young collections between middle ones, middle ones
# between full ones (CPython's defaults: 700, 10, 10)
THRESHOLDS = (10_000, 50, 1_000)

_lock = threading.Lock()
_depth = 0
_before: tuple[int, int, int] | None = None
_froze = False  # whether the first block froze (not when the process had frozen objects)


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Freeze what exists and raise the collector's thresholds for the block.

    Returns:
        A context manager; the thresholds before it, and a collector with nothing frozen,
        come back when the last overlapping block ends.
    """
    global _depth, _before, _froze
    with _lock:
        if _depth == 0:
            _before, _froze = gc.get_threshold(), gc.get_freeze_count() == 0
            if _froze:  # else the process manages its own frozen objects: left as they are
                gc.freeze()
            gc.set_threshold(*THRESHOLDS)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _before is not None:
                gc.set_threshold(*_before)
                if _froze:
                    gc.unfreeze()
