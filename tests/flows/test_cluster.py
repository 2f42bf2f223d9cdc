"""`runner: dask` against a real cluster: a `dask scheduler` and two `dask worker --nthreads 1`
processes on 127.0.0.1 (free ports, no nanny, stopped by the test), indexing and annotating
the tiny random BERT's corpus (store and inbox modes). Both workers do at least a third of the model
work, the store (documents, chunks, vectors, labels, entities, search results of the IVF index the
workers built in shards) equals the local runner's under the tolerance rules of
`indexer.ops.tolerance` (workers batch other texts together than the local runner, and some CPUs'
kernels sum in an order that depends on the batch's shape: ids, spans and clear labels exactly,
vectors by cosine, scores within a stated difference), and a worker armed to SIGKILL itself mid-run
(`indexer.core.faults.arm`, `partition.before_return`) loses a partition that the other worker
reruns: the store is the same again. One cluster serves the module (the second test leaves it one
worker).

The partition arithmetic (`split`, `join`, the annotate partition sizes) is checked without a
cluster.
"""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from crash_kit import assert_same_results, write_corpus
from head_kit import head_args

from indexer.annotate.cluster import partition_rows
from indexer.indexing.partitions import EncodedPartition, Work, join, split
from indexer.ops.consistency import check_store
from indexer.ops.tolerance import for_dtype, same_entities, same_labels
from indexer.store import Store

pytestmark = pytest.mark.heavy

DOCS = 800  # one read batch (batch_size 2048): the case where one worker did all the work
SPEC = "IVF8,Flat"  # an IVF spec: the cluster builds it in shards, the local runner in one
START_S = 60  # scheduler and both workers up (torch imported), or the test fails


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:  # in the child: SIGTERM when pytest dies, even by SIGKILL
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


