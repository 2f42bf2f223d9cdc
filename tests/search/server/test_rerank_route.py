"""`POST /rerank` in the TEI and Cohere shapes, scored by the server's pair head: the order is
the head's (`PairScorer.score`), `top_n` and the returned texts follow each shape, the cap is
`search.rerank_max_depth`, and a token is needed (a server without a reranker answers 404:
the route-table walk in test_server_access.py)."""

from __future__ import annotations

import pytest
from server_kit import BASE, app_for, prepare

from indexer.heads.pair.scorer import PairScorer

pytestmark = pytest.mark.heavy  # an indexed store and the toy pair head per module

QUERY = "the cat sat"
TEXTS = ["red apple banana", "the cat sat on the mat", "a dog slept on the sofa", "the cat"]


@pytest.fixture(scope="module")
def served(toy_head, tiny_model_dir, tmp_path_factory):
    from fastapi.testclient import TestClient
    from testkit import tiny_model_config

    head, _, _ = toy_head
    root = tmp_path_factory.mktemp("rerank-route")
    config = tiny_model_config(tiny_model_dir, root / "store").with_overrides(
        **{"search.rerank": str(head), "search.rerank_max_depth": 5}
    )
    corpus = root / "docs.jsonl"
    corpus.write_text('{"id": "a", "text": "the cat sat"}\n{"id": "b", "text": "a dog"}\n')
    tokens = prepare(config, corpus)
    store, app = app_for(config)
    with store:
        yield TestClient(app, base_url=BASE), tokens, head


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def expected(head) -> list[tuple[int, float]]:
    scores = PairScorer(head).score([(QUERY, t) for t in TEXTS])
    return sorted(((i, float(s)) for i, s in enumerate(scores)), key=lambda x: (-x[1], x[0]))


def test_tei_shape(served):
    client, tokens, head = served
    answer = client.post(
        "/rerank",
        json={"query": QUERY, "texts": TEXTS, "return_text": True},
        headers=bearer(tokens["read"]),
    )
    assert answer.status_code == 200, answer.text
    rows = answer.json()
    assert [r["index"] for r in rows] == [i for i, _ in expected(head)]
    assert [r["score"] for r in rows] == pytest.approx([s for _, s in expected(head)], abs=1e-6)
    assert all(r["text"] == TEXTS[r["index"]] for r in rows)


def test_cohere_shape_and_top_n(served):
    client, tokens, head = served
    body = {
        "model": "any",
        "query": QUERY,
        "documents": [TEXTS[0], {"text": TEXTS[1]}, TEXTS[2], {"text": TEXTS[3]}],
        "top_n": 2,
        "return_documents": True,
    }
    answer = client.post("/rerank", json=body, headers=bearer(tokens["read"]))
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [r["index"] for r in results] == [i for i, _ in expected(head)][:2]
    assert all(r["document"]["text"] == TEXTS[r["index"]] for r in results)
    assert [r["relevance_score"] for r in results] == pytest.approx(
        [s for _, s in expected(head)][:2], abs=1e-6
    )


def test_refusals(served):
    client, tokens, _ = served
    read = bearer(tokens["read"])
    assert client.post("/rerank", json={"query": QUERY, "texts": TEXTS}).status_code == 401
    both = client.post(
        "/rerank", json={"query": QUERY, "texts": TEXTS, "documents": TEXTS}, headers=read
    )
    assert both.status_code == 422 and "one of the two" in both.text
    over = client.post("/rerank", json={"query": QUERY, "texts": TEXTS * 2}, headers=read)
    assert over.status_code == 400 and "search.rerank_max_depth: 5" in over.json()["detail"]


@pytest.mark.slow
def test_httpx_against_bertindex_serve_with_a_token(toy_head, tiny_model_dir, tmp_path):
    """A TEI-shaped and a Cohere-shaped call from `httpx` to a real `bertindex serve`, with a
    Bearer token: the same order and scores as the head's own, 401 without the token."""
    import httpx
    import yaml
    from port_kit import free_port, start_serve, stop
    from testkit import tiny_model_config

    head, _, _ = toy_head
    config = tiny_model_config(tiny_model_dir, tmp_path / "store").with_overrides(
        **{"search.rerank": str(head)}
    )
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"id": "a", "text": "the cat sat"}\n{"id": "b", "text": "a dog"}\n')
    token = prepare(config, corpus, scopes=("read",))["read"]
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump()))
    port = free_port()
    server = start_serve(str(config_file), port, "--workers", "1")  # several: test_metrics.py
    want = expected(head)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            tei = client.post(
                "/rerank", json={"query": QUERY, "texts": TEXTS}, headers=bearer(token)
            )
            assert tei.status_code == 200, tei.text
            assert [r["index"] for r in tei.json()] == [i for i, _ in want]
            assert [r["score"] for r in tei.json()] == pytest.approx([s for _, s in want], abs=1e-4)
            cohere = client.post(
                "/rerank",
                json={"query": QUERY, "documents": TEXTS, "top_n": 2, "return_documents": True},
                headers=bearer(token),
            )
            assert cohere.status_code == 200, cohere.text
            results = cohere.json()["results"]
            assert [(r["index"], r["document"]["text"]) for r in results] == [
                (i, TEXTS[i]) for i, _ in want[:2]
            ]
            assert client.post("/rerank", json={"query": QUERY, "texts": TEXTS}).status_code == 401
    finally:
        stop(server)
