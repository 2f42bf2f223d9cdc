"""benchmarks/scale.py's own parts on small inputs: the generated corpus is seeded, streamed in
chunks, and its `changed` copy rewrites exactly every 100th text (so the 1 % re-run changes
what it says); the held-out queries are not in the corpus; disk is grouped by path pattern;
the cost curve is relative to the smallest size."""

from __future__ import annotations

import json
import sys

import pytest
from testkit import ROOT, require_shared

sys.path.insert(0, str(ROOT / "benchmarks"))
import scale  # noqa: E402


def test_corpus_is_seeded_and_one_percent_changes(tmp_path, monkeypatch):
    require_shared("tweeteval")
    monkeypatch.setattr(scale, "CHUNK", 700)  # several chunks
    bases, queries = scale.tweets()
    assert len(queries) == scale.HELD_OUT and not set(queries) & set(bases)
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    scale.write_corpus(a, 2000, bases)
    scale.write_corpus(b, 2000, bases)
    scale.write_corpus(c, 2000, bases, changed=True)
    assert a.read_bytes() == b.read_bytes()
    old = [json.loads(line) for line in a.read_text().splitlines()]
    new = [json.loads(line) for line in c.read_text().splitlines()]
    assert [d["id"] for d in old] == [f"d{i}" for i in range(2000)]
    assert len({d["text"] for d in old}) == 2000  # the document number makes texts unique
    differ = [i for i, (x, y) in enumerate(zip(old, new)) if x != y]
    assert differ == list(range(0, 2000, 100))
    assert not {d["text"] for d in old} & set(queries)


def test_disk_grouped_by_pattern_and_curve(tmp_path):
    for rel, size in [
        ("store.duckdb", 10),
        ("index/v1/index.faiss", 5),
        ("index/v2/index.faiss", 7),
        ("encoders/0123abcd9f-mean/model.onnx", 3),
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x" * size)
    assert scale.disk_by_part(tmp_path) == {
        "index/vN/*.faiss": 12,
        "store.duckdb": 10,
        "encoders/H-mean/*.onnx": 3,
    }
    rows = scale.curve(
        [
            {"n": 1000, "minimum": {"wall_s": 2.0}, "index": {"wall_s": 4.0}},
            {"n": 4000, "minimum": {"wall_s": 4.0}, "index": {"error": "boom"}},
        ]
    )
    assert rows[1]["minimum_us_per_doc"] == 1000.0 and rows[1]["minimum_vs_smallest"] == 0.5
    assert rows[1]["index_us_per_doc"] is None and rows[0]["index_vs_smallest"] == 1.0


def test_refuses_a_run_that_would_fill_the_disk_or_memory(tmp_path):
    scale.require(tmp_path, disk=1e6, memory=1e6)
    with pytest.raises(RuntimeError, match="GB of disk"):
        scale.require(tmp_path, disk=1e18)
    with pytest.raises(RuntimeError, match="GB of memory"):
        scale.require(tmp_path, disk=0, memory=1e18)
