"""The self-tuned hybrid weight (`search.dense_weight: auto`): pseudo-queries cut out of their
documents, the weight choice by hand, an index run that records the tuning in the published
snapshot, searches that use it, and a config that pins the old fixed weight."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from indexer.index import fusion
from indexer.indexing.fusion_tune import (
    MIN_QUERY_DOCS,
    WEIGHTS,
    _mean_ndcg,
    choose_weight,
    draw_pseudo_queries,
    is_due,
    split_sentences,
)
from indexer.indexing.run import run_index
from indexer.query.searcher import Searcher
from indexer.store import DocText, Store

WORDS = (
    "apple river stone cloud engine garden silver paper window forest signal copper "
    "harbor lantern meadow rocket violet castle puzzle thunder"
).split()


def _corpus(path, n: int) -> str:
    """n documents of three five-to-eight-word sentences, words drawn by a seeded generator."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(n):
        sentences = [
            " ".join(rng.choice(WORDS, int(rng.integers(5, 9)))).capitalize() + "."
            for _ in range(3)
        ]
        rows.append({"id": f"d{i}", "title": f"doc {i}", "text": " ".join(sentences)})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_pseudo_queries_are_cut_out_of_their_document():
    docs = [
        DocText(1, "T", "Alpha beta gamma delta epsilon. Zeta eta theta iota kappa lambda."),
        DocText(2, None, "Only one sentence of five words here."),
        DocText(3, None, "Short. Alpha beta gamma delta epsilon zeta."),
    ]
    assert split_sentences(docs[0].text) == [
        "Alpha beta gamma delta epsilon.",
        "Zeta eta theta iota kappa lambda.",
    ]
    queries = draw_pseudo_queries(docs, 10, seed=0)
    assert [q.doc_id for q in queries] == [1]  # two usable sentences needed ("Short." is not)
    q = queries[0]
    assert q.query in docs[0].text and q.query not in q.rest and q.title == "T"
    assert sorted([q.query, q.rest]) == sorted(split_sentences(docs[0].text))
    kept = draw_pseudo_queries(docs, 10, seed=0, cut=False)[0]
    assert kept.query == q.query and kept.rest == docs[0].text


def test_weight_choice_by_hand():
    # one relevant document: nDCG@10 = 1 / log2(rank + 1) within the top ten, else 0
    rankings = [[(5, 1.0), (9, 0.5)], [(9, 1.0), (5, 0.5), (7, 0.2)], [(1, 1.0)] * 10]
    assert _mean_ndcg([5, 7, 3], rankings) == pytest.approx((1 + 1 / math.log2(4) + 0) / 3)
    # a lone spike at 0.2 loses to a broad plateau once each weight is averaged with its
    # neighbours; a tie goes to the more dense-leaning weight
    curve = {w: 0.30 for w in WEIGHTS} | {0.2: 0.50, 0.6: 0.42, 0.65: 0.42, 0.7: 0.42}
    assert choose_weight(curve) == 0.65
    assert choose_weight({0.4: 0.5, 0.5: 0.5, 0.6: 0.5}) == 0.6


def test_index_run_tunes_records_and_searches_use_it(tiny_config, tmp_path):
    config = tiny_config.with_overrides(**{"search.tune_queries": MIN_QUERY_DOCS})
    summary = run_index([_corpus(tmp_path / "c.jsonl", MIN_QUERY_DOCS + 10)], config)
    assert summary["index"]["fusion"]["queries"] == MIN_QUERY_DOCS
    with Store(config.store.path, read_only=True) as store:  # the published snapshot
        tuning = store.vectors.fusion_tuning()
        assert (
            tuning is not None and tuning.dense_weight == summary["index"]["fusion"]["dense_weight"]
        )
        assert tuning.dense_weight in WEIGHTS and tuning.documents == MIN_QUERY_DOCS + 10
        assert tuning.weights_hash == store.vectors.provenance().weights_hash
        curve = {float(w): v for w, v in tuning.curve.items()}
        assert choose_weight(curve) == tuning.dense_weight  # the weight is what the curve says
        assert not is_due(store, config)
        auto = Searcher(config, store)
        assert auto.dense_weight == tuning.dense_weight
        pinned = Searcher(config.with_overrides(**{"search.dense_weight": 0.6}), store)
        assert pinned.dense_weight == 0.6
        dense = [(1, 0.9), (2, 0.5), (3, 0.1)]
        keyword = [(3, 9.0), (2, 1.0)]
        w = tuning.dense_weight
        assert auto.fuse(dense, keyword) == fusion.weighted([dense, keyword], [w, 1 - w])
        assert pinned.fuse(dense, keyword) == fusion.weighted([dense, keyword], [0.6, 0.4])
        hits = auto.search("apple river stone", k=3, mode="hybrid")
        assert len(hits) == 3
    again = run_index([str(tmp_path / "c.jsonl")], config)  # unchanged: not tuned again
    assert "fusion" not in again["index"]


def test_small_or_untuned_store_falls_back_to_the_fixed_weight(tiny_config, small_corpus):
    summary = run_index([str(small_corpus)], tiny_config)
    assert "fusion" not in summary["index"]  # 5 documents: too few to tune
    with Store(tiny_config.store.path, read_only=True) as store:
        assert store.vectors.fusion_tuning() is None
        assert Searcher(tiny_config, store).dense_weight == fusion.FALLBACK_DENSE_WEIGHT == 0.6
