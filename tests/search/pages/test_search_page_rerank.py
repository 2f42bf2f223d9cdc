"""The search page's Rerank switch in a real headless chromium (Debian's, `make browser`), on
the tiny encoder with the toy pair head (`toy_head` in tests/conftest.py): shown and on when the
server has a reranker, off changes the request and the scores shown, the state survives a
reload from the address, and a server without a reranker shows no switch and sends no
`rerank`."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from contextlib import contextmanager

import pytest
from browser import console_errors, headless_chromium, screenshot
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from indexer.indexing.run import run_index
from indexer.query.searcher import Searcher
from indexer.store import Store

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]

QUERY = "cat mat"
DEPTH = 3  # of the 5 documents, the top 3 are reranked and 2 keep their first-stage order
# installed before the page's own scripts on every load: the bodies the page posts to /search
RECORD_SEARCHES = """
window.sentSearches = [];
const realFetch = window.fetch;
window.fetch = (url, options) => {
  if (url === "/search") window.sentSearches.push(JSON.parse(options.body));
  return realFetch(url, options);
};
"""


@contextmanager
def serving(config, store):
    """`create_app` over `store` on a free loopback port, in a thread; yields its address."""
    import uvicorn

    from search.server import create_app

    server = uvicorn.Server(
        uvicorn.Config(
            create_app(Searcher(config, store)), host="127.0.0.1", port=0, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the server did not start"
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/"
    finally:
        server.should_exit = True
        thread.join(10)


def wait_for(driver, condition, timeout: float = 30):
    return WebDriverWait(driver, timeout).until(lambda d: condition(d))


def shown(driver) -> list[tuple[str, str]]:
    """(id, meta line) of each hit shown, read in one step once no search is in flight."""
    return driver.execute_script(
        "if ('busy' in document.body.dataset) return [];"
        "return [...document.querySelectorAll('#hits li')]"
        ".map(li => [li.dataset.id, li.querySelector('.meta').textContent])"
    )


def rerank_scores(hits: list[tuple[str, str]]) -> list[float | None]:
    """The rerank score in each meta line (None: `rerank –`, below the depth); a line without
    one raises."""
    out = []
    for _, meta in hits:
        found = re.search(r"rerank (–|-?\d+\.\d{3})\)", meta)
        assert found, meta
        out.append(None if found.group(1) == "–" else float(found.group(1)))
    return out


def sent(driver) -> list[dict]:
    return driver.execute_script("return window.sentSearches")


def test_rerank_switch_on_the_search_page(toy_head, tiny_config, small_corpus, tmp_path):
    head, _, _ = toy_head
    run_index([str(small_corpus)], tiny_config)
    reranking = tiny_config.with_overrides(
        **{"search.rerank": str(head), "search.rerank_depth": DEPTH}
    )
    with (
        Store(tiny_config.store.path, read_only=True) as store,
        serving(reranking, store) as url,
        serving(tiny_config, store) as plain_url,
        headless_chromium() as driver,
    ):
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_SEARCHES})
        switch = lambda: driver.find_element(By.ID, "rerank")  # noqa: E731

        # a server without a reranker: no switch, the request of before, no rerank scores
        driver.get(f"{plain_url}?q={QUERY.replace(' ', '+')}&rerank=off")
        wait_for(driver, shown)
        plain = shown(driver)
        assert not driver.find_element(By.ID, "rerank-switch").is_displayed()
        assert [("rerank" in body) for body in sent(driver)] == [False]
        assert not any("rerank" in meta for _, meta in plain)
        assert "rerank" not in driver.current_url  # the server has none to turn off

        # with a reranker: shown and on, the top DEPTH hits carry the head's scores, best first
        driver.get(f"{url}?q={QUERY.replace(' ', '+')}")
        wait_for(driver, shown)
        on = shown(driver)
        assert driver.find_element(By.ID, "rerank-switch").is_displayed() and switch().is_selected()
        assert sent(driver) == [{**sent(driver)[0], "rerank": True}]
        scores = rerank_scores(on)
        top = scores[:DEPTH]
        assert None not in top and top == sorted(top, reverse=True) and scores[DEPTH:] == [None] * 2
        assert sorted(on) != sorted(plain)  # the same documents, other scores shown
        assert sorted(i for i, _ in on) == sorted(i for i, _ in plain)
        assert "reranked" in driver.find_element(By.ID, "summary").text
        screenshot(driver, tmp_path / "reranked.png")

        # off: the search again with rerank false, the first-stage ranking, no rerank scores
        switch().click()
        wait_for(driver, lambda d: shown(d) and len(sent(d)) == 2)
        off = shown(driver)
        assert sent(driver)[-1]["rerank"] is False and sent(driver)[-1]["query"] == QUERY
        assert off == plain
        assert "rerank=off" in driver.current_url

        # a reload reads the switch from the address
        driver.refresh()
        wait_for(driver, shown)
        assert not switch().is_selected() and shown(driver) == plain
        assert [body["rerank"] for body in sent(driver)] == [False]

        # and on again: back to the reranked page, the default no longer written
        switch().click()
        wait_for(driver, lambda d: shown(d) and len(sent(d)) == 2)
        assert shown(driver) == on and sent(driver)[-1]["rerank"] is True
        assert "rerank" not in driver.current_url
        assert console_errors(driver) == []
        assert [health(u)["rerank"] for u in (url, plain_url)] == [True, False]


def health(url: str) -> dict:
    with urllib.request.urlopen(f"{url}health", timeout=10) as answer:
        return json.loads(answer.read())
