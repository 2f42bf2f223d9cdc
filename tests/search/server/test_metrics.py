"""`GET /metrics` (search/metrics.py): a scrape parsed with prometheus_client's own parser counts
requests by route template and status, times them, counts /v1/embeddings' inputs and tokens and
names what is served; who may scrape; a dead worker's live gauges dropped; and a real
`bertindex serve --workers 2` whose scrape adds both workers' requests, and forgets a killed
worker's live gauges."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from port_kit import free_port, start_serve, stop
from server_kit import BASE, app_for, prepare
from testkit import ROOT

from indexer.indexing.run import run_index
from indexer.store import SCOPES, Store, read_token_table, scope_allows
from search.cli.main import main
from search.metrics import MULTIPROC_ENV, UNMATCHED, ServerMetrics

pytestmark = pytest.mark.heavy


def scraped(text: str) -> dict[str, list]:
    """metric family name -> its samples, from one scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(families: dict, sample: str, **labels) -> float:
    """The one sample named `sample` whose labels include `labels` (0 when none)."""
    family = sample.removesuffix("_total").removesuffix("_bucket").removesuffix("_count")
    family = family.removesuffix("_sum")
    found = [
        s.value
        for s in families.get(family, [])
        if s.name == sample and labels.items() <= s.labels.items()
    ]
    assert len(found) <= 1, (sample, labels, found)
    return found[0] if found else 0.0


@pytest.fixture
def client(tiny_config, small_corpus):
    from fastapi.testclient import TestClient

    prepare(tiny_config, small_corpus, scopes=())
    store, app = app_for(tiny_config)
    with store:
        yield TestClient(app, base_url=BASE), tiny_config


def test_a_scrape_counts_routes_statuses_latency_and_embedded_tokens(client):
    import prometheus_client

    client, config = client
    for _ in range(2):
        assert client.post("/search", json={"query": "cat", "k": 2}).status_code == 200
    assert client.post("/search", json={"query": ""}).status_code == 422
    assert client.get("/static/nothing.js").status_code == 404
    assert client.get("/no/such/path-1").status_code == 404
    assert client.get("/no/such/path-2").status_code == 404
    model = client.get("/v1/models").json()["data"][0]["id"]
    before = scraped(client.get("/metrics").text)
    texts = ["the cat sat", "a dog", "gzip a file"]
    embedded = client.post("/v1/embeddings", json={"input": texts, "model": model})
    answer = client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    after = scraped(answer.text)

    def count(**labels):
        return value(after, "bertindex_requests_total", **labels)

    assert count(route="/search", method="POST", status="200") == 2
    assert count(route="/search", method="POST", status="422") == 1
    assert count(route="/static/{name}", method="GET", status="404") == 1
    assert count(route=UNMATCHED, method="GET", status="404") == 2
    routes = {s.labels["route"] for s in after["bertindex_requests"]}
    assert not any("path-" in r or "nothing" in r for r in routes), routes  # templates only
    assert count(route="/metrics", status="200") == 1  # the first scrape; this one is running
    # latency: every /search request, in buckets that only grow, up to +Inf = the count
    assert value(after, "bertindex_request_duration_seconds_count", route="/search") == 3
    buckets = [
        s
        for s in after["bertindex_request_duration_seconds"]
        if s.name.endswith("_bucket") and s.labels["route"] == "/search"
    ]
    cumulative = [s.value for s in sorted(buckets, key=lambda s: float(s.labels["le"]))]
    assert cumulative == sorted(cumulative) and cumulative[-1] == 3
    assert 0 < value(after, "bertindex_request_duration_seconds_sum", route="/search") < 60
    # queue wait: only requests whose handler ran (the 422 never reached it)
    assert value(after, "bertindex_queue_wait_seconds_count", route="/search") == 2
    assert value(after, "bertindex_queue_wait_seconds_count", route="/v1/embeddings") == 1
    assert value(after, "bertindex_requests_in_flight") == 1  # the scrape itself
    # embeddings: the counters move by the answer's inputs and usage
    usage = embedded.json()["usage"]["total_tokens"]
    for name, moved in (("inputs", len(texts)), ("tokens", usage)):
        sample = f"bertindex_embedded_{name}_total"
        assert value(after, sample) - value(before, sample) == moved
    # what is served
    health = client.get("/health").json()
    assert value(after, "bertindex_index_info", version=health["index_version"]) == 1
    with Store(config.store.path, read_only=True) as store:
        assert value(after, "bertindex_index_documents") == store.counts.documents() == 5
        assert value(after, "bertindex_index_chunks") == store.counts.chunks()
    [encoder] = after["bertindex_encoder_info"]
    assert encoder.value == 1
    assert encoder.labels["model"] == model  # the stored vectors' model name
    assert encoder.labels["dtype"] == "fp32"
    assert Path(encoder.labels["path"]) == Path(config.model.name)
    # a registry of the app's own: nothing in prometheus_client's global one
    assert "bertindex_requests" not in scraped(prometheus_client.generate_latest().decode())


