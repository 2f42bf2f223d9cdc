"""Which task failures the flows retry (`flows.retry`): I/O that may clear, never a
deterministic error (a 40-minute publish that ran out of memory is not started again)."""

from __future__ import annotations

import errno

import duckdb
import pytest
from prefect.states import Completed, Failed

from flows.index_corpus import delete_missing_task, write_index
from flows.retry import is_transient, retried, transient
from indexer.errors import StoreError, VectorIndexError


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (OSError("interrupted read"), True),
        (OSError(errno.EIO, "I/O error"), True),
        (duckdb.IOException("could not set lock on file"), True),
        (duckdb.TransactionException("conflict"), True),
        (OSError(errno.ENOSPC, "No space left on device"), False),
        (PermissionError(errno.EACCES, "Permission denied"), False),
        (FileNotFoundError(errno.ENOENT, "gone"), False),
        (duckdb.OutOfMemoryException("Out of Memory Error"), False),
        (MemoryError(), False),
        (RuntimeError("std::bad_alloc"), False),
        (VectorIndexError("recall short"), False),
        (StoreError("schema mismatch"), False),
        (ValueError("bad row"), False),
    ],
)
def test_only_failures_that_may_clear_are_retried(exc, retried):
    assert is_transient(exc) is retried
    assert transient(None, None, Failed(data=exc)) is retried


def test_a_failure_without_an_exception_is_not_retried():
    assert transient(None, None, Failed(message="crashed")) is False
    assert transient(None, None, Completed(data=1)) is False


def test_the_writing_tasks_retry_on_that_condition():
    for task in (delete_missing_task, write_index):
        assert task.retries == 2 and task.retry_condition_fn is transient


def failing(*errors):
    """A step that raises `errors` in turn, then returns how many calls it took."""
    calls = []

    def step():
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return len(calls)

    step.calls = calls
    return step


def test_a_retried_step_runs_again_after_a_failure_that_may_clear():
    assert retried(failing(OSError("interrupted read")), delay_s=0)() == 2
    hiccups = [OSError(errno.EIO, "I/O error")] * 2
    assert retried(failing(*hiccups), delay_s=0)() == 3  # two retries
    with pytest.raises(OSError, match="third"):
        retried(failing(*hiccups, OSError(errno.EIO, "third")), delay_s=0)()


@pytest.mark.parametrize(
    "exc", [OSError(errno.ENOSPC, "disk full"), ValueError("bad row"), MemoryError()]
)
def test_a_retried_step_fails_at_once_on_a_deterministic_error(exc):
    step = failing(exc)
    with pytest.raises(type(exc)):
        retried(step, retries=5, delay_s=0)()
    assert len(step.calls) == 1
