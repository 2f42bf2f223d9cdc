"""A generator run in a child Python process, its items pickled back through a pipe: work that
holds the GIL (parsing and validating millions of rows) off the process that plans, encodes
and commits. Does not know what the items are.

The child is `sys.executable` started afresh (not a fork of a process that holds threads, a
DuckDB connection and torch), told the parent's `sys.path`, the generator function (by module
and name: it must be importable) and its arguments. Items come back in order; an exception the
generator raises is raised to the consumer where the next item would have come (as itself
when it pickles, else as a `ChildError` carrying the child's traceback). The pipe bounds how far
the child runs ahead. Leaving the iteration early (done, an error, the consumer's own failure)
kills the child; a parent that dies leaves the child writing to a closed pipe, which ends it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any

# the child: read the parent's sys.path, then run `child()` (below) in this module
_BOOT = (
    "import pickle, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "sys.path[:0] = pickle.load(sys.stdin.buffer); "
    "from indexer.core.in_process import child; child()"
)
_ITEM, _DONE, _ERROR = 0, 1, 2
_PIPE_BYTES = 1 << 20  # the child's output pipe (Linux, as far as an unprivileged process may)


class ChildError(RuntimeError):
    """An exception in the child that could not be pickled back: its text and traceback."""


def iterate_in_process(fn: Callable[..., Iterator[Any]], *args: Any) -> Iterator[Any]:
    """Yield what `fn(*args)` yields, run in a child process.

    Args:
        fn: a generator function defined at a module's top level (the child imports it).
        args: its arguments (pickled to the child).
    Returns:
        An iterator of the items, in order; closing it kills the child.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", _BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    _widen(proc.stdout)
    try:
        try:
            pickle.dump(list(sys.path), proc.stdin)
            pickle.dump((fn.__module__, fn.__qualname__, args), proc.stdin, protocol=5)
            proc.stdin.close()
        except BrokenPipeError:  # the child ended before it read its arguments
            raise _ended(proc) from None
        while True:
            try:
                kind, value = pickle.load(proc.stdout)
            except EOFError:
                raise _ended(proc) from None
            if kind == _ITEM:
                yield value
            elif kind == _DONE:
                return
            else:
                raise value
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(BrokenPipeError):  # unwritten arguments of a child gone
            proc.stdin.close()
        proc.stdout.close()
        proc.wait()


def _ended(proc: subprocess.Popen) -> ChildError:
    """The error for a child that ended before it finished (its traceback, if any, went to
    stderr)."""
    return ChildError(f"the reading process ended early (exit code {proc.wait()})")


def child() -> None:
    """The child's side: run the generator the parent named, pickle each item to the parent
    (`_items_pipe`: what started as its stdout)."""
    module, name, args = pickle.load(sys.stdin.buffer)
    out = _items_pipe()
    fn = getattr(__import__(module, fromlist=[name]), name)
    try:
        try:
            for item in fn(*args):
                pickle.dump((_ITEM, item), out, protocol=5)
                out.flush()
            message: tuple = (_DONE, None)
        except Exception as exc:  # noqa: BLE001  (sent to the parent, raised there)
            message = (_ERROR, _picklable(exc))
        pickle.dump(message, out, protocol=5)
        out.flush()
    except BrokenPipeError:  # the parent is gone or stopped reading: no flush at exit
        os._exit(0)


def _items_pipe():
    """The pipe to the parent on a descriptor of its own, descriptor 1 (`sys.stdout`'s) then
    pointed at standard error: what the generator or a library under it prints, through Python
    or C, goes there instead of into the items' stream, where the parent failed to unpickle it
    (a `ModuleNotFoundError` named after the printed text)."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "wb")  # not inherited by the child's own children
    os.dup2(2, 1)
    return out


def _picklable(exc: Exception) -> Exception:
    """`exc` when it survives a pickle round trip, else a ChildError with its traceback."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001
        text = "".join(traceback.format_exception(exc))
        return ChildError(f"{type(exc).__name__}: {exc}\n(in the reading process)\n{text}")


def _widen(pipe: Any) -> None:
    """Let the child's pipe hold more than 64 KB, so that it runs a batch or so ahead."""
    try:
        fcntl.fcntl(pipe.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BYTES)
    except OSError:  # above the system's limit
        pass