def test_refused_requests_are_counted_by_their_status(client):
    client, _ = client
    big = client.post("/search", content=b"x" * 20_000, headers={"content-type": "text/plain"})
    foreign = client.get("/health", headers={"Host": "evil.example"})
    assert (big.status_code, foreign.status_code) == (413, 403)
    after = scraped(client.get("/metrics").text)
    assert value(after, "bertindex_requests_total", route="/search", status="413") == 1
    assert value(after, "bertindex_requests_total", route="/health", status="403") == 1


@pytest.mark.parametrize(
    "scope,status", [(None, 401), ("read", 403), ("review", 403), ("metrics", 200), ("admin", 200)]
)
def test_who_may_scrape(tiny_config, small_corpus, scope, status):
    from fastapi.testclient import TestClient

    tokens = prepare(tiny_config, small_corpus)
    store, app = app_for(tiny_config)
    with store:
        client = TestClient(app, base_url=BASE)
        headers = {"Authorization": f"Bearer {tokens[scope]}"} if scope else {}
        answer = client.get("/metrics", headers=headers)
        assert answer.status_code == status, answer.text
        if status == 200:
            assert "bertindex_requests_total" in answer.text
        if scope == "read":
            assert "needs metrics" in answer.json()["detail"]
        if scope == "metrics":  # a scraper's token reads no document
            search = client.post("/search", json={"query": "cat"}, headers=headers)
            assert search.status_code == 403 and "hits" not in search.text


def test_the_metrics_scope_sits_beside_the_others_and_the_cli_makes_it(tmp_path):
    reach = {held: {n for n in SCOPES if scope_allows(held, n)} for held in SCOPES}
    assert reach == {
        "read": {"read"},
        "review": {"read", "review"},
        "metrics": {"metrics"},
        "admin": {"read", "review", "metrics", "admin"},
    }
    store = str(tmp_path / "store")
    runner = CliRunner()
    made = runner.invoke(
        main, ["token", "create", "--name", "prom", "--scope", "metrics", "--store", store]
    )
    assert made.exit_code == 0, made.output
    [row] = json.loads(runner.invoke(main, ["token", "list", "--json", "--store", store]).stdout)
    assert (row["name"], row["scope"]) == ("prom", "metrics")
    assert [t.scope for t in read_token_table(store)] == ["metrics"]
    assert (
        "[read|review|metrics|admin]" in runner.invoke(main, ["token", "create", "--help"]).stdout
    )


