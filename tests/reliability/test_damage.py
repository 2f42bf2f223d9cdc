"""Damaged stores and indexes give one clear error (exit code 1) that names the file at fault and
the command that fixes it, from the commands users run (`search`, `index`), never a traceback
or a silent wrong answer: a truncated or deleted FAISS file, vectors and ids out of step, a store
written by a newer schema, an index or a store built with another model, a damaged snapshot.
"""

from __future__ import annotations

import json

import duckdb
import faiss
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from damage_kit import search_results
from testkit import build_tiny_bert, tiny_model_config

from indexer.errors import ProvenanceMismatch, StoreError, VectorIndexError
from indexer.index.version_files import PROVENANCE_FILE, version_files
from indexer.indexing.run import run_index
from indexer.records.versions import MANIFEST_FILE
from indexer.store import Store
from indexer.store.schema import SCHEMA_VERSION
from indexer.store.snapshot import segments_dir
from search.cli.main import main

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]

REPAIR = "bertindex doctor --repair"


def cli_search(indexed, mode="dense", config_file=None):
    result = CliRunner().invoke(
        main,
        [
            "search",
            "the cat sat",
            "--mode",
            mode,
            "--config",
            str(config_file or indexed.config_file),
        ],
    )
    return result.exit_code, result.stderr


def assert_one_line_error(code, stderr, *parts):
    assert code == 1, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr  # no traceback
    for part in parts:
        assert str(part) in lines[0], (part, lines[0])


def rewrite_index(folder, keep=None, swap_id=None, record_ntotal=False):
    """Replace the FAISS file with one holding only the first `keep` vectors, or with one id
    swapped for an id the store lacks, recording its size in provenance.json as a writer
    would (a size that differs reads as a truncated file); optionally its count too."""
    path = version_files(folder.parents[1], folder.name)["base"]
    index = faiss.read_index(str(path))
    ids = faiss.vector_to_array(index.id_map).copy()
    vectors = faiss.downcast_index(index.index).reconstruct_n(0, index.ntotal)  # by position
    if keep is not None:
        ids, vectors = ids[:keep], vectors[:keep]
    if swap_id is not None:
        ids[ids == swap_id] = 10**9
    out = faiss.index_factory(index.d, "IDMap2,Flat", faiss.METRIC_INNER_PRODUCT)
    out.add_with_ids(vectors, ids)
    faiss.write_index(out, str(path))
    info = json.loads((folder / PROVENANCE_FILE).read_text())
    info["base"]["bytes"] = path.stat().st_size
    if record_ntotal:
        info["ntotal"] = len(ids)
    (folder / PROVENANCE_FILE).write_text(json.dumps(info))


@pytest.mark.parametrize("cut", [0.0, 0.5, 0.999])
def test_truncated_faiss_file(indexed, cut):
    path = indexed.base_file()
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * cut)])
    code, stderr = cli_search(indexed)
    assert_one_line_error(code, stderr, path, "damaged or truncated", REPAIR)


def test_deleted_faiss_file(indexed):
    path = indexed.base_file()
    path.unlink()
    for mode in ("dense", "hybrid", "keyword"):  # every mode loads the index first
        code, stderr = cli_search(indexed, mode)
        assert_one_line_error(
            code, stderr, indexed.version_dir(), f"its base {path} missing", REPAIR
        )


def test_next_index_run_also_heals_a_damaged_index(indexed):
    """`bertindex index` rebuilds a damaged index from the stored vectors (nothing encoded)."""
    before = search_results(indexed.config)
    indexed.base_file().write_bytes(b"\x00" * 100)
    summary = run_index([str(indexed.corpus)], indexed.config, batch_size=16)
    assert summary["encoded"] == 0 and summary["index"]["rebuilt"] is True
    assert search_results(indexed.config) == before


def test_fewer_vectors_than_provenance_records(indexed):
    folder = indexed.version_dir()
    rewrite_index(folder, keep=10)
    code, stderr = cli_search(indexed)
    assert_one_line_error(
        code, stderr, indexed.base_file(), "holds 10 vectors", PROVENANCE_FILE, REPAIR
    )


def test_vector_count_differs_from_the_store(indexed):
    folder = indexed.version_dir()
    rewrite_index(folder, keep=10, record_ntotal=True)  # consistent with itself, not the store
    with Store(indexed.store, read_only=True) as store:
        chunks = store.counts.chunks()
    code, stderr = cli_search(indexed)
    assert_one_line_error(
        code,
        stderr,
        folder,
        "holds 10 vectors",
        f"has {chunks} chunks",
        folder / MANIFEST_FILE,
        REPAIR,
    )


