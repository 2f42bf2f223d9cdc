"""Two writers on one store: the second is refused at once (it never waits and never
interleaves), with an error naming the store and the process holding it. Real processes: the
first index run is held inside its first batch, with the store open, while the others try.
Afterwards the store holds exactly what the runs that went through wrote.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest
from click.testing import CliRunner
from damage_kit import search_results, write_corpus

from indexer.errors import StoreError
from indexer.indexing.run import Steps, run_index
from indexer.indexing.steps import encode_texts_for_index
from indexer.ops.consistency import check_store
from indexer.store import Store
from search.cli.main import main

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]

CTX = multiprocessing.get_context("fork")  # children share the loaded modules


def _held_run(cfg, corpus, started, release, out):
    """An index run that stops inside its first batch (store open, lock held) until released."""
    import torch

    torch.set_num_threads(1)

    def encode(texts, config, encoder, progress):
        started.set()
        release.wait(120)
        return encode_texts_for_index(texts, config, encoder, progress)

    try:
        summary = run_index([str(corpus)], cfg, batch_size=8, steps=Steps(encode=encode))
        out.put(("ok", summary["encoded"]))
    except Exception as exc:  # noqa: BLE001  (reported to the test)
        out.put(("error", repr(exc)))


def _plain_run(cfg, corpus, out):
    import torch

    torch.set_num_threads(1)
    try:
        summary = run_index([str(corpus)], cfg, batch_size=8)
        out.put(("ok", summary["encoded"]))
    except StoreError as exc:
        out.put(("refused", str(exc)))
    except Exception as exc:  # noqa: BLE001
        out.put(("error", repr(exc)))


def run_child(target, *args):
    out = CTX.Queue()
    proc = CTX.Process(target=target, args=(*args, out))
    proc.start()
    return proc, out


def finish(proc, out, timeout=180):
    result = out.get(timeout=timeout)
    proc.join(timeout)
    assert proc.exitcode == 0
    return result


def test_second_index_run_is_refused_while_the_first_writes(small_indexed, tmp_path):
    first_corpus = write_corpus(tmp_path / "first.jsonl", n=30, seed=5, prefix="f")
    second_corpus = write_corpus(tmp_path / "second.jsonl", n=25, seed=6, prefix="s")
    published = search_results(small_indexed.config)
    started, release = CTX.Event(), CTX.Event()
    first, first_out = run_child(_held_run, small_indexed.config, first_corpus, started, release)
    try:
        assert started.wait(120), "the first run never reached its first batch"
        second, second_out = run_child(_plain_run, small_indexed.config, second_corpus)
        status, message = finish(second, second_out)
        assert status == "refused", message
        assert f"store {small_indexed.store} is being written" in message
        assert f"pid {first.pid}" in message  # the holder, as it wrote itself into the lock

        # the other writers are refused too, naming the same holder; searches keep working
        result = CliRunner().invoke(
            main, ["doctor", "--repair", "--config", str(small_indexed.config_file)]
        )
        assert result.exit_code == 1 and f"pid {first.pid}" in result.stderr
        result = CliRunner().invoke(
            main, ["delete", "--id", "d1", "--config", str(small_indexed.config_file)]
        )
        assert result.exit_code == 1 and f"pid {first.pid}" in result.stderr
        assert search_results(small_indexed.config) == published
    finally:
        release.set()
    assert finish(first, first_out) == ("ok", 30)

    with Store(small_indexed.store, read_only=True) as store:
        assert store.counts.documents() == 20 + 30  # nothing of the refused run
        ids = {r[0] for r in store.con.execute("SELECT external_id FROM documents").fetchall()}
    assert not any(i.startswith("s") for i in ids)
    assert check_store(small_indexed.config).problems == []

    # once the first run is done, the same second run goes through
    second, second_out = run_child(_plain_run, small_indexed.config, second_corpus)
    assert finish(second, second_out) == ("ok", 25)
    with Store(small_indexed.store, read_only=True) as store:
        assert store.counts.documents() == 20 + 30 + 25
    assert check_store(small_indexed.config).problems == []


def test_two_runs_started_together_never_interleave(small_indexed, tmp_path):
    """Two unhooked runs of different corpora started at once: each either completes or is
    refused with the lock message, and the store holds exactly the completed runs' documents,
    every chunk id once in FAISS."""
    corpora = {
        "a": write_corpus(tmp_path / "a.jsonl", n=60, seed=7, prefix="a"),
        "b": write_corpus(tmp_path / "b.jsonl", n=60, seed=8, prefix="b"),
    }
    children = {
        name: run_child(_plain_run, small_indexed.config, path) for name, path in corpora.items()
    }
    results = {name: finish(*child) for name, child in children.items()}
    for status, detail in results.values():
        assert status in ("ok", "refused"), detail
        if status == "refused":
            assert "is being written by another bertindex process (pid" in detail
    assert any(status == "ok" for status, _ in results.values())
    done = [name for name, (status, _) in results.items() if status == "ok"]
    with Store(small_indexed.store, read_only=True) as store:
        prefixes = {
            r[0][0] for r in store.con.execute("SELECT external_id FROM documents").fetchall()
        }
        assert store.counts.documents() == 20 + 60 * len(done)
    assert prefixes == {"d", *done}
    assert check_store(small_indexed.config).problems == []


def test_lock_names_its_holder_and_is_released(tmp_path):
    from indexer.store import WriterLock

    lock = WriterLock(tmp_path)
    with pytest.raises(StoreError) as err:
        WriterLock(tmp_path)
    assert f"pid {os.getpid()}" in str(err.value) and str(tmp_path) in str(err.value)
    lock.release()
    WriterLock(tmp_path).release()  # free again
