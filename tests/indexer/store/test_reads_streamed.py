"""Reads of every document's id or hash stream out of DuckDB: the writer's connection has a
128 MB memory limit, and at 10M documents a materialised result of ids and hashes did not fit
(`Out of Memory Error` in the fusion tuning of a first index run). Here a memory limit far
below the result's size stands in for that."""

from types import SimpleNamespace

import duckdb
import numpy as np
import pytest

from indexer.store.reads import SELECT_HASHES, DocumentReads

ROWS = 400_000  # ids and 64-character hashes: ~30 MB as a result


@pytest.fixture
def tight(tmp_path):
    # a file like the store's, whose sorts spill to a temporary folder beside it
    config = {"memory_limit": "8MB", "threads": 1, "temp_directory": str(tmp_path / "spill")}
    con = duckdb.connect(str(tmp_path / "store.duckdb"), config=config)
    con.execute(
        "CREATE TABLE documents AS SELECT (i * 7919) % 400009 AS doc_id, "
        "sha256(i::VARCHAR) AS content_hash FROM range(?) t(i)",
        [ROWS],
    )
    yield con
    con.close()


def test_a_materialised_result_does_not_fit(tight):
    with pytest.raises(duckdb.OutOfMemoryException):
        tight.execute(SELECT_HASHES).fetch_arrow_table()


def test_ids_and_hashes_stream_in_ascending_order(tight):
    reads = DocumentReads(SimpleNamespace(con=tight))
    ids = reads.document_ids()
    want = np.sort((np.arange(ROWS) * 7919) % 400009)
    np.testing.assert_array_equal(ids, want)
    hashes = reads.document_hashes()
    assert len(hashes) == ROWS and sorted(hashes) == want.tolist()
    assert all(len(h) == 64 for h in hashes.values())
