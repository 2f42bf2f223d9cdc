"""The search page of `bertindex serve` in a real headless chromium (Debian's, `make browser`):
a demo-like store (a few hundred stdlib docstrings, argparse among them, the packaged model),
a query, a facet, paging, and bad input shown as text."""

import json
import threading
import time

import pytest
from browser import console_errors, headless_chromium, screenshot

from indexer.config import Config
from indexer.indexing.run import run_index
from indexer.indexing.steps import sync_vector_index
from indexer.ingest.stdlib_corpus import iter_passages
from indexer.query.searcher import Searcher
from indexer.records.annotations import Annotation, Entity, Label
from indexer.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.heavy]
PASSAGES = 200


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory):
    """A served store of PASSAGES stdlib passages: every argparse one plus an even spread of
    the rest, annotated by hand with a `kind` label and a `MODULE` entity per document."""
    import uvicorn

    from search.server import create_app

    tmp = tmp_path_factory.mktemp("page")
    passages = list(iter_passages())
    keep = [p for p in passages if p["module"] == "argparse"]
    rest = [p for p in passages if p["module"] != "argparse"]
    keep += rest[:: max(1, len(rest) // (PASSAGES - len(keep)))][: PASSAGES - len(keep)]
    corpus = tmp / "stdlib.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in keep))
    config = Config().with_overrides(**{"store.path": str(tmp / "store")})
    run_index([str(corpus)], config, collection="stdlib")
    with Store(config.store.path) as store:
        base = store.data_version()
        stored = store.documents.existing("stdlib", [p["id"] for p in keep])
        rows, annotations = [], []
        for p in keep:
            a = Annotation()
            a.labels.append(Label(p["kind"], 0.9, head="kind"))
            top = p["module"].split(".")[0]
            a.entities.append(Entity("MODULE", 0, len(top), top, 0.8, head="ner"))
            rows.append((stored[p["id"]].doc_id, p["text"], stored[p["id"]].content_hash))
            annotations.append(a)
        store.annotations.write(rows, annotations, {"kind": "v1", "ner": "v1"})
        sync_vector_index(store, config, [], [], base)
    with Store(config.store.path, read_only=True) as store:
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(Searcher(config, store)), host="127.0.0.1", port=0, log_level="warning"
            )
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.time() + 60
        while not server.started and time.time() < deadline:
            time.sleep(0.05)
        assert server.started, "the server did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}/", tmp
        finally:
            server.should_exit = True
            thread.join(10)


def wait_for(driver, condition, timeout: float = 30):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: condition(d))


def search(driver, query: str | None = None) -> None:
    from selenium.webdriver.common.by import By

    if query is not None:
        box = driver.find_element(By.ID, "query")
        box.clear()
        box.send_keys(query)
    driver.find_element(By.ID, "search").click()


def hit_ids(driver) -> list[str]:
    """The ids of the hits shown, read in one step (the list is replaced as a whole)."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#hits li')].map(li => li.dataset.id)"
    )


def settled(driver) -> bool:
    """No search is in flight (the page marks `body[data-busy]` while one is)."""
    return driver.execute_script("return !('busy' in document.body.dataset)")


def message(driver) -> str:
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "message")
    return "" if box.get_attribute("hidden") is not None else box.text


def test_search_facet_and_next_page(demo_server):
    from selenium.webdriver.common.by import By

    url, tmp = demo_server
    with headless_chromium() as driver:
        driver.get(url)
        wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#label-facets .facet"))
        search(driver, "parse command line arguments")
        wait_for(driver, lambda d: settled(d) and hit_ids(d))
        first = hit_ids(driver)
        assert first[0].startswith("argparse"), first
        top = driver.find_element(By.CSS_SELECTOR, "#hits li")
        assert top.find_element(By.CLASS_NAME, "title").text.startswith("argparse")
        marked = {m.text.lower() for m in top.find_elements(By.TAG_NAME, "mark")}
        assert marked & {"parse", "parser", "parsing", "command", "line", "arguments", "argument"}
        assert "score" in top.find_element(By.CLASS_NAME, "meta").text
        chips = [c.text for c in top.find_elements(By.CLASS_NAME, "chip")]
        assert any(c.startswith("kind: ") for c in chips) and "MODULE argparse" in chips
        screenshot(driver, tmp / "search.png")

        # a facet: only classes; its count is the number of class documents in the store
        facet = next(
            b
            for b in driver.find_elements(By.CSS_SELECTOR, "#label-facets .facet")
            if b.text.startswith("class")
        )
        classes = int(facet.find_element(By.CLASS_NAME, "count").text)
        facet.click()
        wait_for(driver, lambda d: settled(d) and hit_ids(d) and hit_ids(d) != first)
        assert "label kind=class" in driver.find_element(By.ID, "active-filters").text
        kinds = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#hits .chip.label")]
        assert kinds and set(kinds) == {"kind: class"}
        assert hit_ids(driver)[0].startswith("argparse.")
        on = driver.find_element(By.CSS_SELECTOR, "#label-facets .facet.on")
        assert (
            on.text.startswith("class")
            and int(on.find_element(By.CLASS_NAME, "count").text) == classes
        )
        screenshot(driver, tmp / "facet.png")

        # the next page continues the ranking
        page_one = hit_ids(driver)
        driver.find_element(By.ID, "next").click()
        wait_for(driver, lambda d: settled(d) and hit_ids(d) and hit_ids(d)[0] not in page_one)
        assert not set(hit_ids(driver)) & set(page_one)
        assert driver.find_element(By.ID, "hits").get_attribute("start") == "11"
        assert console_errors(driver) == []
    assert (tmp / "search.png").stat().st_size > 10_000 and (tmp / "facet.png").is_file()


def test_bad_input_is_shown_as_text(demo_server):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    url, tmp = demo_server
    with headless_chromium() as driver:
        driver.get(url)
        wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#label-facets .facet"))
        search(driver, "   ")
        wait_for(driver, lambda d: settled(d) and message(d))
        assert message(driver) == "Type a query first: the search box is empty."

        driver.execute_script("document.getElementById('query').value = arguments[0]", "w" * 5000)
        search(driver)
        wait_for(driver, lambda d: settled(d) and "5,000" in message(d))
        assert "at most 4,000" in message(driver) and hit_ids(driver) == []

        hostile = "\"'><script>alert(1)</script><img src=x onerror=alert(2)>"
        search(driver, "parse command line arguments")
        wait_for(driver, lambda d: settled(d) and hit_ids(d))
        driver.find_element(By.ID, "where-field").send_keys("kind")
        driver.find_element(By.ID, "where-value").send_keys(hostile)
        driver.find_element(By.ID, "add-where").click()
        wait_for(driver, lambda d: settled(d) and "No results" in message(d))
        assert message(driver) == (
            f"No results for “parse command line arguments” with kind = {hostile}."
        )
        assert hostile in driver.find_element(By.ID, "active-filters").text
        scripts = [e.get_attribute("src") for e in driver.find_elements(By.TAG_NAME, "script")]
        assert [x.rsplit("/", 2)[-2:] for x in scripts] == [
            ["static", "token.js"],
            ["static", "app.js"],
        ]  # its own
        assert driver.find_elements(By.CSS_SELECTOR, "#message *, #active-filters img") == []
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert.text  # noqa: B018
        screenshot(driver, tmp / "bad-input.png")
        assert console_errors(driver) == []
