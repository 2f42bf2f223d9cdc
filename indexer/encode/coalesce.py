"""Concurrent encode calls merged into one forward plan: while one call encodes, the calls that
arrive wait, and the next to run encodes every waiting call's sequences together, then hands
each caller its own rows.

For a server, whose requests each bring a few texts: one forward at a time per process instead
of one per request thread (threads fighting over the same cores, each with a cold cache), and
bigger length-sorted batches across requests. Does not plan batches itself (the encoder does)
nor decide how many threads a forward uses (the calling thread's setting).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

EncodeIds = Callable[[Sequence[Sequence[int]]], np.ndarray]


@dataclass
class _Call:
    """One caller's sequences and, once encoded, its rows or the error its forward raised."""

    seqs: list[Sequence[int]]
    rows: np.ndarray | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Coalescer:
    """`encode_ids` for many threads at once, at most `plans` forward plans at a time.

    Args:
        encode_ids: the encoder's `encode_ids` (framed token ids -> (n, dim) float32, in order).
        max_sequences: sequences one merged plan takes at most (calls past it wait for the
            next); a call with more than this runs alone.
        plans: merged plans running at once (a server process: one per core, since the
            processes of `serve --workers` do not share connections evenly).
    """

    def __init__(self, encode_ids: EncodeIds, max_sequences: int = 256, plans: int = 1):
        self._encode = encode_ids
        self.max_sequences = max_sequences
        self._running = threading.BoundedSemaphore(plans)  # one slot per plan encoding
        self._queue_lock = threading.Lock()  # guards _waiting
        self._waiting: list[_Call] = []

    def encode_ids(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        """The vectors of `seqs`, as `encode_ids` gives them (equal within the encoder's batch
        rounding: the batch they share may hold other callers' sequences).

        Raises:
            Whatever `encode_ids` raised on the plan that held these sequences.
        """
        call = _Call(list(seqs))
        with self._queue_lock:
            self._waiting.append(call)
        while not call.done.is_set():
            with self._running:
                taken = [] if call.done.is_set() else self._take()
                if taken:
                    self._run(taken)
                    continue
            call.done.wait()  # taken by a plan still running
        if call.error is not None:
            raise call.error
        assert call.rows is not None
        return call.rows

    def _take(self) -> list[_Call]:
        """The waiting calls, oldest first, up to `max_sequences` (at least one call)."""
        with self._queue_lock:
            taken: list[_Call] = []
            total = 0
            while self._waiting and (
                not taken or total + len(self._waiting[0].seqs) <= self.max_sequences
            ):
                call = self._waiting.pop(0)
                taken.append(call)
                total += len(call.seqs)
            return taken

    def _run(self, calls: list[_Call]) -> None:
        """Encode `calls` as one plan and give each its rows (or the error)."""
        merged = [s for call in calls for s in call.seqs]
        try:
            vectors = self._encode(merged)
        except BaseException as exc:  # noqa: BLE001 - handed to every caller whose rows were in it
            for call in calls:
                call.error = exc
                call.done.set()
            return
        start = 0
        for call in calls:
            call.rows = vectors[start : start + len(call.seqs)]
            call.done.set()
            start += len(call.seqs)
