"""When a flow's task retries: only after a failure that may pass on its own.

Prefect retries a failed task `retries` times whatever the failure. A publish of ten million
documents that failed on a deterministic error (DuckDB's memory limit, a FAISS allocation, an
index that cannot reach its target, a bad config) then started the whole 40-minute build again
and failed the same way. `transient` is every retrying task's `retry_condition_fn`: it retries
I/O errors that can clear (an interrupted read, a file another process held, a connection or
transaction DuckDB refused) and nothing else; a full or read-only disk and missing permissions
need a person, so they fail at once, as does every other error (named in the run summary).

A step run once a batch (an index run's commit) is not a Prefect task: a task run costs ~3 ms
of this process's CPU and ~25 ms of the API server's (its states and events), and a 10M run
has ~4,900 commits (docs/design.md). `retried` gives such a step the tasks' policy.
"""

from __future__ import annotations

import errno
import functools
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from indexer.store import is_transient_store_error

log = logging.getLogger(__name__)
T = TypeVar("T")
NEEDS_A_PERSON = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT}


def is_transient(exc: BaseException) -> bool:
    """Whether a task that raised `exc` may succeed if run again unchanged."""
    if isinstance(exc, OSError):
        return exc.errno not in NEEDS_A_PERSON
    return is_transient_store_error(exc)


def transient(task, task_run, state) -> bool:
    """Prefect `retry_condition_fn`: retry the failed `state` only when its exception
    `is_transient` (a failure without an exception, e.g. a crashed run, is not retried)."""
    exc = state.result(raise_on_failure=False)
    return isinstance(exc, BaseException) and is_transient(exc)


def retried(step: Callable[..., T], retries: int = 2, delay_s: float = 1.0) -> Callable[..., T]:
    """`step` run again after a failure that `is_transient`, up to `retries` times, `delay_s`
    apart: the policy of the flows' retrying tasks, without a task run a call."""

    @functools.wraps(step)
    def call(*args, **kwargs) -> T:
        for attempt in range(retries + 1):
            try:
                return step(*args, **kwargs)
            except Exception as exc:
                if attempt == retries or not is_transient(exc):
                    raise
                log.warning("%s failed (%s); retrying in %.0f s", step.__name__, exc, delay_s)
                time.sleep(delay_s)
        raise AssertionError("unreachable")

    return call
