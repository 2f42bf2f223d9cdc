"""Crash safety: a run SIGKILLed anywhere, then re-run, ends where one clean run ends (same
documents, chunks and ids exactly, no duplicate ids, FAISS ids == stored chunk ids; vectors and
search results the same under `indexer.ops.tolerance`: a resumed run batches texts differently,
and some CPUs' kernels sum in an order that depends on the batch's shape), and searches keep
working after every kill.

Runs are forked (nothing re-imported) and kill themselves at named crash points
(`indexer.core.faults`), plus kills at seeded random moments.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time

import pytest
from crash_kit import QUERIES, assert_same_results, results, write_corpus

from indexer.core.faults import POINTS
from indexer.indexing.run import run_index
from indexer.ops.consistency import check_store
from indexer.store import Store

pytestmark = pytest.mark.heavy

BATCH = 100


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
    corpus2 = write_corpus(
        tmp_path / "docs2.jsonl", 3000, seed=1, drop=dropped, change=changed, extra=50
    )
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
    corpus = write_corpus(tmp_path / "docs.jsonl", 200, seed=3, change={"d1", "d2", "d3"}, extra=5)
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
