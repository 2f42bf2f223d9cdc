"""`bertindex search --server URL` is a thin client: against a real `bertindex serve` process,
the hits come back while the client process never imports torch, FAISS, tantivy, DuckDB,
transformers, onnxruntime or numpy (it asks; the server holds the model and indexes)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import yaml
from port_kit import stop
from testkit import ROOT

from indexer.indexing.run import run_index

pytestmark = pytest.mark.heavy

HEAVY = ("torch", "faiss", "tantivy", "duckdb", "transformers", "onnxruntime", "numpy")
START_SECONDS = 120  # the server loads the model and indexes before it answers /health
CLIENT_SECONDS = 60

# run in a fresh interpreter: the CLI as a user runs it, then what it loaded
CLIENT = textwrap.dedent("""
    import json, sys
    from click.testing import CliRunner
    from search.cli.main import main

    result = CliRunner().invoke(main, ["search", "gzip", "--server", sys.argv[1], "--mode",
                                       "keyword", "-k", "2", "--json"])
    print(json.dumps({"exit_code": result.exit_code, "stdout": result.stdout,
                      "stderr": result.stderr,
                      "loaded": [m for m in sys.argv[2:] if m in sys.modules]}))
""")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def healthy(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def test_search_through_a_server_loads_no_model_or_index(tiny_config, small_corpus, tmp_path):
    run_index([str(small_corpus)], tiny_config)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config.model_dump()))
    port = free_port()
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
            "--workers",
            "1",
        ],
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + START_SECONDS
        while not healthy(port):
            assert server.poll() is None, server.communicate(timeout=10)[1].decode()[-2000:]
            assert time.monotonic() < deadline, f"server did not start in {START_SECONDS} s"
            time.sleep(0.2)
        client = subprocess.run(
            [sys.executable, "-c", CLIENT, f"http://127.0.0.1:{port}", *HEAVY],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=CLIENT_SECONDS,
            check=False,
        )
    finally:
        stop(server, timeout=20)
    assert client.returncode == 0, client.stderr[-2000:]
    report = json.loads(client.stdout.splitlines()[-1])
    assert report["exit_code"] == 0, report["stderr"]
    hits = [json.loads(line) for line in report["stdout"].splitlines()]
    assert [h["id"] for h in hits][:1] == ["b2"] and len(hits) <= 2
    assert hits[0]["keyword"] is not None
    assert report["loaded"] == [], f"the thin client imported {report['loaded']}"
