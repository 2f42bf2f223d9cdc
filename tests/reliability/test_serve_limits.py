"""`bertindex serve` as a real process: it listens on 127.0.0.1 only when no --host is given,
and refuses a body over --max-request-bytes (413) or a POST without a Content-Length (411)
before reading it, while an honest request is answered.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml
from conftest import ROOT

from indexer.ingest.run import run_index
from reliability.support import one_torch_thread  # noqa: F401


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def request(port: int, method: str, path: str, body: bytes | None = None,
            headers: dict | None = None, chunked: bool = False) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        if chunked:  # no Content-Length: the body streams in chunks
            conn.putrequest(method, path)
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            conn.send(f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
        else:
            conn.request(method, path, body=body, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read() or b"{}")
    finally:
        conn.close()


def test_serve_binds_localhost_and_refuses_oversized_bodies(tiny_config, small_corpus, tmp_path):
    run_index([str(small_corpus)], tiny_config)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config.model_dump()))
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    server = subprocess.Popen(
        [sys.executable, "-m", "search.cli.main", "serve", "--config", str(config), "--port",
         str(port), "--max-request-bytes", "1024"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.communicate()[1].decode()[-2000:]
            try:
                status, health = request(port, "GET", "/health")
                break
            except OSError:
                assert time.monotonic() < deadline, "server did not start in 120 s"
                time.sleep(0.2)
        assert status == 200 and health["vectors"] > 0
        assert listeners(port) == ["0100007F"]  # 127.0.0.1 only: no 0.0.0.0, no IPv6

        honest = json.dumps({"query": "gzip", "k": 2, "mode": "keyword"}).encode()
        status, answer = request(port, "POST", "/search", honest,
                                 {"Content-Type": "application/json"})
        assert status == 200 and [h["id"] for h in answer["hits"]] == ["b2"]
        big = json.dumps({"query": "gzip", "where": {"lang": "x" * 2000}}).encode()
        status, answer = request(port, "POST", "/search", big,
                                 {"Content-Type": "application/json"})
        assert status == 413 and "1024 bytes" in answer["detail"]
        status, answer = request(port, "POST", "/search", honest, chunked=True)
        assert status == 411 and "Content-Length" in answer["detail"]
        status, _ = request(port, "GET", "/health")  # still serving
        assert status == 200
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert "serving" in server.stderr.read().decode()
