"""Seconds a run spends in each of its stages (read, plan, tokenize, encode, commit, ...), for
the run summary: `time.perf_counter` around the calls, nothing sampled.

A second is counted once, for the innermost stage open on its thread (the FAISS build inside
the publish step is `vector_index`, not `publish`). Stages that run on other threads at the
same time each count their own busy seconds, so with overlap the stages add up to more than
the wall time; no one stage runs on two threads at once, so none exceeds it.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

_CURRENT: ContextVar[StageClock | None] = ContextVar("bertindex_stage_clock", default=None)


class StageClock:
    """Busy seconds per stage, and the wall time since the clock was made."""

    def __init__(self, stages: tuple[str, ...]):
        self.busy = dict.fromkeys(stages, 0.0)
        self.started = time.perf_counter()
        self._lock = threading.Lock()
        self._open = threading.local()  # this thread's stack of [stage, seconds inside]

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Count the block's seconds for `stage`, less those of stages opened inside it."""
        stack = self._open.__dict__.setdefault("stack", [])
        stack.append([stage, 0.0])
        start = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            _, inner = stack.pop()
            if stack:
                stack[-1][1] += spent
            with self._lock:
                self.busy[stage] = self.busy.get(stage, 0.0) + spent - inner

    def summary(self) -> dict[str, float]:
        """Seconds per stage and `wall`, rounded to the millisecond."""
        with self._lock:
            out = {stage: round(seconds, 3) for stage, seconds in self.busy.items()}
        return out | {"wall": round(time.perf_counter() - self.started, 3)}


@contextlib.contextmanager
def running(clock: StageClock) -> Iterator[StageClock]:
    """Make `clock` the one `timed` counts into, in this context (and the threads started
    with `in_context`)."""
    token = _CURRENT.set(clock)
    try:
        yield clock
    finally:
        _CURRENT.reset(token)


def timed(stage: str) -> contextlib.AbstractContextManager:
    """`StageClock.timed` on the running clock; nothing when no clock runs."""
    clock = _CURRENT.get()
    return clock.timed(stage) if clock is not None else contextlib.nullcontext()


def timed_iter(stage: str, items: Iterator[T]) -> Iterator[T]:
    """`items`, each `next` counted for `stage` (a reader's parsing happens there)."""
    while True:
        with timed(stage):
            item = next(items, _END)
        if item is _END:
            return
        yield item  # type: ignore[misc]


def in_context(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` run in a copy of the caller's context (a fresh copy per call: calls may overlap),
    so that a worker thread counts into the caller's clock."""
    context = contextvars.copy_context()
    return lambda *args, **kwargs: context.copy().run(fn, *args, **kwargs)


_END = object()
