"""`run_index(vectors=FILE)`: precomputed vectors stored for the documents they name instead of
encoding them (Parquet and .npz), found by a search with the same vector; a file of another
dimension or model refused before anything is written; rows the corpus does not hold, or that
cannot be used, rejected by file, row and id while the rest is imported; a second run with the
same files stores nothing again."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from testkit import write_vectors

from indexer.encode.encoder import load_encoder
from indexer.errors import InputError
from indexer.indexing.imported import unit_rows
from indexer.indexing.run import run_index
from indexer.query.searcher import Searcher
from indexer.records.versions import current_version
from indexer.store import Store

IMPORTED = ["a1", "a2", "b1", "b2"]  # small_corpus's c1 has no vector: it is encoded


def _vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
def encoder(tiny_config):
    return load_encoder(tiny_config.model)


@pytest.mark.parametrize("name", ["v.parquet", "v.npz", "list.parquet"])
def test_imported_vectors_are_stored_and_found_by_themselves(
    tiny_config, small_corpus, encoder, tmp_path, name
):
    vectors = _vectors(len(IMPORTED), encoder.provenance.dim)
    path = write_vectors(
        tmp_path / name, IMPORTED, vectors, encoder.provenance.model_name, fixed=name == "v.parquet"
    )
    summary = run_index([str(small_corpus)], tiny_config, collection="c", vectors=path)
    assert summary["vectors"] == {
        "file": str(path),
        "model": encoder.provenance.model_name,
        "imported": 4,
        "not_imported": 0,
    }
    assert summary["rejected"] == 0 and summary["encoded"] == 5
    with Store(tiny_config.store.path, read_only=True) as store:
        searcher = Searcher(tiny_config, store)
        for hits, want in zip(searcher.search_vectors(vectors, k=1, collection="c"), IMPORTED):
            assert hits[0].id == want and hits[0].score == pytest.approx(1.0, abs=1e-5)
            assert (hits[0].chunk_start, hits[0].chunk_end) == (
                0,
                len(hits[0].text),
            )  # one whole chunk
        # c1 was encoded (several windows of 16 tokens): its query finds it
        text = store.reads.fetch_documents([5])[5].text
        assert searcher.search(text, 1, mode="dense")[0].id == "c1"
        assert store.counts.chunks() > 5


def test_a_vector_file_of_another_dimension_or_model_is_refused(
    tiny_config, small_corpus, encoder, tmp_path
):
    dim, model = encoder.provenance.dim, encoder.provenance.model_name
    wide = write_vectors(tmp_path / "wide.parquet", IMPORTED, _vectors(4, dim + 1), model)
    with pytest.raises(InputError, match=rf"wide.parquet: vectors of {dim + 1} floats, .* {dim}"):
        run_index([str(small_corpus)], tiny_config, vectors=wide)
    other = write_vectors(tmp_path / "other.npz", IMPORTED, _vectors(4, dim), "another-model")
    with pytest.raises(InputError, match=r"other.npz: vectors of model 'another-model'.*set model"):
        run_index([str(small_corpus)], tiny_config, vectors=other)
    bare = tmp_path / "bare.parquet"
    pq.write_table(pa.table({"id": IMPORTED, "vector": list(_vectors(4, dim))}), bare)
    with pytest.raises(InputError, match="bare.parquet: declares no model"):
        run_index([str(small_corpus)], tiny_config, vectors=bare)
    assert not (Path(tiny_config.store.path) / "store.duckdb").exists()  # nothing written


@pytest.mark.parametrize("fixed", [True, False])
def test_unknown_ids_and_bad_rows_are_rejected_the_rest_imported(
    fixed, tiny_config, small_corpus, encoder, tmp_path
):
    dim = encoder.provenance.dim
    vectors = _vectors(6, dim)
    vectors[2, 0] = np.nan  # b1: not usable, so b1 is encoded
    ids = ["a1", "a2", "b1", "zz", "b2", "a1"]  # zz: not in the corpus; a1 twice
    model = encoder.provenance.model_name
    path = write_vectors(tmp_path / "v.parquet", ids, vectors, model, fixed)
    summary = run_index([str(small_corpus)], tiny_config, collection="c", vectors=path)
    rejections = {(r["row"], r["id"]): r["reason"] for r in summary["rejections"]}
    assert set(rejections) == {(3, "b1"), (4, "zz"), (6, "a1")}
    assert all(r["source"] == str(path) for r in summary["rejections"])
    assert "NaN" in rejections[(3, "b1")]
    assert "not in the corpus" in rejections[(4, "zz")]
    assert "row 1 with it is imported" in rejections[(6, "a1")]
    assert summary["vectors"]["imported"] == 3 and summary["vectors"]["not_imported"] == 3
    with Store(tiny_config.store.path, read_only=True) as store:
        assert sorted(store.documents.existing("c", ["a1", "a2", "b1", "b2", "c1", "zz"])) == [
            "a1",
            "a2",
            "b1",
            "b2",
            "c1",
        ]
        hits = Searcher(tiny_config, store).search_vectors(vectors[[0, 4]], k=1)
        assert [h[0].id for h in hits] == ["a1", "b2"]


def test_a_list_column_of_another_width_is_refused_before_any_batch_commits(
    tiny_config, small_corpus, encoder, tmp_path
):
    # a list column's widths are known only once it is read (on a thread, while the corpus's
    # first batches are): the run stops at the first batch, with nothing of the corpus stored
    dim, model = encoder.provenance.dim, encoder.provenance.model_name
    wide = write_vectors(tmp_path / "wide.parquet", IMPORTED, _vectors(4, dim + 1), model, False)
    with pytest.raises(InputError, match=rf"wide.parquet: vectors of {dim + 1} floats, .* {dim}"):
        run_index([str(small_corpus)], tiny_config, collection="c", vectors=wide)
    with Store(tiny_config.store.path, read_only=True) as store:
        assert store.counts.documents() == 0 and store.counts.chunks() == 0
        assert store.runs.last(1)[0]["status"] == "failed"


def test_unit_rows_copies_only_what_is_not_unit_length():
    unit = _vectors(10, 8)
    assert unit_rows(unit) is unit  # a normalizing encoder's file: not copied
    scaled = unit * np.arange(1, 11, dtype=np.float32)[:, None]
    scaled[3] = 0
    out = unit_rows(scaled)
    assert out is not scaled and np.allclose(np.delete(out, 3, 0), np.delete(unit, 3, 0))
    assert not out[3].any()


def test_importing_again_stores_nothing_twice(tiny_config, small_corpus, encoder, tmp_path):
    vectors = _vectors(len(IMPORTED), encoder.provenance.dim)
    path = write_vectors(tmp_path / "v.npz", IMPORTED, vectors, encoder.provenance.model_name)
    first = run_index([str(small_corpus)], tiny_config, collection="c", vectors=path)
    with Store(tiny_config.store.path, read_only=True) as store:
        chunks, version = store.counts.chunks(), current_version(store.path)
    again = run_index([str(small_corpus)], tiny_config, collection="c", vectors=path)
    assert first["index"]["version"] is not None and again["index"]["version"] is None
    assert again["skipped_unchanged"] == 5 and again["encoded"] == 0
    assert again["vectors"]["imported"] == 0 and again["vectors"]["not_imported"] == 0
    with Store(tiny_config.store.path, read_only=True) as store:
        assert store.counts.chunks() == chunks and current_version(store.path) == version
        assert store.vectors.count() == chunks
