"""Who may ask `bertindex serve` (search/access.py): the route table walked with no token, a
wrong token, each scope, a foreign Host and a foreign Origin; a route of the app that declares
no scope fails. Also: a store without tokens answers as before (foreign Host names aside), a
revoked token stops working, page labels record the token's name, `bertindex token` and the
refusal of an open bind on a store without tokens (exit 2, before anything loads)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from server_kit import BASE, UNDO_KEY, app_for, prepare

from indexer.store import Store, read_token_table, scope_allows
from search import access
from search.cli.main import main

pytestmark = pytest.mark.heavy

OPEN = access.OPEN


def sample_requests(doc_id: int, model: str) -> dict[tuple[str, str], dict]:
    """One honest request per route: what a test sends to reach each (`model`: the served
    encoder's id)."""
    return {
        ("GET", "/"): {"url": "/"},
        ("GET", "/static/{name}"): {"url": "/static/app.js"},
        ("GET", "/health"): {"url": "/health"},
        ("POST", "/search"): {"url": "/search", "json": {"query": "cat", "k": 2}},
        ("POST", "/facets"): {"url": "/facets", "json": {}},
        ("GET", "/review"): {"url": "/review"},
        ("GET", "/review/static/{name}"): {"url": "/review/static/review.js"},
        ("GET", "/review/api/heads"): {"url": "/review/api/heads"},
        ("GET", "/review/api/next"): {"url": "/review/api/next", "params": {"head": "kind"}},
        ("POST", "/review/api/label"): {
            "url": "/review/api/label",
            "json": {"head": "kind", "doc_id": doc_id, "label": "code"},
        },
        ("POST", "/review/api/undo"): {
            "url": "/review/api/undo",
            "json": {"head": "kind", "review_id": 999999},
        },
        ("GET", "/v1/models"): {"url": "/v1/models"},
        ("POST", "/v1/embeddings"): {
            "url": "/v1/embeddings",
            "json": {"input": ["cat", "dog"], "model": model},
        },
        ("GET", "/metrics"): {"url": "/metrics"},
        # allowed, it reaches the route, which says this store's server has no reranker
        ("POST", "/rerank"): {
            "url": "/rerank",
            "json": {"query": "cat", "texts": ["the cat sat"]},
            "allowed": 404,
        },
        # allowed, they reach the routes, which say this server was started without heads
        ("POST", "/predict"): {"url": "/predict", "json": {"inputs": "the cat"}, "allowed": 404},
        ("POST", "/annotate"): {"url": "/annotate", "json": {"inputs": "the cat"}, "allowed": 404},
    }


def with_ticket(req: dict, token_name: str) -> dict:
    """An undo request carries the ticket its caller was given (here: made with UNDO_KEY for
    a review id that does not exist, so it is allowed and undoes nothing)."""
    from search.review_page import UndoTickets

    if req["url"] != "/review/api/undo":
        return req
    ticket = UndoTickets(UNDO_KEY).issue(999999, "kind", f"token:{token_name}")
    return {**req, "json": {**req["json"], "ticket": ticket}}


@pytest.fixture
def guarded(tiny_config, small_corpus):
    from fastapi.testclient import TestClient

    tokens = prepare(tiny_config, small_corpus)
    store, app = app_for(tiny_config)
    with store:
        yield TestClient(app, base_url=BASE), tokens, app, tiny_config


def send(client, req: dict, method: str, headers: dict | None = None):
    return client.request(
        method, req["url"], params=req.get("params"), json=req.get("json"), headers=headers or {}
    )


def test_every_route_has_an_entry_and_answers_by_its_scope(guarded):
    client, tokens, app, config = guarded
    fastapi_app = app.app.app
    routes = access.app_routes(fastapi_app)
    table = access.route_table(fastapi_app)
    missing = sorted(set(routes) - set(table))
    assert not missing, f"routes that declare no scope (search.access.needs): {missing}"
    assert sorted(set(table) - set(routes)) == []  # no stale entries
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        doc_id = store.con.execute("SELECT min(doc_id) FROM documents").fetchone()[0]
    samples = sample_requests(doc_id, fastapi_app.state.searcher.encoder.provenance.model_name)
    assert sorted(samples) == sorted(routes)  # a new route needs a sample here too
    for (method, path), needed in table.items():
        req = samples[(method, path)]
        where = f"{method} {path}"
        plain = send(client, req, method)
        wrong = send(client, req, method, {"Authorization": "Bearer bi_not-a-token"})
        if needed == OPEN:
            assert plain.status_code == wrong.status_code == 200, where
        else:
            assert plain.status_code == wrong.status_code == 401, where
            assert "bertindex token create" in plain.json()["detail"]
            assert plain.headers["www-authenticate"].startswith("Bearer")
            assert "hits" not in plain.text and "collections" not in plain.text
        for scope, token in tokens.items():
            auth = {"Authorization": f"Bearer {token}"}
            answer = send(client, with_ticket(req, f"{scope}-user"), method, auth)
            ok = needed == OPEN or scope_allows(scope, needed)
            allowed = req.get("allowed", 200)
            assert answer.status_code == (allowed if ok else 403), (where, scope, answer.text)
            if not ok:
                assert f"needs {needed}" in answer.json()["detail"]
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        req = with_ticket(req, "admin-user")
        foreign = send(client, req, method, {**admin, "Host": "evil.example:8765"})
        assert foreign.status_code == 403, where
        assert "server.allowed_hosts" in foreign.json()["detail"]
        cross = send(client, req, method, {**admin, "Origin": "http://evil.example"})
        writes = needed not in (OPEN, "read")
        assert cross.status_code == (403 if writes else req.get("allowed", 200)), where
        if writes:
            assert "Origin" in cross.json()["detail"]
            own = send(client, req, method, {**admin, "Origin": BASE})
            assert own.status_code == req.get("allowed", 200), where


def test_a_store_without_tokens_answers_as_before_but_not_to_foreign_hosts(
    tiny_config, small_corpus
):
    from fastapi.testclient import TestClient

    prepare(tiny_config, small_corpus, scopes=())
    store, app = app_for(tiny_config)
    with store:
        client = TestClient(app, base_url=BASE)
        assert client.post("/search", json={"query": "cat", "k": 2}).status_code == 200
        assert client.post("/facets", json={}).status_code == 200
        assert client.get("/review/api/heads").json() == {"heads": ["kind"]}
        for host in ("localhost:8765", "[::1]:8765", "127.0.0.2"):
            assert client.get("/health", headers={"Host": host}).status_code == 200, host
        rebound = client.post(
            "/search", json={"query": "cat"}, headers={"Host": "attacker.example"}
        )
        assert rebound.status_code == 403 and "hits" not in rebound.text
        # what held before holds: form / text-plain posts 422, big bodies 413, k capped
        assert (
            client.post(
                "/search", content=b"query=cat", headers={"Content-Type": "text/plain"}
            ).status_code
            == 422
        )
        assert client.post("/search", json={"query": "x" * 20_000}).status_code == 413
        assert client.post("/search", json={"query": "cat", "k": 5000}).status_code == 422
        cross = client.post(
            "/review/api/undo",
            json={"head": "kind", "review_id": 1},
            headers={"Origin": "http://evil.example"},
        )
        assert cross.status_code == 403  # writes from another site, even without tokens


def test_allowed_hosts_from_config(tiny_config, small_corpus):
    from fastapi.testclient import TestClient

    prepare(tiny_config, small_corpus, scopes=())
    config = tiny_config.with_overrides(**{"server.allowed_hosts": ["search.example.internal"]})
    store, app = app_for(config)
    with store:
        client = TestClient(app, base_url=BASE)
        named = client.get("/health", headers={"Host": "Search.Example.Internal:8765"})
        assert named.status_code == 200
        assert client.get("/health", headers={"Host": "other.example"}).status_code == 403


def test_labels_record_the_token_name_and_revoked_tokens_stop(guarded, monkeypatch):
    client, tokens, _, config = guarded
    monkeypatch.setattr(access, "CHECK_EVERY_S", 0.0)
    review = {"Authorization": f"Bearer {tokens['review']}"}
    doc = client.get("/review/api/next", params={"head": "kind"}, headers=review).json()
    stored = client.post(
        "/review/api/label",
        headers=review,
        json={"head": "kind", "doc_id": doc["document"]["doc_id"], "label": "code"},
    )
    assert stored.status_code == 200
    r = CliRunner().invoke(
        main, ["review", "history", "--head", "kind", "--json", "--store", config.store.path]
    )
    assert r.exit_code == 0, r.output
    [row] = [json.loads(x) for x in r.stdout.splitlines()]
    assert (row["who"], row["reviewer"], row["label"], row["source"]) == (
        "review-user",
        "review-user",
        "code",
        "page",
    )
    assert (
        CliRunner()
        .invoke(main, ["token", "revoke", "review-user", "--store", config.store.path])
        .exit_code
        == 0
    )
    refused = client.post("/facets", json={}, headers=review)
    assert refused.status_code == 401 and "revoked" in refused.json()["detail"]
    read = {"Authorization": f"Bearer {tokens['read']}"}
    assert client.post("/facets", json={}, headers=read).status_code == 200


def test_token_commands(tmp_path):
    store = str(tmp_path / "store")
    runner = CliRunner()
    made = runner.invoke(
        main, ["token", "create", "--name", "alice", "--scope", "review", "--store", store]
    )
    assert made.exit_code == 0, made.output
    secret = made.stdout.strip()
    assert secret.startswith("bi_") and len(secret) > 40
    listed = runner.invoke(main, ["token", "list", "--json", "--store", store])
    [row] = json.loads(listed.stdout)
    assert (row["name"], row["scope"], row["last_used"]) == ("alice", "review", None)
    assert secret not in listed.stdout
    [stored] = read_token_table(store)
    assert secret not in stored.token_hash and len(stored.token_hash) == 64
    again = runner.invoke(main, ["token", "create", "--name", "alice", "--store", store])
    assert again.exit_code == 1 and "revoke it first" in again.stderr
    bad = runner.invoke(main, ["token", "create", "--name", "a b", "--store", store])
    assert bad.exit_code == 1 and "token name" in bad.stderr
    gone = runner.invoke(main, ["token", "revoke", "bob", "--store", store])
    assert gone.exit_code == 1 and "alice" in gone.stderr
    assert runner.invoke(main, ["token", "revoke", "alice", "--store", store]).exit_code == 0
    assert read_token_table(store) == []


def test_last_use_is_written_back(guarded, monkeypatch):
    client, tokens, app, config = guarded
    monkeypatch.setattr(access, "CHECK_EVERY_S", 0.0)
    monkeypatch.setattr(access, "TOUCH_EVERY_S", 0.0)
    read = {"Authorization": f"Bearer {tokens['read']}"}
    assert client.post("/facets", json={}, headers=read).status_code == 200
    book = app.app.book
    book._refresh()  # due now: writes last use back on a thread
    book.writer.join(10)
    rows = {t.name: t for t in read_token_table(config.store.path)}
    assert rows["read-user"].last_used_at is not None
    assert rows["admin-user"].last_used_at is None


def test_open_bind_without_tokens_is_refused_before_loading(tmp_path, monkeypatch):
    import search.cli.serve as serve_cli

    def never(*args, **kwargs):
        raise AssertionError("serve loaded or listened")

    monkeypatch.setattr(serve_cli, "serve_processes", never)
    store = str(tmp_path / "store")
    r = CliRunner().invoke(main, ["serve", "--host", "0.0.0.0", "--store", store])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "bertindex token create" in lines[0]
    seen = {}

    def fake(settings, host, port, workers, announce, tls):
        seen["settings"] = settings
        seen["url"] = (tmp_path / "store" / serve_cli.SESSION_FILE).read_text().strip()
        announce("serving")

    monkeypatch.setattr(serve_cli, "serve_processes", fake)
    assert (
        CliRunner().invoke(main, ["token", "create", "--name", "ops", "--store", store]).exit_code
        == 0
    )
    r = CliRunner().invoke(
        main, ["serve", "--host", "0.0.0.0", "--store", store, "--insecure-http"]
    )
    assert r.exit_code == 0, r.output
    assert seen["settings"].session_hash and seen["settings"].host == "0.0.0.0"
    url = seen["url"]  # stderr is no terminal here: the address went to a 0600 file
    # a wildcard bind prints an address the server's own Host check answers, not 0.0.0.0
    assert url.startswith("http://127.0.0.1:8765/#token=bi_")
    assert seen["settings"].session_hash not in r.stderr  # the hash goes to the workers only


def test_dask_security_settings_pass_through_config():
    from pydantic import ValidationError

    from indexer.config import Config

    cfg = Config.model_validate(
        {
            "dask": {
                "address": "tls://10.0.0.5:8786",
                "security": {
                    "tls_ca_file": "ca.pem",
                    "tls_client_cert": "c.pem",
                    "tls_client_key": "k.pem",
                    "require_encryption": True,
                },
            }
        }
    )
    assert cfg.dask.security.security_kwargs() == {
        "tls_ca_file": "ca.pem",
        "tls_client_cert": "c.pem",
        "tls_client_key": "k.pem",
        "require_encryption": True,
    }
    assert Config().dask.security.security_kwargs() == {}  # plain TCP unless configured
    with pytest.raises(ValidationError, match="tls_ca_file"):
        Config.model_validate({"dask": {"address": "tls://10.0.0.5:8786"}})
