"""`bertindex serve` as a real process: it listens on 127.0.0.1 only when no --host is given,
and refuses a body over --max-request-bytes (413) or a POST without a Content-Length (411)
before reading it, while an honest request is answered. With --workers 2, two processes
answer on one port and stop with the server; a bad store fails before any of them starts.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from port_kit import free_port, listeners
from testkit import ROOT

from indexer.indexing.run import run_index

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict | None = None,
    chunked: bool = False,
) -> tuple[int, dict]:
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


def start_server(config: Path, port: int, *args: str) -> tuple[subprocess.Popen, dict]:
    """`bertindex serve` in a process, once /health answers: (process, health)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "search.cli.main",
            "serve",
            "--config",
            str(config),
            "--port",
            str(port),
            *args,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while True:
        assert server.poll() is None, server.communicate()[1].decode()[-2000:]
        try:
            status, health = request(port, "GET", "/health")
            assert status == 200
            return server, health
        except OSError:
            assert time.monotonic() < deadline, "server did not start in 120 s"
            time.sleep(0.2)


def stop(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def children(pid: int) -> list[int]:
    """Pids of the live processes whose parent is `pid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == str(pid) and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` runs (an exited process not yet reaped, state Z, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_serve_binds_localhost_and_refuses_oversized_bodies(tiny_config, small_corpus, tmp_path):
    run_index([str(small_corpus)], tiny_config)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config.model_dump()))
    port = free_port()
    server, health = start_server(config, port, "--max-request-bytes", "1024", "--workers", "1")
    try:
        assert health["status"] == "ok" and health["index_version"]
        assert listeners(port) == ["0100007F"]  # 127.0.0.1 only: no 0.0.0.0, no IPv6

        honest = json.dumps({"query": "gzip", "k": 2, "mode": "keyword"}).encode()
        status, answer = request(
            port, "POST", "/search", honest, {"Content-Type": "application/json"}
        )
        assert status == 200 and [h["id"] for h in answer["hits"]] == ["b2"]
        big = json.dumps({"query": "gzip", "where": {"lang": "x" * 2000}}).encode()
        status, answer = request(port, "POST", "/search", big, {"Content-Type": "application/json"})
        assert status == 413 and "1024 bytes" in answer["detail"]
        status, answer = request(port, "POST", "/search", honest, chunked=True)
        assert status == 411 and "Content-Length" in answer["detail"]
        status, _ = request(port, "GET", "/health")  # still serving
        assert status == 200
    finally:
        stop(server)
    assert "serving" in server.stderr.read().decode()


def test_serve_workers_answer_on_one_port_and_stop_with_it(tiny_config, small_corpus, tmp_path):
    run_index([str(small_corpus)], tiny_config)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config.model_dump()))
    port = free_port()
    server, _ = start_server(config, port, "--workers", "2")
    try:
        workers = children(server.pid)
        assert len(workers) >= 2  # uvicorn's supervisor may add a helper of its own
        body = json.dumps({"query": "gzip", "k": 2, "mode": "keyword"}).encode()
        for _ in range(20):  # new connections: the kernel spreads them over the workers
            status, answer = request(
                port, "POST", "/search", body, {"Content-Type": "application/json"}
            )
            assert status == 200 and [h["id"] for h in answer["hits"]] == ["b2"]
        assert listeners(port) == ["0100007F"]
    finally:
        stop(server)
    assert "(2 processes)" in server.stderr.read().decode()
    deadline = time.monotonic() + 30  # a loaded machine takes a while to reap them
    while [pid for pid in workers if alive(pid)]:
        assert time.monotonic() < deadline, "worker processes outlived the server"
        time.sleep(0.1)


def test_serve_a_bad_store_fails_before_any_worker(tiny_config, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config.model_dump()))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "search.cli.main",
            "serve",
            "--config",
            str(config),
            "--store",
            str(tmp_path / "nothing"),
            "--port",
            str(free_port()),
            "--workers",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1 and "nothing" in result.stderr
    assert "serving" not in result.stderr


def test_worker_count(tiny_config, small_corpus, monkeypatch):
    from indexer.index.version_files import version_files
    from indexer.query.searcher import Searcher
    from indexer.store import Store
    from search import workers
    from search.server import create_app

    run_index([str(small_corpus)], tiny_config)
    with Store(tiny_config.store.path, read_only=True) as store:
        app = create_app(Searcher(tiny_config, store))
        assert workers.worker_count(3, app) == 3
        # the vector index is mapped: its file counted once for all processes, only what a
        # mapped load keeps (the ids) and the model per process
        searcher = app.app.state.searcher
        private, shared = workers._loaded_bytes(searcher)
        base = version_files(tiny_config.store.path, searcher.index.version)["base"]
        model = getattr(searcher.encoder, "model_file", None)  # None: the torch encoder
        model_bytes = model.stat().st_size if model is not None else 0
        assert 0 < shared < base.stat().st_size  # a fresh build: a base, no delta
        assert private + shared == base.stat().st_size + model_bytes
        monkeypatch.setattr(os, "cpu_count", lambda: 8)
        monkeypatch.setattr(workers, "_available_memory", lambda: 64 << 30)
        assert workers.worker_count("auto", app) == workers.MAX_AUTO_WORKERS
        # a mapped part larger than the memory (a 10M index) is page cache: no fewer processes
        monkeypatch.setattr(workers, "_loaded_bytes", lambda _: (private, 100 << 30))
        assert workers.worker_count("auto", app) == workers.MAX_AUTO_WORKERS
        monkeypatch.undo()
        monkeypatch.setattr(os, "cpu_count", lambda: 8)
        # room for one copy beside what the machine has free: one process
        monkeypatch.setattr(workers, "_available_memory", lambda: workers.WORKER_OVERHEAD_BYTES * 3)
        assert workers.worker_count("auto", app) == 1
        monkeypatch.setattr(os, "cpu_count", lambda: 1)
        monkeypatch.setattr(workers, "_available_memory", lambda: 64 << 30)
        assert workers.worker_count("auto", app) == 1
