"""Start Prefect's temporary local API early, so that its start-up (seconds) overlaps with
loading torch and the model instead of adding to them.

Prefect starts the same server itself on first use (`SubprocessASGIServer`), but only after
importing its server package in this process (about 3 s of CPU) and only when the flow starts.
Here the server process is launched before anything imports Prefect, with the command line
Prefect uses, and PREFECT_API_URL points this process at it. A configured PREFECT_API_URL
(a real Prefect server) is used as it is.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import flows  # noqa: F401  (applies the project's Prefect settings)

_server: subprocess.Popen | None = None
_url: str | None = None


def _configured_api_url() -> str | None:
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    if "prefect" in sys.modules:  # e.g. a test harness that set the URL in a settings context
        from prefect.settings import PREFECT_API_URL

        return PREFECT_API_URL.value() or None
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def warm_up_api(services: bool = False, database: str | None = None) -> None:
    """Launch the temporary API server unless an API URL is configured; returns at once.

    Args:
        services: run the server's services too (the scheduler that turns deployment
            schedules into flow runs: `bertindex flows serve`); the temporary API of a single
            run leaves them off.
        database: a SQLite file for this server's state instead of Prefect's shared default
            (a long-running server with services writes often; other processes would wait on
            the shared file). Ignored when PREFECT_API_DATABASE_CONNECTION_URL is set.
    """
    global _server, _url
    if _server is not None or _configured_api_url():
        return
    if importlib.util.find_spec("uvicorn") is None:  # let Prefect decide
        return
    port = _free_port()
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_FINAL": "1"}
    if not services:
        env["PREFECT__SERVER_EPHEMERAL"] = "1"
    if database and not os.environ.get("PREFECT_API_DATABASE_CONNECTION_URL"):
        os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = (
            f"sqlite+aiosqlite:///{os.path.abspath(database)}"
        )
    _server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "prefect.server.api.server:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "error",
            "--lifespan",
            "on",
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C reaches the flow (which reports to the API), not the API
        preexec_fn=_die_with_parent,  # noqa: PLW1509  (prctl only; runs before exec)
    )
    _url = f"http://127.0.0.1:{port}/api"
    os.environ["PREFECT_API_URL"] = _url
    atexit.register(stop_api)


def _die_with_parent() -> None:
    """In the server's process: get SIGTERM when this process dies, even by SIGKILL (Linux),
    so a killed `bertindex index` leaves no server behind."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def wait_for_api(timeout: float = 90.0) -> None:
    """Block until the server launched by `warm_up_api` answers its health check."""
    if _server is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _server.poll() is not None:
            raise RuntimeError(
                f"Prefect's temporary API server exited with code {_server.returncode}"
            )
        try:
            with urllib.request.urlopen(f"{_url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"Prefect's temporary API server did not answer within {timeout:.0f} s")


def stop_api() -> None:
    global _server
    if _server is None:
        return
    _server.terminate()
    try:
        _server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        _server.kill()
        _server.wait()
    _server = None
