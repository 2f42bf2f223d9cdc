"""The store's single-writer lock (`<store>/writer.lock`, an flock). Does not open the
database: `Store` takes it before connecting for writes, `reindex` and `doctor` take it alone."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from indexer.errors import StoreBusy

LOCK_FILE = "writer.lock"
# How long a writer waits for the lock before it is refused: longer than the brief writes a
# server makes (a page label, a token's last use: milliseconds), far shorter than a run. So a
# `token revoke` or `review import` never fails because a page was being used, and a second
# `index` still learns at once (in 2 s) that another run holds the store.
WAIT_S = 2.0
_POLL_S = 0.05


class WriterLock:
    """The store's single-writer lock: held by every writing Store, and by `reindex` and
    `doctor` across work done with no writing Store open.

    A second writer waits at most `wait_s` (never queued behind a run): then the error names the
    store and the process holding it (pid, command, start time, written into the lock file).
    Released by the kernel when the holder dies, SIGKILL included.

    Args:
        store_dir: the store directory (must exist).
        wait_s: how long to retry a held lock before refusing.
    """

    def __init__(self, store_dir: Path, wait_s: float = WAIT_S):
        import fcntl

        self.path = Path(store_dir) / LOCK_FILE
        self._fh = open(self.path, "a+")  # noqa: SIM115  (held open: the lock lives with it)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() < deadline:
                    time.sleep(_POLL_S)
                    continue
            self._fh.close()
            raise StoreBusy(
                f"store {store_dir} is being written by another bertindex process "
                f"({self.holder()}); wait for it to finish and run again. Searches keep "
                "working meanwhile."
            ) from None
        started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:200] if sys.argv else "?"
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(json.dumps({"pid": os.getpid(), "command": command, "since": started}))
        self._fh.flush()

    def holder(self) -> str:
        """Who holds the lock, as its holder wrote it ("pid 123: bertindex index …, since …")."""
        try:
            info = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            info = {}
        if not info.get("pid"):
            return "process unknown"
        return f"pid {info['pid']}: {info.get('command', '?')}, since {info.get('since', '?')}"

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        if not self._fh.closed:
            self._fh.close()  # closing the file releases the flock
