"""An app of `bertindex serve` in process, for the tests that walk its routes (access, caps,
review ownership): a store indexed and labelled with a token per scope, and the app over it
signing undo tickets with a known key."""

from __future__ import annotations

from indexer.indexing.run import run_index
from indexer.indexing.steps import sync_vector_index
from indexer.query.searcher import Searcher
from indexer.records.annotations import Annotation, Label
from indexer.store import SCOPES, Store

BASE = "http://127.0.0.1:8765"
UNDO_KEY = "ab" * 32  # the apps here sign undo tickets with it, so a test can make them


def prepare(config, corpus, scopes=SCOPES) -> dict[str, str]:
    """Index `corpus`, label every document with head `kind` (recorded for review), create a
    token per scope (named after it) and publish; returns scope -> token."""
    run_index([str(corpus)], config)
    with Store(config.store.path) as store:
        base = store.data_version()
        docs = store.con.execute("SELECT doc_id, text, content_hash FROM documents").fetchall()
        store.annotations.write(
            docs,
            [Annotation(labels=[Label("pet", 0.6, "kind", 0.4)]) for _ in docs],
            {"kind": "v1"},
        )
        store.reviews.record_heads([("kind", "classifier", ["code", "pet"], "heads/kind", "v1")])
        tokens = {s: store.tokens.create(f"{s}-user", s) for s in scopes}
        sync_vector_index(store, config, [], [], base)
    return tokens


def app_for(config, heads=None):
    """(the store, opened read-only, and the app over it); `heads`: the `ServedHeads` its
    `POST /predict` and `POST /annotate` run (None: none)."""
    from search.server import create_app

    store = Store(config.store.path, read_only=True)
    return store, create_app(Searcher(config, store), undo_key=UNDO_KEY, heads=heads)
