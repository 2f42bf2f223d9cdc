"""`Searcher.open`: a Searcher that opens the configured store read-only and closes it with
itself; a store passed to the constructor stays its opener's."""

import duckdb
import pytest

from indexer.errors import VectorIndexError
from indexer.index.version_files import version_files
from indexer.indexing.run import run_index
from indexer.query.searcher import Searcher
from indexer.records.versions import current_version
from indexer.store import Store

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def indexed(tiny_config, small_corpus):
    run_index([str(small_corpus)], tiny_config, collection="docs")
    return tiny_config


def test_open_searches_and_closes_its_store(indexed):
    with Searcher.open(indexed) as searcher:
        hits = searcher.search("the cat sat on the mat", 2, mode="dense")
        assert hits[0].id == "a1"  # a stored text finds itself first
        assert searcher.store.counts.documents() == 5
    with pytest.raises(duckdb.ConnectionException):
        searcher.store.counts.documents()


def test_close_leaves_a_passed_store_open(indexed):
    with Store(indexed.store.path, read_only=True) as store:
        with Searcher(indexed, store) as searcher:
            assert searcher.search("gzip", 1, mode="keyword")[0].id == "b2"
        assert store.counts.documents() == 5  # still open: its opener closes it


def test_open_closes_the_store_when_the_searcher_refuses(indexed, monkeypatch):
    base = version_files(indexed.store.path, current_version(indexed.store.path))["base"]
    base.unlink()  # damaged: the constructor refuses it
    closed = []
    real_close = Store.close
    monkeypatch.setattr(Store, "close", lambda self: closed.append(self) or real_close(self))
    with pytest.raises(VectorIndexError, match="base .* missing"):
        Searcher.open(indexed)
    assert len(closed) == 1  # the store it opened is not left open
