"""An index run's overlapped stages (reader thread, local encode thread) and the seconds it
reports for each: batches commit in reading order, a failing batch is reported while the rest
commits, a file the reader cannot finish lands in the summary, and `stages` adds up; files read
in a child process give what a reader thread gives."""

from __future__ import annotations

import gc
import gzip
import json
import os

import pytest
from bad_corpus import write_bad_corpus
from child_kit import chatty, numbers, pid_then_forever, unpicklable_failure
from damage_kit import write_corpus

from indexer.core.gc_policy import THRESHOLDS, fewer_collections
from indexer.core.in_process import ChildError, iterate_in_process
from indexer.core.prefetch import prefetched
from indexer.core.stages import StageClock
from indexer.indexing import run_files
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


def test_a_child_process_yields_in_order_and_raises_where_the_item_would_come():
    assert list(iterate_in_process(numbers, 4)) == [0, 1, 2, 3]
    seen = []
    with pytest.raises(ValueError, match="broken.jsonl row 6"):
        seen.extend(iterate_in_process(numbers, 5, "broken.jsonl row 6"))
    assert seen == [0, 1, 2, 3, 4]
    seen = []
    with pytest.raises(ChildError, match="RuntimeError: reader broke"):
        seen.extend(iterate_in_process(unpicklable_failure))
    assert seen == [1]


def test_a_child_process_is_stopped_when_the_consumer_leaves():
    items = iterate_in_process(pid_then_forever)
    pid = next(items)
    assert pid != os.getpid() and next(items) == 0
    items.close()
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)


def test_a_child_that_ends_before_reading_its_arguments_raises_a_child_error(monkeypatch):
    from indexer.core import in_process

    # a child gone at start-up (its interpreter broken, killed): the parent's write of 4 MB of
    # arguments meets a closed pipe, or its read an empty one; either way the exit code is named
    monkeypatch.setattr(in_process, "_BOOT", "import sys; sys.exit(3)")
    with pytest.raises(ChildError, match=r"ended early \(exit code 3\)"):
        list(iterate_in_process(numbers, b"x" * (4 << 20)))


def test_what_a_child_prints_goes_to_its_stderr_not_into_the_items(capfd):
    """A reader (or a library under it) that prints to standard output, through Python or on
    descriptor 1, neither breaks the items' stream nor is lost: it reaches standard error."""
    assert list(iterate_in_process(chatty, 3)) == [0, 1, 2]
    err = capfd.readouterr().err
    for i in range(3):
        assert f"chatty print {i}" in err and f"chatty fd1 {i}" in err


def _stored(config) -> list[tuple]:
    with Store(config.store.path, read_only=True) as store:
        return store.con.execute(
            "SELECT doc_id, external_id, title, text, metadata, content_hash "
            "FROM documents ORDER BY doc_id"
        ).fetchall()


def _outcome(summary: dict) -> dict:
    keep = ("encoded", "skipped_unchanged", "rejected", "rejections", "failed_batches")
    return {key: summary.get(key) for key in keep}


def test_files_read_in_a_child_process_give_what_a_reader_thread_gives(
    tiny_config, tmp_path, monkeypatch
):
    corpus = write_bad_corpus(tmp_path / "corpus")  # every kind of bad row, 5 files, 3 formats
    clean = write_corpus(tmp_path / "clean.jsonl", n=20, prefix="c")  # unchanged in run 2
    extra = write_corpus(tmp_path / "extra.jsonl", n=30, prefix="c")  # c0-c19 taken
    files = [str(clean), *map(str, corpus.files), str(extra)]
    started = []

    def counted(fn, *args):
        started.append(fn.__name__)
        return iterate_in_process(fn, *args)

    monkeypatch.setattr(run_files, "iterate_in_process", counted)
    outcomes, stored = {}, {}
    for limit in (1 << 60, 0):  # a reader thread, then a child process
        monkeypatch.setattr(run_files, "READ_IN_PROCESS_BYTES", limit)
        config = tiny_config.with_overrides(**{"store.path": str(tmp_path / f"store{limit}")})
        first = run_index(files, config, batch_size=7)
        extra.write_text(extra.read_text().replace('"c0"', '"h0"'))  # changed; clean is not
        again = run_index(files, config, batch_size=7)
        write_corpus(extra, n=30, prefix="c")  # as it was, for the next reader
        outcomes[limit], stored[limit] = (_outcome(first), _outcome(again)), _stored(config)
    assert started == ["read_files", "read_files"]
    assert outcomes[0] == outcomes[1 << 60] and stored[0] == stored[1 << 60]
    first, again = outcomes[0]
    assert first["rejected"] > 10 and first["encoded"] > 10  # the corpus's good and bad rows
    assert any("duplicate id 'c1' (first at" in r["reason"] for r in first["rejections"])
    assert any(  # clean.jsonl is not read again: its ids are claimed in the child too
        "duplicate id 'c1' (first at " + str(clean) + ", unchanged since an earlier run"
        in r["reason"]
        for r in again["rejections"]
    )


def test_the_collector_is_held_back_during_a_run_and_restored_after(tiny_config, tmp_path):
    before = gc.get_threshold()
    during = []

    def commit(plan, chunks, store, run_id):
        during.append((gc.get_threshold(), gc.get_freeze_count() > 0, gc.isenabled()))
        return commit_batch(plan, chunks, store, run_id)

    corpus = write_corpus(tmp_path / "corpus.jsonl", n=20)
    run_index([str(corpus)], tiny_config, batch_size=8, steps=Steps(commit=commit))
    assert during and set(during) == {(THRESHOLDS, True, True)}  # held back, never off
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with fewer_collections():  # overlapping blocks: the last one out restores
        with fewer_collections():
            pass
        assert gc.get_threshold() == THRESHOLDS
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
