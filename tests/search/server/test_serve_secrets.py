"""TLS and secrets of `bertindex serve` (issue 40): https with a throw-away CA (`trustme`) and
the thin client verifying it; the bind rules off loopback (tokens over plain http need
--insecure-http, warned); the session address to a 0600 file when stderr is no terminal;
/health without paths; a 409 that names no lock holder; tokens from the environment or a
file, never argv; token expiry; no Authorization across origins on a redirect; chunked bodies
refused (411)."""

from __future__ import annotations

import http.client
import http.server
import json
import logging
import os
import ssl
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest
import yaml
from click.testing import CliRunner
from port_kit import free_port, stop
from testkit import ROOT

from indexer.errors import InputError
from indexer.indexing.run import run_index
from indexer.store import Store, read_token_table
from indexer.store.tokens import read_tokens_file
from search.cli.main import main
from search.cli.serve import SESSION_FILE
from search.client import TOKEN_ENV, remote_search
from search.error_map import BUSY_DETAIL

START_SECONDS = 180  # two processes load the model and indexes before the port answers


def tls_files(tmp_path):
    """A throw-away CA and a certificate it issued for 127.0.0.1: (ca.pem, cert.pem, key.pem)."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    paths = [tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem")]
    ca.cert_pem.write_to_path(str(paths[0]))
    cert.private_key_and_cert_chain_pem.write_to_path(str(paths[1]))  # the chain, key ignored
    cert.private_key_pem.write_to_path(str(paths[2]))
    return paths


def https_status(
    port: int, context: ssl.SSLContext, method: str = "GET", path: str = "/health", **kwargs
) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        conn.request(method, path, **kwargs)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def wait_https(server, port: int, context: ssl.SSLContext) -> bytes:
    deadline = time.monotonic() + START_SECONDS
    while True:
        try:
            status, body = https_status(port, context)
            if status == 200:
                return body
        except OSError:
            pass
        assert server.poll() is None, server.communicate(timeout=10)[1].decode()[-2000:]
        assert time.monotonic() < deadline, f"server did not start in {START_SECONDS} s"
        time.sleep(0.3)


@pytest.mark.heavy  # two server processes load the model
def test_https_on_two_workers_verified_by_the_thin_client(tiny_config, small_corpus, tmp_path):
    run_index([str(small_corpus)], tiny_config)
    with Store(tiny_config.store.path) as store:
        token = store.tokens.create("reader", "read")
    ca, cert, key = tls_files(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config.model_dump()))
    port = free_port()
    session_file = Path(tiny_config.store.path) / SESSION_FILE
    trusted = ssl.create_default_context(cafile=str(ca))
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
            "2",
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
        ],
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        health = json.loads(wait_https(server, port, trusted))
        assert set(health) >= {"status", "version", "index_version"}
        assert health["status"] == "ok" and health["index_version"]
        assert str(tiny_config.store.path) not in json.dumps(health) and "vectors" not in health
        # stderr is a pipe: the session address is in a file only its owner reads
        assert stat.S_IMODE(session_file.stat().st_mode) == 0o600
        assert session_file.read_text().startswith(f"https://127.0.0.1:{port}/#token=bi_")
        # a chunked body is refused before it is read, over the real server too
        status, _ = https_status(
            port,
            trusted,
            "POST",
            "/search",
            body=iter([b'{"query"', b":1}"]),
            encode_chunked=True,
            headers={"Authorization": f"Bearer {token}"},
        )
        assert status == 411
        url = f"https://127.0.0.1:{port}"
        token_file = tmp_path / "token"
        token_file.write_text(token + "\n")
        runner = CliRunner(env={TOKEN_ENV: None, "BERTINDEX_CA_CERT": None})
        args = ["search", "gzip", "--server", url, "--mode", "keyword", "-k", "2", "--json"]
        r = runner.invoke(main, [*args, "--ca-cert", str(ca), "--token-file", str(token_file)])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout.splitlines()[0])["id"] == "b2"
        r = CliRunner(env={TOKEN_ENV: token, "BERTINDEX_CA_CERT": str(ca)}).invoke(main, args)
        assert r.exit_code == 0, r.output
        r = runner.invoke(main, args + ["--token-file", str(token_file)])  # the system's CAs
        assert r.exit_code == 1 and "--ca-cert" in r.stderr and "verify" in r.stderr
        r = runner.invoke(main, [*args, "--ca-cert", str(ca)])  # no token
        assert r.exit_code == 1 and "401" in r.stderr and TOKEN_ENV in r.stderr
    finally:
        stop(server)
    assert not session_file.exists()  # removed when serve stops


def test_bind_rules_off_loopback(tmp_path, monkeypatch):
    import search.cli.serve as serve_cli

    seen = {}

    def fake(settings, host, port, workers, announce, tls):
        seen.update(tls=tls, mode=stat.S_IMODE((tmp_path / "store" / SESSION_FILE).stat().st_mode))
        announce("serving")

    monkeypatch.setattr(serve_cli, "serve_processes", fake)
    store = str(tmp_path / "store")
    runner = CliRunner()
    assert (
        runner.invoke(main, ["token", "create", "--name", "ops", "--store", store]).exit_code == 0
    )
    r = runner.invoke(main, ["serve", "--host", "0.0.0.0", "--store", store])
    assert r.exit_code == 2 and not seen
    [line] = r.stderr.strip().splitlines()
    assert "--tls-cert" in line and "--tls-key" in line and "--insecure-http" in line
    r = runner.invoke(main, ["serve", "--host", "0.0.0.0", "--store", store, "--insecure-http"])
    assert r.exit_code == 0 and seen["tls"] is None and seen["mode"] == 0o600
    warnings = [x for x in r.stderr.splitlines() if x.startswith("warning:")]
    assert len(warnings) == 1 and "plain http" in warnings[0]
    assert "#token=" not in r.stderr and SESSION_FILE in r.stderr  # the address stays in the file
    assert not (tmp_path / "store" / SESSION_FILE).exists()
    _, cert, key = tls_files(tmp_path)
    r = runner.invoke(
        main,
        [
            "serve",
            "--host",
            "0.0.0.0",
            "--store",
            store,
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
        ],
    )
    assert r.exit_code == 0 and "warning" not in r.stderr
    assert seen["tls"] == (str(cert), str(key))
    r = runner.invoke(main, ["serve", "--store", store, "--tls-cert", str(cert)])
    assert r.exit_code == 2 and "--tls-key" in r.stderr
    r = runner.invoke(main, ["serve", "--store", store])  # loopback over http: as before
    assert r.exit_code == 0 and "warning" not in r.stderr


def test_a_busy_store_answers_409_without_the_holder(tmp_path, caplog):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from indexer.errors import StoreBusy
    from indexer.store.lock import WriterLock
    from search.error_map import install

    app = FastAPI()
    install(app)

    @app.post("/write")
    def write() -> dict:
        WriterLock(tmp_path, wait_s=0)
        return {}

    holder = WriterLock(tmp_path)
    with pytest.raises(StoreBusy, match=f"pid {os.getpid()}"):  # locally: who holds it
        WriterLock(tmp_path, wait_s=0)
    with caplog.at_level(logging.INFO, logger="search.error_map"):
        r = TestClient(app).post("/write", json={})
    assert r.status_code == 409 and r.json() == {"detail": BUSY_DETAIL}
    assert "pid" not in r.text and "try again" in r.text
    assert f"pid {os.getpid()}" in caplog.text  # the detail stays in the server's log
    del holder


def test_the_token_comes_from_the_environment_or_a_file_never_argv(tmp_path):
    r = CliRunner().invoke(
        main, ["search", "x", "--server", "http://127.0.0.1:9", "--token", "bi_secret"]
    )
    assert r.exit_code == 2 and TOKEN_ENV in r.output and "--token-file" in r.output
    help_text = CliRunner().invoke(main, ["search", "--help"]).output
    assert "--token-file" in help_text and "--token " not in help_text


def test_tokens_expire(tiny_config, small_corpus, tmp_path):
    from indexer.query.searcher import Searcher
    from search.server import create_app

    run_index([str(small_corpus)], tiny_config)
    store_dir = str(tiny_config.store.path)
    runner = CliRunner()
    r = runner.invoke(
        main,
        ["token", "create", "--name", "soon", "--expires", "30d", "--store", store_dir, "--json"],
    )
    assert r.exit_code == 0, r.output
    soon = json.loads(r.stdout)
    r = runner.invoke(
        main,
        ["token", "create", "--name", "dated", "--expires", "2999-01-31", "--store", store_dir],
    )
    assert r.exit_code == 0, r.output
    create_x = ["token", "create", "--name", "x", "--store", store_dir, "--expires"]
    r = runner.invoke(main, [*create_x, "2001-01-01"])
    assert r.exit_code == 1 and "in the past" in r.stderr
    r = runner.invoke(main, [*create_x, "soon"])
    assert r.exit_code == 2 and "--expires" in r.stderr
    listed = runner.invoke(main, ["token", "list", "--store", store_dir, "--json"])
    rows = {x["name"]: x for x in json.loads(listed.stdout)}
    assert rows["dated"]["expires"] == "2999-01-31T00:00:00Z"
    assert rows["soon"]["expires"] == soon["expires"] and rows["soon"]["expires"] > "2026"
    text = runner.invoke(main, ["token", "list", "--store", store_dir]).stdout
    assert "expires 2999-01-31T00:00:00Z" in text
    with Store(store_dir) as store, pytest.raises(InputError, match="past"):
        from indexer.core.timeutil import parse_utc

        store.tokens.create("old", "read", parse_utc("2000-01-01"))
    store = Store(store_dir, read_only=True)
    client = _client(create_app(Searcher(tiny_config, store)))
    body = {"query": "cat", "k": 1}
    assert client.post("/search", json=body, headers=_bearer(soon["token"])).status_code == 200
    store.close()
    with Store(store_dir) as writer:
        writer.con.execute(
            "UPDATE tokens SET expires_at = TIMESTAMP '2001-01-01' WHERE name = 'soon'"
        )
    time.sleep(1.1)  # servers look at the store's files once a second
    r = client.post("/search", json=body, headers=_bearer(soon["token"]))
    assert r.status_code == 401 and "expired" in r.json()["detail"]
    assert [t.name for t in read_token_table(store_dir) if t.expired()] == ["soon"]


def test_tokens_of_a_file_from_before_expiry_read_as_never_expiring(tmp_path):
    path = tmp_path / "store.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE tokens (name VARCHAR PRIMARY KEY, scope VARCHAR NOT NULL, "
        "token_hash VARCHAR NOT NULL UNIQUE, created_at TIMESTAMP NOT NULL, "
        "last_used_at TIMESTAMP)"
    )
    con.execute("INSERT INTO tokens VALUES ('a', 'read', 'h', TIMESTAMP '2026-01-01', NULL)")
    con.close()
    [row] = read_tokens_file(path)
    assert row.expires_at is None and not row.expired() and row.to_dict()["expires"] is None


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request for `target` (a redirect) or with no hits, noting the headers."""

    seen: list
    target: str | None = None

    def _answer(self):
        self.seen.append((self.path, self.headers.get("Authorization")))
        if self.target and self.path == "/search":
            self.send_response(302)
            self.send_header("Location", self.target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b'{"hits": []}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


def _recording_server(target=None):
    handler = type("Handler", (_Recorder,), {"seen": [], "target": target})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler.seen


def test_the_token_does_not_follow_a_redirect_to_another_origin():
    other, other_seen = _recording_server()
    away, away_seen = _recording_server(f"http://127.0.0.1:{other.server_port}/search")
    same, same_seen = _recording_server()
    same.RequestHandlerClass.target = f"http://127.0.0.1:{same.server_port}/again"
    try:
        assert remote_search(f"http://127.0.0.1:{away.server_port}", "q", token="bi_x") == []
        assert away_seen == [("/search", "Bearer bi_x")]
        assert other_seen == [("/search", None)]  # followed, without the header
        # the same origin keeps it (scheme, host and port alike)
        assert remote_search(f"http://127.0.0.1:{same.server_port}", "q", token="bi_x") == []
        assert same_seen == [("/search", "Bearer bi_x"), ("/again", "Bearer bi_x")]
    finally:
        for server in (other, away, same):
            server.shutdown()


def test_a_chunked_body_is_refused_like_an_unbounded_one():
    import asyncio

    from search.body_limit import BodyLimit

    async def app(scope, receive, send):
        raise AssertionError("the body was let through")

    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    for headers in (
        [(b"transfer-encoding", b"chunked")],
        [(b"content-length", b"10"), (b"transfer-encoding", b"chunked")],
    ):
        sent.clear()
        scope = {"type": "http", "method": "POST", "path": "/search", "headers": headers}
        asyncio.run(BodyLimit(app, 1024)(scope, receive, send))
        assert sent[0]["status"] == 411


def _client(app):
    from fastapi.testclient import TestClient

    return TestClient(app, base_url="http://127.0.0.1:8765")


def _bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}
