"""The run log: runs started, finished or interrupted (`store.runs.recorded_run`, the one way
a job records itself), and the last runs read back. Does not count documents (`counts`)."""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from indexer.core.timeutil import utc_now
from indexer.store.core import StoreCore
from indexer.store.documents import to_json

log = logging.getLogger(__name__)

INTERRUPT_RUNNING = "UPDATE runs SET status = 'interrupted' WHERE status = 'running'"
START_RUN = "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, NULL, 'running', NULL)"
RECORD_RUN = "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?)"
SELECT_LAST_RUNS = (
    "SELECT run_id, kind, started_at, finished_at, status, summary FROM runs "
    "ORDER BY started_at DESC LIMIT ?"
)
SELECT_LAST_OF_KIND = (
    "SELECT run_id, started_at, finished_at, status, summary FROM runs "
    "WHERE kind = ? ORDER BY started_at DESC LIMIT 1"
)
RUN_SUMMARY_KEYS = ("read", "encoded", "deleted", "failed_batches")  # shown by `status`


COMPLETED, FAILED = "completed", "failed"
COMPLETED_WITH_FAILURES = "completed_with_failures"  # some batches failed, the run went on


def new_run_id() -> str:
    """A run id: 12 hex digits of a random UUID."""
    return uuid.uuid4().hex[:12]


def one_line(exc: BaseException) -> str:
    """An exception as the one line a failed run records (500 characters at most)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:500]


@dataclass
class Run:
    """One run being recorded (`store.runs.recorded_run`): what it will log when it ends."""

    id: str
    kind: str
    started: datetime
    status: str = COMPLETED
    summary: dict = field(default_factory=dict)  # counts kept as JSON

    def fail(self, error: str) -> None:
        """End as `failed`, with `error` (one line) in the summary."""
        self.status = FAILED
        self.summary = {**self.summary, "error": error}


class RunLog:
    """The run log (`store.runs`).

    Args:
        core: the open store.
    """

    def __init__(self, core: StoreCore):
        self.core = core

    @contextlib.contextmanager
    def recorded_run(self, kind: str, started: datetime | None = None) -> Iterator[Run]:
        """Record a run in the run log: `running` now, then how it ended. The one way any job
        (index, delete, annotate, dedup, report, review, reindex, doctor) logs itself.

        The body fills `run.summary` (and may `run.fail(...)` or set another status); an
        exception records `failed` with the summary so far and its one-line error, then
        propagates. Runs still `running` from earlier were killed: this process holds the only
        write connection, so no other run can be alive, and they are marked `interrupted`.

        Args:
            kind: `index`, `delete`, `annotate`, `dedup`, `report`, `review`, `reindex`, `doctor`.
            started: when the work began, where it began before the store could be opened
                (default: now).
        Yields:
            The `Run`: its `id` goes into the rows the run writes (`rejected.run_id`, ...).
        """
        run = Run(new_run_id(), kind, started or utc_now())
        self.core.con.execute(INTERRUPT_RUNNING)
        self.core.con.execute(START_RUN, [run.id, run.kind, run.started])
        try:
            yield run
        except BaseException as exc:
            run.fail(one_line(exc))
            try:
                self._finish_run(run)
            except Exception as inner:  # noqa: BLE001 - the run's own error is the one to raise
                log.warning("could not record the end of run %s: %s", run.id, inner)
            raise
        self._finish_run(run)

    def _finish_run(self, run: Run) -> None:
        finished = utc_now()
        self.core.con.execute(
            RECORD_RUN, [run.id, run.kind, run.started, finished, run.status, to_json(run.summary)]
        )

    def last(self, limit: int = 5) -> list[dict]:
        """The latest runs, newest first.

        Args:
            limit: how many.
        Returns:
            Dicts of run_id, kind, started_at, finished_at, status and the summary's
            read/encoded/deleted/failed_batches counts where present.
        """
        out = []
        for run_id, kind, started, finished, status, summary in self.core.con.execute(
            SELECT_LAST_RUNS, [limit]
        ).fetchall():
            info = json.loads(summary) if summary else {}
            out.append(
                {
                    "run_id": run_id,
                    "kind": kind,
                    "started_at": started,
                    "finished_at": finished,
                    "status": status,
                    **{k: info[k] for k in RUN_SUMMARY_KEYS if k in info},
                }
            )
        return out

    def last_of(self, kind: str) -> dict | None:
        """The latest run of one kind (`index`, `annotate`, `dedup`, `report`, ...).

        Returns:
            {run_id, started_at, finished_at, status, summary} or None when none ran.
        """
        row = self.core.con.execute(SELECT_LAST_OF_KIND, [kind]).fetchone()
        if row is None:
            return None
        return {
            "run_id": row[0],
            "started_at": row[1],
            "finished_at": row[2],
            "status": row[3],
            "summary": json.loads(row[4]) if row[4] else {},
        }
