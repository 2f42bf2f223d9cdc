"""Review rows are owned, and readers never take the writer's lock (issue 40).

Undo removes only a row the same token (or, without tokens, the same page session) stored,
within `UNDO_SECONDS`; anything else is 403 and the row stays. Imported rows are never
deletable from the page. A client looping on every read route cannot make `token revoke`,
`index` or `review import` fail, and a revoked token is refused within 2 s."""

from __future__ import annotations

import json
import threading
import time

import pytest
from click.testing import CliRunner
from server_kit import BASE, UNDO_KEY, app_for, prepare

from indexer.indexing.run import run_index
from indexer.store import Store
from search import access
from search.cli.main import main
from search.review_page import UNDO_SECONDS, UndoTickets

pytestmark = pytest.mark.heavy


@pytest.fixture
def served(tiny_config, small_corpus):
    """A server over a store with a token per scope and two review tokens of two people."""
    from fastapi.testclient import TestClient

    tokens = prepare(tiny_config, small_corpus)
    with Store(tiny_config.store.path) as store:
        tokens["other"] = store.tokens.create("other-reviewer", "review")
    store, app = app_for(tiny_config)
    with store:
        yield TestClient(app, base_url=BASE), tokens, tiny_config


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def first_doc(client, token) -> int:
    answer = client.get("/review/api/next", params={"head": "kind"}, headers=bearer(token))
    return answer.json()["document"]["doc_id"]


def label(client, token, doc_id, session=None) -> dict:
    body = {"head": "kind", "doc_id": doc_id, "label": "code", "session": session}
    answer = client.post("/review/api/label", json=body, headers=bearer(token) if token else {})
    assert answer.status_code == 200, answer.text
    return answer.json()


def rows(config) -> list[int]:
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        return [r[0] for r in store.con.execute("SELECT review_id FROM reviews").fetchall()]


def test_the_owner_undoes_its_label(served):
    client, tokens, config = served
    stored = label(client, tokens["review"], first_doc(client, tokens["review"]))
    undo = {"head": "kind", "review_id": stored["review_id"], "ticket": stored["undo"]}
    answer = client.post("/review/api/undo", json=undo, headers=bearer(tokens["review"]))
    assert answer.status_code == 200 and answer.json() == {"undone": True}
    assert rows(config) == []


def test_another_token_cannot_undo_it_even_with_its_ticket(served):
    client, tokens, config = served
    stored = label(client, tokens["review"], first_doc(client, tokens["review"]))
    undo = {"head": "kind", "review_id": stored["review_id"], "ticket": stored["undo"]}
    for who in ("other", "admin"):  # another person, and a higher scope: neither owns it
        answer = client.post("/review/api/undo", json=undo, headers=bearer(tokens[who]))
        assert answer.status_code == 403, who
        assert "only the person who stored a label may undo it" in answer.json()["detail"]
    forged = {**undo, "ticket": f"{stored['review_id']}.{int(time.time())}.{'0' * 64}"}
    answer = client.post("/review/api/undo", json=forged, headers=bearer(tokens["other"]))
    assert answer.status_code == 403  # a ticket the server did not sign
    assert rows(config) == [stored["review_id"]]


def test_undo_is_refused_after_the_window(served):
    client, tokens, config = served
    stored = label(client, tokens["review"], first_doc(client, tokens["review"]))
    old = UndoTickets(UNDO_KEY).issue(
        stored["review_id"], "kind", "token:review-user", now=time.time() - UNDO_SECONDS - 1
    )
    undo = {"head": "kind", "review_id": stored["review_id"], "ticket": old}
    answer = client.post("/review/api/undo", json=undo, headers=bearer(tokens["review"]))
    assert answer.status_code == 403 and "minutes after the label" in answer.json()["detail"]
    assert rows(config) == [stored["review_id"]]


def test_imported_rows_are_never_deleted_from_the_page(served, tmp_path):
    client, tokens, config = served
    doc_id = first_doc(client, tokens["review"])
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        external = store.con.execute(
            "SELECT external_id, collection FROM documents WHERE doc_id = ?", [doc_id]
        ).fetchone()
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        json.dumps({"id": external[0], "collection": external[1], "label": "pet"}) + "\n"
    )
    r = CliRunner().invoke(
        main, ["review", "import", str(labels), "--head", "kind", "--store", config.store.path]
    )
    assert r.exit_code == 0, r.output
    [imported] = rows(config)
    # even a ticket the server signed for this id and this token does not reach an imported row
    ticket = UndoTickets(UNDO_KEY).issue(imported, "kind", "token:review-user")
    undo = {"head": "kind", "review_id": imported, "ticket": ticket}
    answer = client.post("/review/api/undo", json=undo, headers=bearer(tokens["review"]))
    assert answer.status_code == 200 and answer.json() == {"undone": False}
    assert rows(config) == [imported]


