"""A base's span map (`indexer.index.span_file`): written with the base, mapped by searchers
instead of reading every chunk, joined with the chunks added since, removed with its base; a
store without one (or with a damaged one) is read as before, with the same results."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from indexer.index.span_file import SpanMap, populate_table, read_spans, spans_path, write_spans
from indexer.index.version_files import bases_dir, remove_old_versions
from indexer.indexing.run import run_index
from indexer.indexing.steps import sync_vector_index
from indexer.query.searcher import Searcher
from indexer.records.versions import current_version
from indexer.store import Store
from indexer.store.vectors import Vectors

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_lookup_joins_the_parts_and_says_what_it_did_not_find(tmp_path):
    base = (np.array([2, 5, 9]), np.array([20, 50, 90]), np.array([0, 1, 2]), np.array([3, 4, 5]))
    path = tmp_path / "v1.spans.npy"
    write_spans(path, base)
    table = read_spans(path)
    assert isinstance(table, np.memmap) and table.shape == (4, 3)
    newer = (np.array([11, 12]), np.array([110, 120]), np.array([7, 8]), np.array([9, 10]))
    spans = SpanMap([(table[0], table[1], table[2], table[3]), newer])
    docs, starts, ends, found = spans.lookup(np.array([12, 5, 3, 2, 40]))
    assert docs.tolist() == [120, 50, 0, 20, 0] and found.tolist() == [1, 1, 0, 1, 0]
    assert starts.tolist() == [8, 1, 0, 0, 0] and ends.tolist() == [10, 4, 0, 3, 0]
    assert populate_table(table) and not populate_table(np.asarray(table))  # a server's
    assert spans.lookup(np.array([9]))[0].tolist() == [90]
    (tmp_path / "bad.spans.npy").write_bytes(b"not numpy")
    assert read_spans(tmp_path / "bad.spans.npy") is None
    np.save(tmp_path / "wide.spans.npy", np.zeros((3, 2), np.int64))
    assert read_spans(tmp_path / "wide.spans.npy") is None
    assert read_spans(tmp_path / "none.spans.npy") is None


def base_of(config) -> str:
    version = current_version(config.store.path)
    info = json.loads((Path(config.store.path) / "index" / version / "provenance.json").read_text())
    return info["base"]["file"]


def ranked(config, queries) -> list[list[tuple]]:
    with Searcher.open(config) as searcher:
        return [
            [
                (h.id, h.chunk_start, h.chunk_end, round(h.score, 5))
                for h in searcher.search(q, 5, mode="dense")
            ]
            for q in queries
        ]


def ranked_long(config, queries, rounds: int = 3) -> list[list[tuple]]:
    """`ranked` from one searcher asked every query `rounds` times (past MAP_AFTER searches,
    it holds the whole map); the last round's hits."""
    with Searcher.open(config) as searcher:
        for _ in range(rounds):
            out = [
                [
                    (h.id, h.chunk_start, h.chunk_end, round(h.score, 5))
                    for h in searcher.search(q, 5, mode="dense")
                ]
                for q in queries
            ]
        return out


QUERIES = ["the cat sat on the mat", "gzip a file", "a brand new text about trains", "river"]


def test_searches_map_the_base_spans_and_read_only_newer_chunks(
    tiny_config, small_corpus, tmp_path, monkeypatch
):
    words = "harbour lantern meadow copper violin glacier orchard pepper canyon ember".split()
    filler = tmp_path / "filler.jsonl"
    filler.write_text(  # enough documents that one more goes to the delta (< 5 % of the base)
        "".join(
            json.dumps({"id": f"f{i}", "text": f"{words[i % 10]} {words[i * 7 % 10]} note {i}"})
            + "\n"
            for i in range(150)
        )
    )
    corpus = [str(small_corpus), str(filler)]
    run_index(corpus, tiny_config, collection="docs")
    first = spans_path(bases_dir(tiny_config.store.path) / base_of(tiny_config))
    assert read_spans(first) is not None
    extra = tmp_path / "more.jsonl"
    extra.write_text(json.dumps({"id": "n1", "text": "a brand new text about trains"}) + "\n")
    run_index([*corpus, str(extra)], tiny_config, collection="docs")  # a delta: same base
    assert base_of(tiny_config) == first.name.replace(".spans.npy", ".faiss")
    with_file = ranked(tiny_config, QUERIES)
    assert with_file[2][0][0] == "n1"  # a chunk newer than the base's map is found
    assert ranked_long(tiny_config, QUERIES) == with_file  # the held map: base file + newer

    def whole_map(self):
        raise AssertionError("the whole chunk map was read")

    asked = []
    by_id = Vectors.chunk_spans

    def only_newer(self, chunk_ids):  # a one-off search asks the store for these ids only
        asked.extend(int(i) for i in chunk_ids)
        return by_id(self, chunk_ids)

    with monkeypatch.context() as patch:  # the file stands in for every read of the map
        patch.setattr(Vectors, "chunk_span_map", whole_map)
        patch.setattr(Vectors, "chunk_spans", only_newer)
        assert ranked(tiny_config, QUERIES) == with_file
    base_last = int(read_spans(first)[0][-1])
    assert asked and all(i > base_last for i in asked)  # n1's chunk, newer than the base

    good = first.read_bytes()
    first.write_bytes(b"damaged")  # a damaged file: read as a store without one
    assert ranked(tiny_config, QUERIES) == with_file
    first.unlink()
    assert ranked(tiny_config, QUERIES) == with_file
    one_more = tmp_path / "one_more.jsonl"
    one_more.write_text(json.dumps({"id": "n2", "text": "another new text"}) + "\n")
    run_index([*corpus, str(extra), str(one_more)], tiny_config, collection="docs")
    assert base_of(tiny_config) == first.name.replace(".spans.npy", ".faiss")  # a delta
    assert read_spans(first) is not None  # the missing map written again by that publish
    healed = ranked(tiny_config, QUERIES)
    first.write_bytes(good)  # the base's own map: n1 and n2 come from the snapshot
    assert ranked(tiny_config, QUERIES) == healed

    with Store(tiny_config.store.path) as store:  # rebuilt (`reindex`): a new base, its map
        sync_vector_index(store, tiny_config, [], [], force=True)
    config = tiny_config
    second = spans_path(bases_dir(config.store.path) / base_of(config))
    assert second != first and read_spans(second) is not None
    assert first.exists() and first.with_name("v1.faiss").exists()  # v1 is still kept
    remove_old_versions(Path(config.store.path), keep=1)
    assert not first.exists() and not first.with_name("v1.faiss").exists()  # gone together
    assert read_spans(second) is not None
    assert ranked(config, QUERIES[:3])[2][0][0] == "n1"

    def nothing_is_newer(self, last):
        raise AssertionError("chunks after the base read for an index without a delta")

    with monkeypatch.context() as patch:  # no delta: the base's file is the whole map
        patch.setattr(Vectors, "chunk_spans_after", nothing_is_newer)
        assert ranked_long(config, QUERIES[:3])[2][0][0] == "n1"
