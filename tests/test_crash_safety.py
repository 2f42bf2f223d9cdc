"""Crash safety: a run SIGKILLed anywhere, then re-run, ends where one clean run ends (same
documents, chunks and ids exactly, no duplicate ids, FAISS ids == stored chunk ids; vectors and
search results the same under `indexer.ops.tolerance`: a resumed run batches texts differently,
and some CPUs' kernels sum in an order that depends on the batch's shape), and searches keep
working after every kill.

Runs are forked (nothing re-imported) and kill themselves at named crash points
(`indexer.core.faults`), plus kills at seeded random moments.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time

from conftest import TINY_WORDS

from indexer.core.faults import POINTS
from indexer.indexing.run import run_index
from indexer.ops.consistency import check_store
from indexer.ops.tolerance import for_dtype, same_ranking
from indexer.query.searcher import Searcher
from indexer.store import Store

BATCH = 100
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


def _child(cfg, corpus, on_missing, crash_at):
    import torch

    torch.set_num_threads(1)  # no OpenMP pool in a forked child
    if crash_at:
        os.environ["BERTINDEX_CRASH_AT"] = crash_at
    run_index([str(corpus)], cfg, batch_size=BATCH, on_missing=on_missing)


def run_forked(cfg, corpus, on_missing="keep", crash_at=None, kill_after=None):
    """Run the indexer in a forked child; returns its exit code (-9: SIGKILLed)."""
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_child, args=(cfg, corpus, on_missing, crash_at))
    proc.start()
    if kill_after is not None:
        proc.join(kill_after)
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
    proc.join(120)
    assert not proc.is_alive(), "indexing child hung"
    return proc.exitcode


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
    assert [f"query {i}: {d}" for i, (g, r) in enumerate(zip(got, ref))
            for d in same_ranking(g, r, tol)] == []


def assert_same(cfg, ref_cfg):
    got, ref = check_store(cfg), check_store(ref_cfg)
    assert got.problems == [] and ref.problems == []
    assert got.differences(ref) == []
    assert_same_results(cfg, ref_cfg)


def test_sigkill_anywhere_then_rerun_equals_one_clean_run(tiny_config, tmp_path):
    ref_cfg = tiny_config.with_overrides(**{"store.path": str(tmp_path / "ref")})
    cfg = tiny_config
    corpus = write_corpus(tmp_path / "docs.jsonl", 3000, seed=1)

    start = time.monotonic()
    assert run_forked(ref_cfg, corpus) == 0
    clean_seconds = time.monotonic() - start

    # phase 1: first indexing, killed at every crash point, then at random moments
    for point in POINTS:
        if point == "delete.before_commit" or point.startswith("reindex."):
            continue  # phase 2; test_reindex
        at = f"{point}:3" if point.startswith("batch.") else point
        assert run_forked(cfg, corpus, crash_at=at) == -signal.SIGKILL, point
        with Store(cfg.store.path, read_only=True) as store:
            published = store.version is not None
        if published:
            results(cfg)  # a search after any kill works on the last published version
    rng = random.Random(7)
    for _ in range(3):
        code = run_forked(cfg, corpus, kill_after=rng.uniform(0.1, clean_seconds))
        assert code in (0, -signal.SIGKILL)
    assert run_forked(cfg, corpus) == 0
    assert_same(cfg, ref_cfg)

    # phase 2: 30 changed, 40 gone (on_missing: delete), 50 new; killed in each kind of write
    changed = {f"d{i}" for i in range(100, 130)}
    dropped = {f"d{i}" for i in range(500, 540)}
    corpus2 = write_corpus(tmp_path / "docs2.jsonl", 3000, seed=1, drop=dropped,
                           change=changed, extra=50)
    assert run_forked(ref_cfg, corpus2, "delete") == 0
    for at in ("batch.before_commit:1", "delete.before_commit", "index.before_pointer"):
        assert run_forked(cfg, corpus2, "delete", crash_at=at) == -signal.SIGKILL, at
        results(cfg)
    assert run_forked(cfg, corpus2, "delete") == 0
    assert_same(cfg, ref_cfg)
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        assert store.counts.documents() == 3000 + 50 - 40
        statuses = [r["status"] for r in store.runs.last(50)]
    assert statuses[0] == "completed" and "interrupted" in statuses


def test_rerun_encodes_nothing_then_only_changes(tiny_config, tmp_path):
    corpus = write_corpus(tmp_path / "docs.jsonl", 200, seed=3)
    first = run_index([str(corpus)], tiny_config, batch_size=BATCH)
    assert first["encoded"] == 200
    again = run_index([str(corpus)], tiny_config, batch_size=BATCH)
    assert (again["encoded"], again["index"]["version"]) == (0, None)
    corpus = write_corpus(tmp_path / "docs.jsonl", 200, seed=3, change={"d1", "d2", "d3"},
                          extra=5)
    third = run_index([str(corpus)], tiny_config, batch_size=BATCH)
    assert (third["encoded"], third["skipped_unchanged"]) == (8, 197)
    assert check_store(tiny_config).problems == []


def test_searches_during_a_run_never_fail(tiny_config, tmp_path):
    corpus = write_corpus(tmp_path / "docs.jsonl", 300, seed=5)
    run_index([str(corpus)], tiny_config, batch_size=BATCH)
    before = results(tiny_config)
    bigger = write_corpus(tmp_path / "docs.jsonl", 300, seed=5, change={"d1"}, extra=700)
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_child, args=(tiny_config, bigger, "keep", None))
    proc.start()
    searched = 0
    while proc.is_alive():
        got = results(tiny_config)  # opens the published snapshot: never locked, never half
        assert len(got) == len(QUERIES) and all(len(q) == 10 for q in got)
        searched += 1
    proc.join()
    assert proc.exitcode == 0 and searched >= 1
    assert results(tiny_config) != before  # the switch happened
    assert check_store(tiny_config).problems == []
