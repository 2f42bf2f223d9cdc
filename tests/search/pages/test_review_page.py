"""The review page of `bertindex serve` in a real headless browser (Debian chromium): one
document at a time with the head's label and score, a label by button and by key, skip, undo
(the stored row goes again), document text shown as text (a <script> in it never runs), the
server bound to 127.0.0.1, and no console error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from browser import console_errors, headless_chromium, screenshot
from port_kit import free_port, listeners
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from testkit import ROOT, tiny_model_config

from indexer.indexing.run import run_index
from indexer.indexing.steps import sync_vector_index
from indexer.records.annotations import Annotation, Label
from indexer.store import Store
from search.cli.serve import SESSION_FILE

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]

HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned=2"> & "quotes"'
DOCS = {
    "h1": (HOSTILE, "pos", 0.51),
    "h2": ("the dog slept", "neg", 0.60),
    "h3": ("a great film", "pos", 0.90),
}


def reviews(store_path) -> list[tuple]:
    with Store(store_path, read_only=True, snapshot=False) as store:
        return [
            tuple(r)
            for r in store.con.execute(
                "SELECT d.external_id, r.label, r.reviewer, r.source FROM reviews r "
                "JOIN documents d USING (doc_id) ORDER BY r.review_id"
            ).fetchall()
        ]


@pytest.fixture
def served(request, tiny_model_dir, tmp_path):
    """A `bertindex serve` process over three annotated documents; with a param (a scope),
    the store has a token of that scope named `rita`. Yields (port, store, rita's token or
    None, the session address `serve` wrote to its 0600 file or None)."""
    scope = getattr(request, "param", None)
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": k, "text": t}) + "\n" for k, (t, _, _) in DOCS.items())
    )
    config = tiny_model_config(tiny_model_dir, tmp_path / "store")
    run_index([str(corpus)], config, collection="docs")
    with Store(config.store.path) as store:
        base = store.data_version()
        docs = store.con.execute(
            "SELECT doc_id, text, content_hash, external_id FROM documents ORDER BY doc_id"
        ).fetchall()
        store.annotations.write(
            [d[:3] for d in docs],
            [
                Annotation(labels=[Label(DOCS[d[3]][1], DOCS[d[3]][2], "clf", 1 - DOCS[d[3]][2])])
                for d in docs
            ],
            {"clf": "v1"},
        )
        store.reviews.record_heads([("clf", "classifier", ["neg", "pos"], "heads/clf", "v1")])
        token = store.tokens.create("rita", scope) if scope else None
        sync_vector_index(store, config, [], [], base)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config.model_dump()))
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", BERTINDEX_REVIEWER="tester")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "search.cli.main",
            "serve",
            "--config",
            str(path),
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not listeners(port):
            assert server.poll() is None, server.stderr.read().decode()
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.3)
        session_file = Path(config.store.path) / SESSION_FILE  # stderr is no terminal here
        session = session_file.read_text().strip() if token else None
        yield port, config.store.path, token, session
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_review_page_labels_skips_and_undoes(served, tmp_path):
    port, store_path, _, _ = served
    assert set(listeners(port)) == {"0100007F"}  # 127.0.0.1 only
    with headless_chromium() as driver:
        wait = WebDriverWait(driver, 30)
        driver.get(f"http://127.0.0.1:{port}/review?head=clf")

        def shown() -> str:
            wait.until(lambda d: not d.find_element(By.ID, "doc").get_attribute("hidden"))
            return driver.find_element(By.ID, "doc-id").text

        def next_is(external_id: str) -> None:
            wait.until(
                lambda d: (
                    d.find_element(By.ID, "doc-id").text == external_id
                    and not d.find_element(By.ID, "doc").get_attribute("hidden")
                )
            )

        assert shown() == "h1"  # least sure first
        assert driver.find_element(By.ID, "doc-text").text == HOSTILE  # text, not markup
        assert driver.execute_script("return window.pwned === undefined")
        assert not driver.find_elements(By.CSS_SELECTOR, "#doc-text *")
        assert driver.find_element(By.ID, "predicted").text == "pos"
        assert driver.find_element(By.ID, "score").text == "0.510"
        buttons = driver.find_elements(By.CSS_SELECTOR, "#buttons button.label")
        assert [b.get_attribute("data-label") for b in buttons] == ["neg", "pos"]
        screenshot(driver, tmp_path / "review.png")

        buttons[0].click()  # h1 -> neg by button
        next_is("h2")
        assert reviews(store_path) == [("h1", "neg", "tester", "page")]
        driver.find_element(By.TAG_NAME, "body").send_keys("u")  # undo: the row goes, h1 back
        next_is("h1")
        wait.until(lambda d: "undone" in d.find_element(By.ID, "status").text)
        assert reviews(store_path) == []
        driver.find_element(By.TAG_NAME, "body").send_keys("2")  # h1 -> pos by key
        next_is("h2")
        driver.find_element(By.ID, "skip").click()  # skip h2
        next_is("h3")
        driver.find_element(By.TAG_NAME, "body").send_keys("u")  # undo the skip
        next_is("h2")
        driver.find_element(By.TAG_NAME, "body").send_keys("1")
        next_is("h3")
        driver.find_element(By.TAG_NAME, "body").send_keys("2")
        wait.until(lambda d: "nothing left" in d.find_element(By.ID, "status").text)
        assert reviews(store_path) == [
            ("h1", "pos", "tester", "page"),
            ("h2", "neg", "tester", "page"),
            ("h3", "pos", "tester", "page"),
        ]
        assert driver.execute_script("return window.pwned === undefined")
        driver.get(f"http://127.0.0.1:{port}/review?head=nope")
        wait.until(lambda d: "has not annotated" in d.find_element(By.ID, "status").text)
        errors = [e for e in console_errors(driver) if "/review/api/next" not in e]
        assert errors == []


def who_labelled(store_path) -> list[tuple]:
    with Store(store_path, read_only=True, snapshot=False) as store:
        return [(r.id, r.label, r.who) for r in store.reviews.history("clf")]


@pytest.mark.parametrize("served", ["review"], indirect=True)
def test_pages_with_tokens(served):
    """With a token in the store: without one both pages say a token is needed (401) and ask
    for it; a typed token works and is recorded as who labelled; the session address `serve`
    printed works and leaves the address bar without the token; a search is kept in the URL."""
    port, store_path, token, session = served
    base = f"http://127.0.0.1:{port}"
    assert session.startswith(base + "/#token=bi_")
    with headless_chromium() as driver:
        wait = WebDriverWait(driver, 30)
        status = lambda d: d.find_element(By.ID, "status").text  # noqa: E731
        driver.get(f"{base}/review?head=clf")
        wait.until(lambda d: "needs an access token" in status(d) and "401" in status(d))
        assert (
            not driver.find_elements(By.ID, "doc-text")
            or not driver.find_element(By.ID, "doc-text").text
        )
        driver.find_element(By.ID, "token-input").send_keys(token)
        driver.find_element(By.ID, "token-use").click()
        wait.until(
            lambda d: (
                d.find_element(By.ID, "doc-id").text == "h1"
                and not d.find_element(By.ID, "doc").get_attribute("hidden")
            )
        )
        options = [o.text for o in driver.find_elements(By.CSS_SELECTOR, "#head option")]
        assert options == ["clf"]
        driver.find_element(By.TAG_NAME, "body").send_keys("1")
        wait.until(lambda d: d.find_element(By.ID, "doc-id").text == "h2")
        assert who_labelled(store_path) == [("h1", "neg", "rita")]

        driver.get(session.replace("/#", "/review?head=clf#"))  # the address serve printed
        wait.until(
            lambda d: (
                d.find_element(By.ID, "doc-id").text == "h2"
                and not d.find_element(By.ID, "doc").get_attribute("hidden")
            )
        )
        assert "token" not in driver.current_url
        driver.find_element(By.TAG_NAME, "body").send_keys("2")
        wait.until(lambda d: d.find_element(By.ID, "doc-id").text == "h3")
        assert who_labelled(store_path)[-1] == ("h2", "pos", "serve")

        driver.get(f"{base}/?q=film&mode=keyword")  # the tab keeps its token
        wait.until(
            lambda d: (
                d.find_elements(By.CSS_SELECTOR, "#hits li.hit")
                and not d.find_element(By.TAG_NAME, "body").get_attribute("data-busy")
            )
        )
        assert driver.find_element(By.ID, "query").get_attribute("value") == "film"
        assert driver.find_element(By.ID, "mode").get_attribute("value") == "keyword"
        assert "q=film" in driver.current_url and "mode=keyword" in driver.current_url
        driver.execute_script("sessionStorage.clear()")
        driver.refresh()
        message = lambda d: d.find_element(By.ID, "message").text  # noqa: E731
        wait.until(lambda d: "needs an access token" in message(d))
        assert not driver.find_elements(By.CSS_SELECTOR, "#hits li.hit")
        assert driver.find_element(By.ID, "token-form").is_displayed()
        errors = [e for e in console_errors(driver) if "401" not in e and "/api/" not in e]
        assert errors == []