def test_an_id_the_store_lacks(indexed):
    """Same count, one id swapped: a search that reaches it names the id and the fix."""
    with Store(indexed.store, read_only=True, snapshot=False) as store:  # embeddings: live only
        ids, vectors = next(iter(store.vectors.iter_batches()))
    rewrite_index(indexed.version_dir(), swap_id=int(ids[0]))
    from indexer.query.searcher import Searcher
    from indexer.store import Store as S

    with S(indexed.store, read_only=True) as store:
        searcher = Searcher(indexed.config, store)
        with pytest.raises(VectorIndexError) as err:
            searcher.search_vectors(vectors[:1], k=3)
    message = str(err.value)
    assert "[1000000000]" in message and "not in the store" in message and REPAIR in message
    assert str(indexed.version_dir() / MANIFEST_FILE) in message


def test_store_of_a_newer_schema(indexed):
    """Written by a newer bertindex: search, index and doctor refuse, naming the file; nothing
    is changed."""
    live = indexed.store / "store.duckdb"
    snapshot = indexed.version_dir() / MANIFEST_FILE
    newer = str(SCHEMA_VERSION + 1)
    with duckdb.connect(str(live)) as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [newer])
        for seg in segment_files(indexed, "meta"):  # the published rows, rewritten in place
            tmp = seg.with_name("newer.parquet")
            con.execute(
                f"COPY (SELECT * REPLACE (CASE WHEN key = 'schema_version' THEN '{newer}' "
                f"ELSE value END AS value) FROM read_parquet('{seg}')) TO '{tmp}'"
            )
            tmp.replace(seg)
    manifest = json.loads(snapshot.read_text())  # and the meta the manifest records
    manifest["facts"]["meta"]["schema_version"] = newer
    for copy in (snapshot, segments_dir(indexed.store) / f"{manifest['id']}.json"):
        copy.write_text(json.dumps(manifest, indent=1))
    code, stderr = cli_search(indexed)
    assert_one_line_error(code, stderr, snapshot, "newer bertindex", f"schema {newer}", "upgrade")
    with pytest.raises(StoreError) as err:
        run_index([str(indexed.corpus)], indexed.config)
    assert str(live) in str(err.value) and "nothing was changed" in str(err.value)
    with duckdb.connect(str(live), read_only=True) as con:
        assert (
            con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
            == newer
        )
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1  # no new run


def test_index_built_with_another_model(indexed):
    """The published index's provenance disagrees with the store's vectors."""
    folder = indexed.version_dir()
    info = json.loads((folder / PROVENANCE_FILE).read_text())
    info["provenance"]["weights_hash"] = "0123456789abcdef"
    (folder / PROVENANCE_FILE).write_text(json.dumps(info))
    code, stderr = cli_search(indexed)
    assert_one_line_error(code, stderr, folder, "index != store", "weights_hash", REPAIR)


def test_store_built_with_another_model(indexed, tmp_path):
    """The configured model is not the one the store's vectors came from: search and index
    refuse, naming the store, the differing keys and the ways out; nothing is written."""
    other = build_tiny_bert(tmp_path / "other-model", layers=2)  # other weights, same dim
    other_cfg = tiny_model_config(other, indexed.store)
    config_file = tmp_path / "other.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "model": {"name": str(other), "dtype": "fp32", "device": "cpu", "max_length": 16},
                "long_documents": {"stride": 4},
                "store": {"path": str(indexed.store)},
            }
        )
    )
    code, stderr = cli_search(indexed, config_file=config_file)
    assert_one_line_error(code, stderr, indexed.store, "weights_hash", "bertindex reindex")
    before = search_results(indexed.config)
    with pytest.raises(ProvenanceMismatch) as err:
        run_index([str(indexed.corpus)], other_cfg)
    assert "model_name" in str(err.value) and "bertindex reindex" in str(err.value)
    assert search_results(indexed.config) == before


def segment_files(indexed, table):
    """The segment files holding `table`'s rows in the current version's snapshot."""
    manifest = json.loads((indexed.version_dir() / MANIFEST_FILE).read_text())
    segments = manifest["tables"][table]["segments"]
    return [segments_dir(indexed.store) / s["rows"] for s in segments if s["rows"]]


def test_damaged_snapshot(indexed):
    segment = segment_files(indexed, "documents")[0]
    segment.write_bytes(segment.read_bytes()[:500])
    code, stderr = cli_search(indexed)
    assert_one_line_error(
        code,
        stderr,
        indexed.version_dir() / MANIFEST_FILE,
        segment.name,
        "cannot open the published snapshot",
        REPAIR,
    )


def test_unchanged_files_after_errors(indexed):
    """The errors above come from reads: a refused search leaves the index files as they
    were (the fix is the user's call)."""
    folder = indexed.version_dir()
    rewrite_index(folder, keep=10, record_ntotal=True)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    cli_search(indexed)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    with Store(indexed.store, read_only=True, snapshot=False) as store:
        assert np.array_equal(store.vectors.chunk_ids(), np.sort(store.vectors.chunk_ids()))