def test_a_dead_workers_live_gauges_are_dropped(tmp_path):
    """A worker killed mid-request leaves its in-flight count in its file; the next scrape
    sees that its process is gone and drops it, and keeps its counted requests."""
    child = (
        "from search.metrics import ServerMetrics\n"
        "m = ServerMetrics.for_process()\n"
        "m.in_flight.inc()\n"
        "m.requests.labels('/search', 'POST', '200').inc(3)\n"
    )
    subprocess.run(
        [sys.executable, "-c", child],
        cwd=ROOT,
        env=dict(os.environ, **{MULTIPROC_ENV: str(tmp_path)}),
        check=True,
        timeout=120,
    )
    metrics = ServerMetrics(str(tmp_path))  # the scraping worker's view of the directory
    from prometheus_client import generate_latest

    unswept = scraped(generate_latest(metrics.registry).decode())
    assert value(unswept, "bertindex_requests_in_flight") == 1
    swept = scraped(metrics.scrape().decode())
    assert value(swept, "bertindex_requests_in_flight") == 0
    assert value(swept, "bertindex_requests_total", route="/search") == 3


def per_worker_searches(shared_dir: Path) -> dict[str, float]:
    """pid -> /search requests each worker's own counter file holds."""
    from prometheus_client.multiprocess import MultiProcessCollector

    out = {}
    for path in shared_dir.glob("counter_*.db"):
        families = {m.name: m.samples for m in MultiProcessCollector.merge([str(path)])}
        out[path.stem.split("_")[-1]] = value(
            families, "bertindex_requests_total", route="/search", status="200"
        )
    return out


def test_one_scrape_adds_up_both_workers_of_bertindex_serve(tiny_config, small_corpus, tmp_path):
    import httpx

    run_index([str(small_corpus)], tiny_config)
    with Store(tiny_config.store.path) as store:
        reader = {"Authorization": f"Bearer {store.tokens.create('reader', 'read')}"}
        scraper = {"Authorization": f"Bearer {store.tokens.create('prom', 'metrics')}"}
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(tiny_config.model_dump()))
    port = free_port()
    temp = tmp_path / "temp"  # where `serve` makes its metrics directory
    temp.mkdir()
    server = start_serve(config_file, port, "--workers", "2", env={"TMPDIR": str(temp)})
    url = f"http://127.0.0.1:{port}"
    made = list(temp.glob("bertindex-metrics-*"))
    sent = 0
    try:
        [shared] = made

        def search(_) -> int:  # a connection each, so the kernel spreads them
            return httpx.post(f"{url}/search", json={"query": "cat"}, headers=reader).status_code

        def both_answered() -> bool:  # (the second worker may still be loading at first)
            per_worker = per_worker_searches(shared)
            return len(per_worker) == 2 and all(per_worker.values())

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            while sent < 300 and not both_answered():
                assert set(pool.map(search, range(12))) == {200}
                sent += 12
        assert both_answered(), per_worker_searches(shared)
        for _ in range(4):  # whichever worker answers the scrape sees both
            answer = httpx.get(f"{url}/metrics", headers=scraper)
            assert answer.status_code == 200, answer.text
            families = scraped(answer.text)
            total = value(families, "bertindex_requests_total", route="/search", status="200")
            assert total == sent
            assert value(families, "bertindex_requests_in_flight") == 1  # this scrape only
            assert value(families, "bertindex_index_documents") == 5  # max of the two, not sum
        assert httpx.get(f"{url}/metrics", headers=reader).status_code == 403
        # a worker killed: uvicorn's supervisor starts another, and a scrape drops the dead
        # one's live gauges and keeps its counts
        dead = next(iter(per_worker_searches(shared)))
        assert list(shared.glob(f"gauge_live*_{dead}.db"))
        os.kill(int(dead), signal.SIGKILL)
        deadline = time.monotonic() + 180
        while len(per_worker_searches(shared)) < 3:  # the new worker's files
            assert time.monotonic() < deadline, "no new worker in 180 s"
            time.sleep(0.5)
        answer = httpx.get(f"{url}/metrics", headers=scraper)
        assert value(scraped(answer.text), "bertindex_requests_total", route="/search") == sent
        assert not list(shared.glob(f"gauge_live*_{dead}.db"))
    finally:
        stop(server)
    assert made and not any(d.exists() for d in made)  # removed with the server
