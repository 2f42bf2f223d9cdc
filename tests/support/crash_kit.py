"""Helpers for the tests that compare index runs (crash safety, the Prefect and Dask runners): a
seeded corpus of the tiny model's words, and search results compared under
`indexer.ops.tolerance`."""

from __future__ import annotations

import json
import random

from testkit import TINY_WORDS

from indexer.ops.tolerance import for_dtype, same_ranking
from indexer.query.searcher import Searcher
from indexer.store import Store

QUERIES = ["the cat sat on the mat", "red apple river", "parse python file", "slow train city"]


def write_corpus(path, n, seed, drop=(), change=(), extra=0):
    rng = random.Random(seed)
    rows = []
    for i in range(n + extra):
        words = rng.choices(TINY_WORDS, k=rng.randint(3, 12 if i % 50 else 40))  # some long
        doc_id = f"d{i}"
        if doc_id in drop:
            continue
        if doc_id in change:
            words = ["changed", *words[::-1]]
        rows.append({"id": doc_id, "text": " ".join(words), "group": str(i % 7)})
    rows.insert(17, {"id": "bad", "text": ""})  # a rejected row in every run
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def results(cfg):
    with Store(cfg.store.path, read_only=True) as store:
        searcher = Searcher(cfg, store)
        vectors = searcher.encode_queries(QUERIES)
        hits = searcher.search_vectors(vectors, k=10)
    return [[(h.id, h.score) for h in q] for q in hits]


def assert_same_results(cfg, ref_cfg):
    """The same search results, near-ties allowed to swap (`tolerance.same_ranking`)."""
    tol = for_dtype(cfg.model.dtype)
    got, ref = results(cfg), results(ref_cfg)
    assert len(got) == len(ref)
    assert [
        f"query {i}: {d}" for i, (g, r) in enumerate(zip(got, ref)) for d in same_ranking(g, r, tol)
    ] == []
