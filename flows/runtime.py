"""Start Prefect's temporary local API early, in the background, so that its start-up
(seconds) overlaps with loading the model instead of adding to it.
"""

from __future__ import annotations

import os
import threading

import flows  # noqa: F401  (applies the project's Prefect settings)

_warmup: threading.Thread | None = None
_error: list[BaseException] = []


def warm_up_api() -> None:
    """Begin starting the ephemeral API server unless a PREFECT_API_URL is configured."""
    global _warmup
    if _warmup is not None or os.environ.get("PREFECT_API_URL"):
        return
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    # read in this thread: a test harness sets these in a context the worker would not see
    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return

    def start() -> None:
        try:
            from prefect.server.api.server import SubprocessASGIServer

            SubprocessASGIServer().start()
        except BaseException as exc:  # reported when the flow starts
            _error.append(exc)

    _warmup = threading.Thread(target=start, name="prefect-api-warmup", daemon=True)
    _warmup.start()


def wait_for_api() -> None:
    """Block until the background start-up (if any) has finished; re-raise its error."""
    if _warmup is not None:
        _warmup.join()
    if _error:
        raise _error[0]
