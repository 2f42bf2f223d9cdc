"""`bertindex serve` beyond POST /search basics: the search page's files, facets, annotations
and highlights in hits, paging, one-line errors, and queries side by side on threads."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from indexer.errors import StoreError
from indexer.indexing.run import run_index
from indexer.indexing.steps import sync_vector_index
from indexer.query.highlight import excerpt, highlight_spans, stem
from indexer.query.hits import HIT_FIELDS
from indexer.query.searcher import Searcher
from indexer.records.annotations import Annotation, Entity, Label
from indexer.store import Store

pytestmark = pytest.mark.heavy


def annotate_by_hand(config, labels: dict[str, str], entities: dict[str, list[tuple[str, str]]]):
    """Write labels (head `kind`) and entities (head `ner`) through the store API and publish
    a snapshot, as `bertindex annotate` does; keys are external ids."""
    with Store(config.store.path) as store:
        base = store.data_version()
        docs = store.documents.existing("default", sorted(set(labels) | set(entities)))
        rows = [(docs[ext].doc_id, "", docs[ext].content_hash) for ext in sorted(docs)]
        annotations = []
        for ext in sorted(docs):
            a = Annotation()
            if ext in labels:
                a.labels.append(Label(labels[ext], 0.9, head="kind"))
            for kind, text in entities.get(ext, []):
                a.entities.append(Entity(kind, 0, len(text), text, 0.8, head="ner"))
            annotations.append(a)
        store.annotations.write(rows, annotations, {"kind": "v1", "ner": "v1"})
        sync_vector_index(store, config, [], [], base)


@pytest.fixture
def client(tiny_config, small_corpus):
    from fastapi.testclient import TestClient

    from search.server import create_app

    run_index([str(small_corpus)], tiny_config)
    annotate_by_hand(
        tiny_config,
        {"a1": "pet", "a2": "pet", "b1": "code", "b2": "code"},
        {"b1": [("LANG", "python")], "b2": [("TOOL", "gzip")]},
    )
    with Store(tiny_config.store.path, read_only=True) as store:
        yield TestClient(create_app(Searcher(tiny_config, store)))


def test_page_and_its_files_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<script src="/static/app.js"' in page.text and 'id="query"' in page.text
    script = client.get("/static/app.js")
    assert script.status_code == 200 and "textContent" in script.text
    assert "innerHTML" not in script.text  # text from the store never becomes markup
    assert client.get("/static/app.css").status_code == 200
    assert client.get("/static/server.py").status_code == 404
    assert client.get("/static/..%2fserver.py").status_code == 404


def test_facets_count_documents_passing_the_filters(client):
    counts = client.post("/facets", json={}).json()
    assert counts == {
        "collections": {"default": 5},
        "labels": {"kind": {"code": 2, "pet": 2}},
        "entities": {"LANG": 1, "TOOL": 1},
    }
    code = client.post("/facets", json={"labels": ["kind=code"]}).json()
    assert code["labels"] == {"kind": {"code": 2}} and code["entities"] == {"LANG": 1, "TOOL": 1}
    assert code["collections"] == {"default": 2}
    pets = client.post("/facets", json={"where": {"kind": "pet"}}).json()
    assert pets["labels"] == {"kind": {"pet": 2}} and pets["entities"] == {}
    bad = client.post("/facets", json={"labels": ["kind"]})
    assert bad.status_code == 400 and "HEAD=LABEL" in bad.json()["detail"]


def test_hits_carry_annotations_highlights_and_side_scores(client):
    answer = client.post(
        "/search",
        json={
            "query": "parse command line arguments",
            "k": 5,
            "mode": "keyword",
            "annotations": True,
            "highlight": True,
        },
    ).json()
    top = answer["hits"][0]
    assert top["id"] == "b1" and answer["mode"] == "keyword"
    assert top["labels"][0]["label"] == "code" and top["entities"][0]["text"] == "python"
    assert [top["window"][a:b] for a, b in top["highlights"]] == [
        "parse",
        "command",
        "line",
        "arguments",
    ]
    assert top["keyword"] == top["score"] and top["dense"] is None
    hybrid = client.post("/search", json={"query": "parse command line arguments"}).json()
    sides = [(h["dense"], h["keyword"]) for h in hybrid["hits"]]
    assert all(d is not None or k is not None for d, k in sides)
    assert any(d is not None and k is not None for d, k in sides)
    only = client.post("/search", json={"query": "gzip", "entities": ["TOOL=GZIP"]}).json()
    assert [h["id"] for h in only["hits"]] == ["b2"]


def test_search_json_and_post_search_give_one_hit_shape(client, tiny_config, tmp_path):
    """`bertindex search --json` prints what `POST /search` answers: `SearchHit.to_dict`, key
    for key and value for value; both add the labels and entities (the CLI always, the server
    when asked)."""
    import json

    import yaml
    from click.testing import CliRunner

    from search.cli.main import main

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config.model_dump()))
    result = CliRunner().invoke(
        main, ["search", "gzip compress", "--config", str(config), "--json", "-k", "3"]
    )
    assert result.exit_code == 0, result.output
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    served = client.post("/search", json={"query": "gzip compress", "k": 3}).json()["hits"]
    assert served and all(list(h) == list(HIT_FIELDS) for h in served)
    assert [{key: h[key] for key in HIT_FIELDS} for h in printed] == served
    annotated = client.post(
        "/search", json={"query": "gzip compress", "k": 3, "annotations": True}
    ).json()["hits"]
    assert printed == annotated


def test_offset_pages_through_the_same_ranking(client):
    full = client.post("/search", json={"query": "the cat", "k": 4}).json()["hits"]
    page = client.post("/search", json={"query": "the cat", "k": 2, "offset": 2}).json()["hits"]
    assert [h["id"] for h in page] == [h["id"] for h in full[2:4]]
    assert [h["rank"] for h in page] == [3, 4]


def test_bad_requests_get_one_line_messages(client):
    long = client.post("/search", json={"query": "x" * 5000})
    assert long.status_code == 422
    assert long.json()["detail"] == "query: String should have at most 4000 characters"
    empty = client.post("/search", json={"query": ""})
    assert empty.status_code == 422 and empty.json()["detail"].startswith("query: ")
    hostile = client.post(
        "/search", json={"query": "cat", "where": {"kind": '"><script>alert(1)</script>'}}
    )
    assert hostile.status_code == 200 and hostile.json()["hits"] == []


def test_queries_run_side_by_side_with_the_same_answers(client):
    queries = ["the cat", "gzip data", "parse arguments", "red apple", "sofa dog", "python"]
    modes = ["hybrid", "dense", "keyword"]
    filters = [{}, {"where": {"kind": "code"}}, {"labels": ["kind=pet"]}]  # FAISS selectors too
    requests = [
        {"query": q, "k": 3, "mode": m, "annotations": True, **f}
        for q in queries
        for m in modes
        for f in filters
    ] * 2
    serial = [client.post("/search", json=r).json()["hits"] for r in requests]
    with ThreadPoolExecutor(8) as pool:
        parallel = list(pool.map(lambda r: client.post("/search", json=r).json()["hits"], requests))
    assert parallel == serial


def test_only_a_read_only_store_is_shared_across_threads(tiny_config, small_corpus):
    run_index([str(small_corpus)], tiny_config)
    with Store(tiny_config.store.path) as store, pytest.raises(StoreError, match="read-only"):
        store.share_across_threads()


def test_highlight_spans():
    text = "Parser for command-line options; parse_args() parses the lines of the arguments."
    found = [text[a:b] for a, b in highlight_spans(text, "parse command line arguments")]
    assert found == ["Parser", "command", "line", "parse", "parses", "lines", "arguments"]
    assert highlight_spans(text, "the of a") == []
    assert stem("parsing") == stem("parse") == stem("parser") == "pars"
    assert highlight_spans("<script>alert(1)</script>", "script") == [(1, 7), (18, 24)]
    long = "lorem ipsum " * 300 + "the gzip format " + "dolor sit " * 300
    part, spans = excerpt(long, "gzip", limit=500)
    assert len(part) <= 500 and [part[a:b] for a, b in spans] == ["gzip"]
    assert part.startswith("lorem") and spans[0][0] <= 200
    assert excerpt("short gzip text", "gzip") == ("short gzip text", [(6, 10)])


def test_worker_threads_get_the_thread_cap():
    """A query on a pool thread must not fork an OpenMP team per core (their spinning doubled
    a query's CPU): the pinner caps FAISS (and torch, when loaded) in the calling thread."""
    import threading

    import faiss

    from search.server import thread_pinner

    seen = {}

    def worker(pin):
        # a team of 2 in this thread whatever OMP_NUM_THREADS the run has: the pinner must
        # bring it down (and leave an unpinned thread's as it was)
        faiss.omp_set_num_threads(2)
        if pin is not None:
            pin()
        seen[pin is not None] = faiss.omp_get_max_threads()

    pin = thread_pinner(1)
    for p in (None, pin):
        thread = threading.Thread(target=worker, args=(p,))
        thread.start()
        thread.join()
    assert seen == {False: 2, True: 1}
