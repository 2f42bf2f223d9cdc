"""An index run's overlapped stages (reader thread, local encode thread) and the seconds it
reports for each: batches commit in reading order, a failing batch is reported while the rest
commits, a file the reader cannot finish lands in the summary, and `stages` adds up."""

from __future__ import annotations

import gzip
import json

import pytest
from damage_kit import write_corpus

from indexer.core.prefetch import prefetched
from indexer.core.stages import StageClock
from indexer.indexing.run import STAGES, Steps, run_index
from indexer.indexing.steps import commit_batch, encode_texts_for_index
from indexer.store import Store


def test_stages_are_timed_and_the_wall_covers_each(tiny_config, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", n=60)
    summary = run_index([str(corpus)], tiny_config, batch_size=16)
    stages = summary["stages"]
    assert list(stages) == [*STAGES, "wall"]
    assert all(seconds >= 0 for seconds in stages.values())
    assert stages["wall"] >= max(seconds for name, seconds in stages.items() if name != "wall")
    for name in ("read", "plan", "tokenize", "encode", "commit", "vector_index", "publish"):
        assert stages[name] > 0, name
    with Store(tiny_config.store.path) as store:  # the store itself: the run's record
        recorded = store.runs.last_of("index")
    assert recorded is not None and recorded["summary"]["stages"] == stages


def test_batches_commit_in_reading_order_while_the_next_encodes(tiny_config, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", n=70)
    committed = []

    def commit(plan, chunks, store, run_id):
        committed.append([r.row for r in plan.batch.records])
        return commit_batch(plan, chunks, store, run_id)

    summary = run_index([str(corpus)], tiny_config, batch_size=8, steps=Steps(commit=commit))
    rows = [row for batch in committed for row in batch]
    assert rows == list(range(1, 71)) and len(committed) == 9
    assert summary["encoded"] == 70
    with Store(tiny_config.store.path, read_only=True) as store:  # doc ids in reading order
        ids = store.con.execute("SELECT external_id FROM documents ORDER BY doc_id").fetchall()
    assert [i for (i,) in ids] == [f"d{n}" for n in range(70)]


def test_a_failing_encode_is_reported_and_the_other_batches_commit(tiny_config, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", n=40)
    poisoned = json.loads(corpus.read_text().splitlines()[19])["text"]  # row 20: batch 3

    def encode(texts, config, encoder, progress):
        if poisoned in texts:
            raise RuntimeError("encoder ran out of memory")
        return encode_texts_for_index(texts, config, encoder, progress)

    summary = run_index([str(corpus)], tiny_config, batch_size=8, steps=Steps(encode=encode))
    assert [f["batch"] for f in summary["failed_batches"]] == [f"{corpus} rows 17-24"]
    assert "out of memory" in summary["failed_batches"][0]["error"]
    assert summary["encoded"] == 32
    with Store(tiny_config.store.path, read_only=True) as store:
        assert store.counts.documents() == 32


def test_a_file_the_reader_cannot_finish_lands_in_the_summary(tiny_config, tmp_path):
    text = write_corpus(tmp_path / "whole.jsonl", n=400).read_bytes()
    packed = gzip.compress(text)
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(packed[: len(packed) // 2])  # cut: the rest cannot be decompressed
    summary = run_index([str(broken)], tiny_config, batch_size=16)
    (reason,) = [r for r in summary["rejections"] if r["source"] == str(broken)]
    assert "cannot read the file" in reason["reason"]
    assert summary["failed_batches"] == []
    assert 0 < summary["encoded"] < 400  # the rows before the cut are stored


def test_prefetched_keeps_order_and_raises_where_the_item_would_come():
    def items():
        yield from range(5)
        raise ValueError("broken.jsonl: row 6 unreadable")

    seen = []
    with pytest.raises(ValueError, match="broken.jsonl"):
        with prefetched(items(), depth=2) as ahead:
            seen.extend(ahead)
    assert seen == [0, 1, 2, 3, 4]


def test_prefetched_stops_and_closes_the_iterator_when_the_consumer_leaves():
    closed = []

    def items():
        try:
            yield from range(1000)
        finally:
            closed.append(True)

    with prefetched(items(), depth=1) as ahead:
        assert next(ahead) == 0
    assert closed == [True]


def test_a_stage_opened_inside_another_is_counted_once():
    clock = StageClock(("outer", "inner"))
    with clock.timed("outer"):
        with clock.timed("inner"):
            sum(range(200_000))
    stages = clock.summary()
    assert stages["inner"] > 0
    assert stages["outer"] + stages["inner"] <= stages["wall"]
