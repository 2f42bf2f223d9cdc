"""Ports for tests that start `bertindex serve` as a real process: a free local port, starting
the process, the addresses listening on a port as the kernel lists them, and stopping it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from testkit import ROOT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_serve(config_file, port: int, *options: str, env: dict | None = None):
    """`bertindex serve --config CONFIG_FILE --port PORT [OPTIONS]` on 127.0.0.1, returned once
    `/health` answers (`env`: variables added to the test's environment)."""
    import httpx

    server = subprocess.Popen(
        [sys.executable, "-m", "search.cli.main", "serve", "--config", str(config_file)]
        + ["--port", str(port), *options],
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 180
    while True:
        assert server.poll() is None, server.communicate(timeout=10)[1].decode()[-2000:]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "server did not start in 180 s"
        time.sleep(0.3)


def listeners(port: int) -> list[str]:
    """Local addresses (hex, as the kernel lists them) of TCP sockets listening on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.append(address)
    return found


def stop(process: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)
