"""When a flow's task retries: only after a failure that may pass on its own.

Prefect retries a failed task `retries` times whatever the failure. A publish of ten million
documents that failed on a deterministic error (DuckDB's memory limit, a FAISS allocation, an
index that cannot reach its target, a bad config) then started the whole 40-minute build again
and failed the same way. `transient` is every retrying task's `retry_condition_fn`: it retries
I/O errors that can clear (an interrupted read, a file another process held, a connection or
transaction DuckDB refused) and nothing else; a full or read-only disk and missing permissions
need a person, so they fail at once, as does every other error (named in the run summary).
"""

from __future__ import annotations

import errno

from indexer.store import is_transient_store_error

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
