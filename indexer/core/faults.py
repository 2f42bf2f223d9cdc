"""Crash points for the crash-safety tests: `BERTINDEX_CRASH_AT=NAME[:N]` makes the process
SIGKILL itself the N-th time (default 1st) it reaches crash point NAME.

Does nothing unless that variable is set; never used to handle real errors.
"""

from __future__ import annotations

import os
import signal

_hits: dict[str, int] = {}

# Where the writer can be killed with visible consequences, in the order a run reaches them.
POINTS = (
    "batch.before_commit",  # inside a batch's DuckDB transaction, rows inserted, not committed
    "batch.after_commit",  # batch committed, FAISS index not yet updated
    # inside a delete transaction (`on_missing: delete`, `bertindex delete`)
    "delete.before_commit",
    "snapshot.partial",  # half of the store tables' snapshot segments written
    "index.before_rename",  # new index version written to its temporary folder
    "index.before_pointer",  # version folder in place, CURRENT still names the old one
    "index.before_cleanup",  # CURRENT switched, old versions not yet removed
    "run.before_record",  # everything done except the run's final record
    "reindex.before_swap",  # new generation encoded and published, store file not replaced
    "reindex.before_pointer",  # store file replaced, CURRENT still names the old version
)
# Where `bertindex adapt` can be killed (tests/indexer/adapt/test_adapt.py: a resume equals an
# unbroken run): a checkpoint written, training about to go on.
ADAPT_POINTS = ("adapt.after_checkpoint",)
# Where a cluster worker (not the writer) can be killed: a partition encoded or annotated, its
# result not yet sent.
WORKER_POINTS = ("partition.before_return",)


def crash_point(name: str) -> None:
    """SIGKILL this process when BERTINDEX_CRASH_AT names this point (and hit count)."""
    wanted = os.environ.get("BERTINDEX_CRASH_AT")
    if not wanted:
        return
    point, _, count = wanted.partition(":")
    if point != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == int(count or 1):
        os.kill(os.getpid(), signal.SIGKILL)


def arm(wanted: str | None) -> None:
    """Set BERTINDEX_CRASH_AT to `wanted` (None: unset) in this process and start its counts
    again: how a test arms a running cluster worker (`distributed.Client.run`)."""
    _hits.clear()
    if wanted is None:
        os.environ.pop("BERTINDEX_CRASH_AT", None)
    else:
        os.environ["BERTINDEX_CRASH_AT"] = wanted
