"""An iterator run ahead of its consumer on a thread, through a bounded queue: a reader parses
the next batches while the caller encodes and writes the last ones.

Items arrive in order; an exception the iterator raises is raised to the consumer where the
item would have come. Leaving the block (done, or on an error) stops the thread and closes
the iterator. Does not know what the items are.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

from indexer.core.stages import in_context

T = TypeVar("T")

_END = object()
_WAIT = 0.1  # seconds between looks at the stop flag while the queue is full


@contextlib.contextmanager
def prefetched(items: Iterator[T], depth: int, name: str = "prefetch") -> Iterator[Iterator[T]]:
    """Yield an iterator over `items`, which a thread runs up to `depth` items ahead.

    Args:
        items: the iterator to run ahead (closed on the thread when the block ends).
        depth: items held ready at most (>= 1): what bounds the memory the thread may fill.
        name: the thread's name.
    Returns:
        A context manager yielding the items in order.
    """
    ahead = _Ahead(items, depth)
    thread = threading.Thread(target=in_context(ahead.produce), name=name, daemon=True)
    thread.start()
    try:
        yield ahead.consume()
    finally:
        ahead.stop.set()
        thread.join()


class _Ahead:
    """The queue between the thread that runs `items` and the consumer."""

    def __init__(self, items: Iterator, depth: int):
        self.items = items
        self.ready: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self.stop = threading.Event()

    def put(self, entry: tuple[bool, object]) -> bool:
        """Queue `entry` once there is room; False when the consumer left first."""
        while not self.stop.is_set():
            try:
                self.ready.put(entry, timeout=_WAIT)
                return True
            except queue.Full:
                continue
        return False

    def produce(self) -> None:
        try:
            for item in self.items:
                if not self.put((True, item)):
                    return
            self.put((False, _END))
        except BaseException as exc:  # noqa: BLE001  (raised again to the consumer)
            self.put((False, exc))
        finally:
            close = getattr(self.items, "close", None)
            if close is not None:
                close()

    def consume(self) -> Iterator:
        while True:
            ok, item = self.ready.get()
            if ok:
                yield item
            elif item is _END:
                return
            else:
                raise item