@contextmanager
def dask_cluster(logs: Path, n_workers: int = 2):
    """(scheduler address, worker Popens); every process stopped on exit."""
    from distributed import Client

    dask = str(Path(sys.executable).with_name("dask"))
    address = f"tcp://127.0.0.1:{_free_port()}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("BERTINDEX_CRASH_AT", None)
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []

    def start(name: str, args: list[str]) -> subprocess.Popen:
        with open(logs / f"{name}.log", "w") as log:
            proc = subprocess.Popen(
                [dask, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
        procs.append(proc)
        return proc

    try:
        start(
            "scheduler",
            [
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                address.rsplit(":", 1)[1],
                "--no-dashboard",
                "--idle-timeout",
                "300s",
            ],
        )
        # the library imported at start (torch, transformers), as a long-lived worker has it
        workers = [
            start(
                f"w{i}",
                [
                    "worker",
                    address,
                    "--nthreads",
                    "1",
                    "--no-nanny",
                    "--host",
                    "127.0.0.1",
                    "--no-dashboard",
                    "--name",
                    f"w{i}",
                    "--death-timeout",
                    "60s",
                    "--preload",
                    "indexer.annotate.cluster",
                ],
            )
            for i in range(n_workers)
        ]
        with Client(address, timeout=START_S) as client:
            client.wait_for_workers(n_workers, timeout=START_S)
        yield address, workers
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 3
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A scheduler and two single-threaded workers for this module's tests."""
    with dask_cluster(tmp_path_factory.mktemp("dask-logs")) as running:
        yield running


def _annotations(cfg) -> tuple[list, list]:
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        labels = store.con.execute(
            "SELECT d.external_id, a.head, a.label, a.probability, a.runner_up "
            "FROM annotations a JOIN documents d USING (doc_id) ORDER BY 1, 2, 3"
        ).fetchall()
        entities = store.con.execute(
            "SELECT d.external_id, e.head, e.type, e.start_char, e.end_char, e.text, "
            "e.score FROM entities e JOIN documents d USING (doc_id) "
            "ORDER BY 1, 2, 4"
        ).fetchall()
    return labels, entities


def _names(workers) -> set[str]:
    return {f"{socket.gethostname()}:{w.pid}" for w in workers}


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, tiny_model_dir, heads):
    """The corpus indexed and annotated by the local runner: the store to compare with."""
    from flows.annotate import run_annotate
    from indexer.config import Config
    from indexer.indexing.run import run_index

    root = tmp_path_factory.mktemp("cluster-reference")
    corpus = write_corpus(root / "docs.jsonl", DOCS, seed=11)
    cfg = Config().with_overrides(
        **{
            "model.name": str(tiny_model_dir),
            "model.dtype": "fp32",
            "model.device": "cpu",
            "model.max_length": 16,
            "long_documents.stride": 4,
            "store.path": str(root / "store"),
            "search.query_encoder": "torch",
            "index.spec": SPEC,
        }
    )
    run_index([str(corpus)], cfg)
    run_annotate(head_args(heads), cfg)
    return corpus, cfg, _annotations(cfg)


def _on_cluster(cfg, address, store):
    return cfg.with_overrides(
        **{"runner": "dask", "dask.address": address, "store.path": str(store)}
    )


def _assert_same_store(cfg, ref_cfg, ref_annotations):
    got, ref = check_store(cfg), check_store(ref_cfg)
    assert got.problems == [] and ref.problems == []
    assert got.differences(ref) == []
    assert_same_results(cfg, ref_cfg)
    tol = for_dtype(cfg.model.dtype)
    (labels, entities), (ref_labels, ref_entities) = _annotations(cfg), ref_annotations
    assert same_labels(labels, ref_labels, tol) == []
    assert same_entities(entities, ref_entities, tol) == []


def test_index_and_annotate_on_two_worker_processes(
    prefect_api, local_reference, heads, cluster, tmp_path
):
    from flows.annotate import annotate_flow
    from flows.index_corpus import flow_for

    corpus, ref_cfg, ref_annotations = local_reference
    address, workers = cluster
    cfg = _on_cluster(ref_cfg, address, tmp_path / "store")
    indexed = flow_for(cfg)([str(corpus)], cfg)
    annotated = annotate_flow(head_args(heads), cfg)
    assert indexed["encoded"] == DOCS and indexed["failed_batches"] == []
    assert indexed["stages"]["encode"] > 0  # the writer's wait for the workers
    assert indexed["stages"]["tokenize"] == 0  # done on the workers, not timed here
    assert annotated["annotated"] == DOCS
    for summary in (indexed, annotated):  # both worker processes, each a fair share
        shares = summary["cluster"]["workers"]
        assert set(shares) == _names(workers), shares
        assert all(w["share"] >= 1 / 3 and w["cpu_seconds"] > 0 for w in shares.values()), shares
    assert indexed["cluster"]["index"] == {"on": "workers", "shards": 1}  # one batch of vectors
    # texts out; the workers see the store's folder, so their vectors stay there as files the
    # writer records, and only the chunks' positions come back (less than one vector's bytes)
    assert indexed["cluster"]["vectors"] == "files"
    sent = indexed["cluster"]["bytes_per_document"]
    assert 0 < sent["sent"] < 200 and 0 < sent["received"] < 32 * 4
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        assert len(store.vectors.files()) == 4  # one a partition
        assert store.con.execute("SELECT count(*) FROM vectors").fetchone() == (0,)
    assert not any((tmp_path / "store" / "vectors" / "incoming").iterdir())
    _assert_same_store(cfg, ref_cfg, ref_annotations)


def test_inbox_on_the_cluster_gives_the_same_store(
    prefect_api, local_reference, heads, cluster, tmp_path
):
    import shutil

    from flows.annotate import annotate_flow

    corpus, ref_cfg, ref_annotations = local_reference
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(corpus, inbox / "docs.jsonl")
    cfg = _on_cluster(ref_cfg, cluster[0], tmp_path / "store")
    summary = annotate_flow(head_args(heads), cfg, inbox=str(inbox))
    assert [f["status"] for f in summary["files"]] == ["done"]
    assert summary["annotated"] == DOCS and not summary["shared_pass"]
    assert "runner: dask" in summary["separate_pass_reason"]
    _assert_same_store(cfg, ref_cfg, ref_annotations)


def test_worker_killed_mid_run_gives_the_same_store(
    prefect_api, local_reference, heads, cluster, tmp_path
):
    from distributed import Client

    from flows.annotate import annotate_flow
    from flows.index_corpus import flow_for

    corpus, ref_cfg, ref_annotations = local_reference
    address, workers = cluster
    victim = workers[1]
    with Client(address, timeout=START_S) as client:  # SIGKILL itself at its second partition
        (addr,) = [a for a, pid in client.run(os.getpid).items() if pid == victim.pid]
        client.run(
            importlib.import_module("indexer.core.faults").arm,
            "partition.before_return:2",
            workers=[addr],
        )
    # the vectors sent back (`dask.vectors: send`, the path for workers without the folder)
    cfg = _on_cluster(ref_cfg, address, tmp_path / "store").with_overrides(
        **{"dask.vectors": "send"}
    )
    indexed = flow_for(cfg)([str(corpus)], cfg)
    assert indexed["cluster"]["vectors"] == "sent"
    assert indexed["cluster"]["bytes_per_document"]["received"] > 32 * 4  # vectors back
    assert victim.wait(10) == -signal.SIGKILL  # died holding an encoded partition
    annotated = annotate_flow(head_args(heads), cfg)  # on the worker left
    assert indexed["encoded"] == DOCS and indexed["failed_batches"] == []
    assert annotated["annotated"] == DOCS
    done = indexed["cluster"]["workers"]
    assert sum(w["partitions"] for w in done.values()) == 4  # each partition committed once
    # the partition it died with (and any result not yet fetched from it) ran on the other
    assert done.get(f"{socket.gethostname()}:{victim.pid}", {"partitions": 0})["partitions"] <= 1
    _assert_same_store(cfg, ref_cfg, ref_annotations)


def test_split_spreads_a_batch_and_join_restores_it():
    assert split(0, 2) == []
    assert split(10, 2) == [(0, 10)]  # too few texts to be worth a second task
    assert split(2048, 2) == [(0, 512), (512, 1024), (1024, 1536), (1536, 2048)]
    assert split(100, 8) == [(0, 17), (17, 34), (34, 51), (51, 68), (68, 85), (85, 100)]
    rng = np.random.default_rng(0)
    ranges = split(40, 1)
    parts = []
    for start, end in ranges:  # two chunks per text
        n = 2 * (end - start)
        parts.append(
            EncodedPartition(
                f"p{start}",
                np.repeat(np.arange(end - start, dtype=np.int32), 2),
                np.tile(np.array([0, 1], np.int32), end - start),
                np.zeros(n, np.int64),
                np.ones(n, np.int64),
                np.full(n, 3, np.int32),
                rng.standard_normal((n, 4)).astype(np.float32),
                {},
                Work("w", end - start, 1, 0.0),
            )
        )
    rows = join(parts, [s for s, _ in ranges], 4)
    assert rows.doc_ids == [i for i in range(40) for _ in range(2)]
    assert rows.ordinals == [0, 1] * 40
    assert np.array_equal(rows.vectors, np.concatenate([p.vectors for p in parts]))
    assert join([], [], 4).vectors.shape == (0, 4)


def test_annotate_partitions_give_every_worker_several():
    assert partition_rows(800, 2) == 100
    assert partition_rows(10, 2) == 64  # never tiny tasks
    assert partition_rows(10_000_000, 8) == 4096  # nor huge ones