def test_without_tokens_the_page_session_owns_its_labels(tiny_config, small_corpus):
    from fastapi.testclient import TestClient

    prepare(tiny_config, small_corpus, scopes=())
    store, app = app_for(tiny_config)
    with store:
        client = TestClient(app, base_url=BASE)
        doc_id = client.get("/review/api/next", params={"head": "kind"}).json()["document"]
        stored = label(client, None, doc_id["doc_id"], session="a" * 32)
        undo = {"head": "kind", "review_id": stored["review_id"], "ticket": stored["undo"]}
        other = client.post("/review/api/undo", json={**undo, "session": "b" * 32})
        assert other.status_code == 403  # another page (another tab, another person)
        assert client.post("/review/api/undo", json=undo).status_code == 403  # no session
        own = client.post("/review/api/undo", json={**undo, "session": "a" * 32})
        assert own.status_code == 200 and own.json() == {"undone": True}
        # a tokenless server checks Origin on reads as on writes
        cross = client.get("/review/api/heads", headers={"Origin": "http://evil.example"})
        assert cross.status_code == 403
        cross = client.post(
            "/search", json={"query": "cat"}, headers={"Origin": "http://evil.example"}
        )
        assert cross.status_code == 403 and "hits" not in cross.text
        assert client.get("/review/api/heads", headers={"Origin": BASE}).status_code == 200


def test_readers_never_block_writers(served, small_corpus, tmp_path, monkeypatch):
    """A read token loops on every read route while `token revoke`, `index` and `review
    import` run: all three succeed, and the revoked token is refused within 2 s."""
    client, tokens, config = served
    monkeypatch.setattr(access, "CHECK_EVERY_S", 0.2)
    reads = [
        ("GET", "/review/api/heads", None),
        ("GET", "/review/api/next", {"head": "kind"}),
        ("POST", "/search", {"query": "cat", "k": 3}),
        ("POST", "/facets", {}),
        ("GET", "/health", None),
    ]
    stop, statuses = threading.Event(), []

    def loop() -> None:
        while not stop.is_set():
            for method, url, body in reads:
                kwargs = {"params": body} if method == "GET" else {"json": body}
                statuses.append(
                    client.request(
                        method, url, headers=bearer(tokens["read"]), **kwargs
                    ).status_code
                )

    reader = threading.Thread(target=loop, daemon=True)
    reader.start()
    try:
        while len(statuses) < len(reads):  # the loop is running before the writers start
            time.sleep(0.05)
        runner = CliRunner()
        revoked = runner.invoke(
            main, ["token", "revoke", "other-reviewer", "--store", config.store.path]
        )
        assert revoked.exit_code == 0, revoked.output
        deadline = time.monotonic() + 2.0
        while client.post("/facets", json={}, headers=bearer(tokens["other"])).status_code != 401:
            assert time.monotonic() < deadline, "the revoked token still answers after 2 s"
            time.sleep(0.05)
        more = tmp_path / "more.jsonl"
        more.write_text(json.dumps({"id": "new-1", "text": "a new document about cats"}) + "\n")
        summary = run_index([str(more)], config)
        assert summary["encoded"] == 1
        doc_id = first_doc(client, tokens["read"])
        with Store(config.store.path, read_only=True, snapshot=False) as store:
            external, collection = store.con.execute(
                "SELECT external_id, collection FROM documents WHERE doc_id = ?", [doc_id]
            ).fetchone()
        labels = tmp_path / "labels.jsonl"
        labels.write_text(
            json.dumps({"id": external, "collection": collection, "label": "pet"}) + "\n"
        )
        imported = runner.invoke(
            main, ["review", "import", str(labels), "--head", "kind", "--store", config.store.path]
        )
        assert imported.exit_code == 0, imported.output
    finally:
        stop.set()
        reader.join(timeout=30)
    assert statuses and set(statuses) == {200}, sorted(set(statuses))
