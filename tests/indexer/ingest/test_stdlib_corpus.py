"""The demo corpus: docstrings read with ast, and a real search over it."""

import json

import pytest

from indexer.config import Config
from indexer.indexing.run import run_index
from indexer.ingest.stdlib_corpus import iter_passages, main
from indexer.query.searcher import Searcher
from indexer.store import Store


def test_passages_from_source_without_importing(tmp_path):
    pkg = tmp_path / "toolbox"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        '"""Toolbox: helpers for parsing and writing many things."""\n'
    )
    (pkg / "io.py").write_text(
        '"""Input and output helpers for the toolbox package, in one place."""\n'
        'raise SystemExit("never imported")\n'
        "def read_all(path):\n"
        '    """Read every line of a file and return them as a list of strings."""\n'
        'def _private():\n    """A private helper that must not become a passage at all."""\n'
        'class Writer:\n    """Write records to a file, one per line, flushing as it goes."""\n'
        '    def write(self):\n        """Write one record to the file and flush it at once."""\n'
    )
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "t.py").write_text(
        '"""Tests are skipped entirely by the corpus reader."""\n'
    )
    rows = list(iter_passages(tmp_path))
    assert [(r["id"], r["kind"]) for r in rows] == [
        ("toolbox", "module"),
        ("toolbox.io", "module"),
        ("toolbox.io.read_all", "function"),
        ("toolbox.io.Writer", "class"),
    ]
    assert rows[2]["module"] == "toolbox.io" and rows[2]["line"] == 3


@pytest.mark.slow
def test_demo_search_finds_argparse_first(tmp_path):
    corpus = tmp_path / "stdlib.jsonl"
    assert main([str(corpus)]) == 0
    assert 1000 < sum(1 for _ in corpus.open()) < 5000
    cfg = Config().with_overrides(**{"store.path": str(tmp_path / "store")})
    summary = run_index([str(corpus)], cfg, collection="stdlib")
    assert summary["rejected"] == 0
    with Store(cfg.store.path, read_only=True) as store:
        searcher = Searcher(cfg, store)
        assert searcher.search("parse command line arguments", k=3)[0].id.startswith("argparse")
        hits = searcher.search("compress a file with gzip", k=3, where=[("kind", "function")])
        assert hits and all(h.metadata["kind"] == "function" for h in hits)
        assert hits[0].id.startswith("gzip.")
    json.dumps([h.to_dict() for h in hits])
