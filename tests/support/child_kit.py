"""Generators for `indexer.core.in_process` tests: a child process imports them by module and
name (tests/support is on its `sys.path` as on the parent's)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator


def numbers(n: int, fail_with: str | None = None) -> Iterator[int]:
    """0 .. n-1, then a ValueError naming `fail_with` (a row, say) when given."""
    yield from range(n)
    if fail_with is not None:
        raise ValueError(f"{fail_with}: unreadable")


def unpicklable_failure() -> Iterator[int]:
    """One item, then an exception holding a lock (it cannot be pickled back)."""
    yield 1
    error = RuntimeError("reader broke")
    error.lock = threading.Lock()  # type: ignore[attr-defined]
    raise error


def pid_then_forever() -> Iterator[int]:
    """The child's pid, then numbers without end (until the parent stops it)."""
    yield os.getpid()
    i = 0
    while True:
        yield i
        i += 1


def chatty(n: int) -> Iterator[int]:
    """0 .. n-1, printing to standard output between them as a library might: through Python's
    `print` and straight to descriptor 1."""
    for i in range(n):
        print(f"chatty print {i}")
        os.write(1, f"chatty fd1 {i}\n".encode())
        yield i
