"""Vector files (`read_vector_file`): rows of the wrong length, null, not finite or with a
repeated id are named by row and id while the rest is read; files that cannot be used at all
are refused with the file named and the fix."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from indexer.errors import InputError
from indexer.ingest.vector_files import read_vector_file


def test_unusable_rows_are_named_the_rest_read(tmp_path):
    rows = [[1.0, 0.0, 0.0], None, [1.0, 2.0], [0.0, 3.0, 4.0], [np.inf, 0.0, 0.0], [5, 5, 5]]
    table = pa.table(
        {"id": [7, 8, 9, 10, 11, 7], "vector": pa.array(rows, pa.list_(pa.float64()))}
    ).replace_schema_metadata({"model": "m"})
    pq.write_table(table, tmp_path / "v.parquet")
    got = read_vector_file(tmp_path / "v.parquet", 3)
    assert got.model == "m" and got.ids == ["7", "10"] and got.rows.tolist() == [1, 4]
    assert got.vectors.dtype == np.float32 and got.vectors.tolist() == [[1, 0, 0], [0, 3, 4]]
    why = {(r.row, r.external_id): r.reason for r in got.rejected}
    assert set(why) == {(2, "8"), (3, "9"), (5, "11"), (6, "7")}
    assert why[(2, "8")].startswith("vector of 0 floats, the store holds 3")
    assert why[(3, "9")].startswith("vector of 2 floats")
    assert "NaN or infinity" in why[(5, "11")] and "row 1 with it" in why[(6, "7")]
    assert all(r.source == str(tmp_path / "v.parquet") for r in got.rejected)


def test_files_that_cannot_be_used_are_refused_by_name(tmp_path):
    np.save(tmp_path / "v.npy", np.zeros((2, 3)))
    with pytest.raises(InputError, match=r"v.npy: a vector file must end in .parquet or .npz"):
        read_vector_file(tmp_path / "v.npy", 3)
    np.savez(
        tmp_path / "o.npz", ids=np.array(["a", None], object), vectors=np.zeros((2, 3)), model="m"
    )
    with pytest.raises(InputError, match=r"o.npz: cannot read the vector file: Object arrays"):
        read_vector_file(tmp_path / "o.npz", 3)
    np.savez(tmp_path / "m.npz", ids=np.array(["a"]), vectors=np.zeros((1, 3)))
    with pytest.raises(InputError, match=r"m.npz: no array model .*numpy.savez"):
        read_vector_file(tmp_path / "m.npz", 3)
    (tmp_path / "x.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match=r"x.npz: cannot read"):
        read_vector_file(tmp_path / "x.npz", 3)
    with pytest.raises(InputError, match=r"gone.parquet: cannot read"):
        read_vector_file(tmp_path / "gone.parquet", 3)
