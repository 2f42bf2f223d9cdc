"""Coalescer: concurrent encode calls merged into shared forward plans give each caller its own
rows, in order, equal to encoding alone; a failed plan fails every call in it, and only those."""

import threading

import numpy as np
import pytest

from indexer.config import ModelConfig
from indexer.encode.coalesce import Coalescer
from indexer.encode.encoder import Encoder

TEXTS = [
    "the cat sat on the mat",
    "dog",
    "parse command line arguments with python and write data to a file",
    "red apple",
    "the big river runs past the small city and the green mountain",
    "coffee",
]


def run_together(coalescer: Coalescer, calls: list[list]) -> list:
    """Every call on its own thread, released at once; each one's result or exception."""
    start = threading.Barrier(len(calls))
    out: list = [None] * len(calls)

    def one(i: int) -> None:
        start.wait()
        try:
            out[i] = coalescer.encode_ids(calls[i])
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return out


def test_concurrent_calls_share_plans_and_get_their_own_rows(tiny_model_dir):
    encoder = Encoder(
        ModelConfig(name=str(tiny_model_dir), dtype="fp32", device="cpu", max_length=32)
    )
    seqs = [encoder.wrap(ids) for ids in encoder.tokenize(TEXTS)]
    plans: list[int] = []
    running, gate = threading.Event(), threading.Event()

    def encode_ids(merged):
        running.set()
        gate.wait(10)  # the first plan runs until the other calls are queued behind it
        plans.append(len(merged))
        return encoder.encode_ids(merged)

    coalescer = Coalescer(encode_ids, max_sequences=4)
    first = seqs[::-1]  # 6 sequences, over max_sequences: runs alone
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(rows=coalescer.encode_ids(first)))
    thread.start()
    assert running.wait(10)
    calls = [seqs[i : i + 2] for i in range(0, len(seqs), 2)]  # 2, 2, 2 sequences
    threading.Timer(0.5, gate.set).start()
    results = run_together(coalescer, calls)
    thread.join(60)
    for call, rows in zip([first, *calls], [result["rows"], *results]):
        np.testing.assert_allclose(rows, encoder.encode_ids(call), atol=1e-5)
    assert plans == [6, 4, 2]  # the queued calls merged, oldest first, up to max_sequences


def test_a_failed_plan_fails_its_calls_and_the_next_plan_runs():
    def encode_ids(merged):
        if any(s == [0] for s in merged):
            raise ValueError("bad sequence")
        return np.asarray([[float(len(s))] for s in merged], np.float32)

    coalescer = Coalescer(encode_ids, max_sequences=1)  # one call a plan
    results = run_together(coalescer, [[[0]], [[1, 2]], [[1, 2, 3]]])
    assert isinstance(results[0], ValueError)
    assert results[1].tolist() == [[2.0]] and results[2].tolist() == [[3.0]]
    with pytest.raises(ValueError, match="bad sequence"):
        coalescer.encode_ids([[0]])
    assert coalescer.encode_ids([[5, 5]]).tolist() == [[2.0]]


def test_plans_run_side_by_side_up_to_the_limit():
    """With `plans` 2, two plans encode at once (a server process that holds every keep-alive
    connection still uses two cores); a third call waits for a slot."""
    inside, gate = threading.Semaphore(0), threading.Event()
    most, now, lock = [0], [0], threading.Lock()

    def encode_ids(merged):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        inside.release()
        gate.wait(10)
        with lock:
            now[0] -= 1
        return np.zeros((len(merged), 1), np.float32)

    coalescer = Coalescer(encode_ids, max_sequences=1, plans=2)
    threads = [threading.Thread(target=coalescer.encode_ids, args=([[i]],)) for i in range(3)]
    for thread in threads:
        thread.start()
    assert inside.acquire(timeout=10) and inside.acquire(timeout=10)
    assert not inside.acquire(timeout=0.3)  # the third waits for a slot
    gate.set()
    for thread in threads:
        thread.join(10)
    assert most[0] == 2
