"""Which task failures the flows retry (`flows.retry`): I/O that may clear, never a
deterministic error (a 40-minute publish that ran out of memory is not started again)."""

from __future__ import annotations

import errno

import duckdb
import pytest
from prefect.states import Completed, Failed

from flows.index_corpus import commit, write_index
from flows.retry import is_transient, transient
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
    for task in (commit, write_index):
        assert task.retries == 2 and task.retry_condition_fn is transient
