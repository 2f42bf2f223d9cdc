"""Files of a published index version: the base (`index/bases/<name>.faiss`, written once by a
rebuild and shared by every version built on it), the version folder's delta, deleted ids and
provenance.json; read with their recorded sizes checked, written atomically, and the bases no
kept version names collected.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import faiss
import numpy as np

from indexer.core.faults import crash_point
from indexer.core.fsio import fsync_dir, fsync_file
from indexer.errors import VectorIndexError
from indexer.index import store_rows
from indexer.index.auto import is_gpu
from indexer.index.block_lists import SUFFIX as LISTS_SUFFIX
from indexer.index.block_lists import has_block_lists, lists_path, move_to_file, open_lists
from indexer.index.delta import TRAINED_SUFFIX, id_map_over, write_template
from indexer.records.provenance import Provenance
from indexer.records.versions import current_version, index_root, list_versions, write_pointer

if TYPE_CHECKING:
    from indexer.index.vector import VectorIndex

log = logging.getLogger(__name__)

INDEX_FILE = "index.faiss"  # a version published before bases: its whole index, in its folder
PROVENANCE_FILE = "provenance.json"
DELETED_FILE = "deleted.npy"  # ids removed from the base (which is never changed)
BASES_DIR = "bases"  # under index/: base files, shared by the versions built on them
DELTA_FILE = "delta.faiss"  # in a version folder: the vectors added since its base
KEEP_VERSIONS = 2


def bases_dir(store_dir: str | Path) -> Path:
    return index_root(store_dir) / BASES_DIR


def plain_id_map(index: faiss.Index) -> faiss.Index:
    """`index` to write as a base: an IDMap2 becomes a plain IDMap over the same index and
    ids. FAISS rebuilds an IDMap2's reverse hash map (~48 bytes a vector: 480 MB and seconds
    at 10M) in every process that reads the file; a base's ids are looked up only by a
    filtered exact search, which `id_positions` serves from the id array itself."""
    if not isinstance(index, faiss.IndexIDMap2):
        return index
    return id_map_over(index.index, faiss.vector_to_array(index.id_map), index)


def id_positions(ids: np.ndarray, order: np.ndarray | None, wanted: np.ndarray) -> np.ndarray:
    """Positions in an IDMap's id array `ids` of the `wanted` ids (which it holds). `order`:
    argsort of `ids`, None when they are ascending (a build adds them in chunk id order)."""
    if order is None:
        return np.searchsorted(ids, wanted)
    return order[np.searchsorted(ids[order], wanted)]


def write_index_file(index: faiss.Index, path: Path) -> int:
    """Write `index` to `path` under a temporary name, fsynced, then renamed: a killed writer
    leaves the old file or none, never half of one. Returns the file's size."""
    tmp = path.with_name(f".{path.name}.tmp")
    faiss.write_index(index, str(tmp))
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return path.stat().st_size


def base_of(folder: Path) -> str | None:
    """The base file name a version folder's provenance.json names (None: an older version
    that holds its whole index itself). Raises OSError/ValueError when it cannot be read."""
    info = json.loads((folder / PROVENANCE_FILE).read_text())
    return (info.get("base") or {}).get("file")


def collect_bases(store_dir: str | Path) -> None:
    """Remove the base files (and temporary ones a killed writer left) that no version folder
    names. A process that mapped one keeps reading it: the name goes, the pages stay until
    unmapped. Kept when a version's provenance.json cannot be read (its base is unknown)."""
    folder = bases_dir(store_dir)
    if not folder.is_dir():
        return
    named = set()
    for number in list_versions(store_dir):
        try:
            named.add(base_of(index_root(store_dir) / f"v{number}"))
        except (OSError, ValueError) as exc:
            log.warning("bases kept: version v%d is unreadable (%s)", number, exc)
            return
    for path in folder.iterdir():
        # a base's trained copy (`<name>.trained.faiss`, the probed deltas' template) and its
        # span map (`<name>.spans.npy`, `indexer.index.span_file`) and fast-scan lists
        # (`<name>.lists`, `indexer.index.block_lists`) go with it
        base = path.name.removesuffix(".trained.faiss").removesuffix(".spans.npy")
        base = base.removesuffix(LISTS_SUFFIX)
        if path.name not in named and (base == path.name or f"{base}.faiss" not in named):
            path.unlink(missing_ok=True)


def named_row_files(store_dir: str | Path) -> set[str] | None:
    """The store's vector files that a kept version's base rescores from (`store_rows`): the
    store's collection keeps them even once none of their chunks exist. None when a version's
    provenance.json cannot be read (keep every file)."""
    named: set[str] = set()
    for number in list_versions(store_dir):
        try:
            info = json.loads((index_root(store_dir) / f"v{number}" / PROVENANCE_FILE).read_text())
        except (OSError, ValueError) as exc:
            log.warning("vector files kept: version v%d is unreadable (%s)", number, exc)
            return None
        named.update(r["name"] for r in (info.get("base") or {}).get("rows") or [])
    return named


def remove_old_versions(store_dir: Path, keep: int = KEEP_VERSIONS) -> None:
    """Remove versions older than the newest `keep` (the current one is never removed), then
    the bases no remaining version names (`collect_bases`).

    A reader that opened an old version's files keeps reading them: removal unlinks names,
    open (and mapped) files stay readable until closed.
    """
    live = current_version(store_dir)
    versions = list_versions(store_dir)
    for old in versions[: max(0, len(versions) - keep)]:
        if f"v{old}" != live:
            shutil.rmtree(Path(store_dir) / "index" / f"v{old}", ignore_errors=True)
    collect_bases(store_dir)


def version_files(store_dir: Path, version: str) -> dict[str, Path]:
    """The files an index version reads: its "base" (shared with the versions built on it),
    and the "delta" and "deleted" ids its provenance.json records, if any.

    Raises:
        OSError, ValueError: provenance.json is missing or unreadable.
    """
    folder = Path(store_dir) / "index" / version
    info = json.loads((folder / PROVENANCE_FILE).read_text())
    base = (info.get("base") or {}).get("file")
    out = {"base": bases_dir(store_dir) / base if base else folder / INDEX_FILE}
    if (info.get("delta") or {}).get("ntotal"):
        out["delta"] = folder / DELTA_FILE
    if info.get("deleted"):
        out["deleted"] = folder / DELETED_FILE
    return out


def read_info(folder: Path, fix: str) -> tuple[dict, Provenance]:
    """A version's provenance.json and the provenance it records."""
    info_file = folder / PROVENANCE_FILE
    if not folder.is_dir() or not info_file.is_file():
        what = "folder" if not folder.is_dir() else PROVENANCE_FILE
        raise VectorIndexError(f"index {folder}: {what} missing; {fix}")
    try:
        info = json.loads(info_file.read_text())
        return info, Provenance(**info["provenance"])
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise VectorIndexError(f"cannot read {info_file} ({exc!r}); {fix}") from None


def read_faiss(
    path: Path,
    written: int | None,
    mapped: bool,
    fix: str,
    folder: Path,
    lists_written: int | None = None,
):
    """Read (or map) a FAISS file of `folder`'s version, checked against its recorded size;
    a base with its lists in a file beside it (`lists_written` bytes: `block_lists`) maps
    them, mapped or not."""
    if not path.is_file():
        what = path.name if path.parent == folder else f"its base {path}"
        raise VectorIndexError(f"index {folder}: {what} missing; {fix}")
    try:
        check_size(path, written)
        flags = faiss.IO_FLAG_MMAP_IFC if mapped else 0
        if lists_written is not None:
            flags |= faiss.IO_FLAG_SKIP_IVF_DATA
        # a mapped base (never written again) keeps its ids in the file: `read_shared_ids`
        shared = mapped and path.parent.name == BASES_DIR
        index = (shared and read_shared_ids(path, flags)) or faiss.read_index(str(path), flags)
        if lists_written is not None:
            open_lists(index, path, lists_written)
        return index
    except RuntimeError as exc:
        reason = str(exc).strip().rpartition("Error: ")[2][:120] or "unreadable"
        raise VectorIndexError(
            f"cannot read {path}: the file is damaged or truncated ({reason}); {fix}"
        ) from None


IDMAP_FOURCC = b"IxMp"  # FAISS's tag of a plain IndexIDMap, as bases are written
_FILLING = threading.Lock()


def read_shared_ids(path: Path, flags: int) -> faiss.Index | None:
    """A base written as a plain IDMap (`plain_id_map`) read with its ids left in the file.

    FAISS reads an IDMap's ids into a vector of its own: at 10M, 80 MB and ~50 ms in every
    process that opens the base, for a search that looks up a few hundred of them. Here the
    index under the IDMap is read from a mapping of the file (FAISS's `ZeroCopyIOReader`:
    its codes and centroids stay the file's pages, as `IO_FLAG_MMAP_IFC` leaves them; the
    mapping is copy-on-write, so nothing FAISS writes reaches the file), and the ids are a
    view of the file's last pages (`shared_ids`, `rescore.ids_by_position`). The IDMap's own
    vector stays empty until a search that FAISS translates needs it (`full_id_map`).

    Returns None for another kind of file (FAISS reads it).
    Raises:
        RuntimeError: the ids are not where and how many the header says (read as damage).
    """
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size < 64:  # no IDMap of anything (FAISS says what it is)
            return None
        mapping = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    data = np.frombuffer(mapping, np.uint8)
    if bytes(data[:4]) != IDMAP_FOURCC:
        return None
    # the header (faiss/impl/index_write.cpp): d int32, ntotal int64, two int64 fields,
    # is_trained bool, metric int32, and a float metric argument for metrics after L2 and IP
    dim, ntotal, metric = (int(data[a:b].view(t)[0]) for a, b, t in HEADER_FIELDS)
    start = 37 + (4 if metric > 1 else 0)
    reader = faiss.ZeroCopyIOReader(  # type: ignore[attr-defined]  # (SWIG: no stub)
        faiss.swig_ptr(data[start:]), data.size - start
    )
    inner = faiss.read_index(reader, flags)
    at = start + int(reader.rp_)  # then the ids: their count (uint64), then the int64 ids
    count = int(data[at : at + 8].view(np.uint64)[0]) if at + 8 <= data.size else -1
    if count != ntotal or at + 8 + 8 * count != data.size:
        raise RuntimeError(f"Error: {count} ids where {ntotal} were written")
    out = SharedIdMap(faiss.IndexFlat(dim, metric))  # FAISS wraps only an empty index
    out.own_fields = False
    out.index, out.ntotal, out.is_trained = inner, ntotal, inner.is_trained
    out.referenced_objects = [inner, reader, mapping]  # type: ignore[attr-defined]  # (FAISS's)
    out.shared_ids = data[at + 8 :].view(np.int64)
    return out


HEADER_FIELDS = ((4, 8, np.int32), (8, 16, np.int64), (33, 37, np.int32))


class SharedIdMap(faiss.IndexIDMap):
    """An IDMap whose ids stay in its file (`read_shared_ids`); FAISS's Python classes take
    only the attributes their class declares. A search through FAISS, which translates
    positions to ids itself, fills the IDMap first (`full_id_map`)."""

    shared_ids: np.ndarray | None = None
    filled = False  # whether `full_id_map` copied them into the IDMap

    def search(self, x, k, **kwargs):
        full_id_map(self)
        return super().search(x, k, **kwargs)


def full_id_map(index: faiss.Index):
    """`index`'s IDMap id vector, filled from the file first where `read_shared_ids` left the
    ids there (once, for what FAISS translates itself: its searches, a filter's selector);
    None when `index` is no IDMap."""
    if isinstance(index, SharedIdMap) and index.shared_ids is not None and not index.filled:
        with _FILLING:
            if not index.filled:
                faiss.copy_array_to_vector(np.array(index.shared_ids), index.id_map)
                index.filled = True
    return getattr(index, "id_map", None)


def check_size(path: Path, written: int | None) -> None:
    """Raise RuntimeError (read as damage) when `path` is not the size it was written at
    (provenance.json records each file's `bytes`): FAISS's mapped read misses a cut of the
    last few bytes (it reads on into the mapping's last page)."""
    size = path.stat().st_size
    if written is not None and size != written:
        raise RuntimeError(f"Error: {size} bytes, {written} written")


def read_deleted(path: Path, count: int) -> np.ndarray:
    """The ids recorded as deleted beside an index (`DELETED_FILE`), checked against the
    `count` its provenance.json records."""
    try:
        deleted = np.load(path).astype(np.int64)
    except (OSError, ValueError) as exc:
        raise VectorIndexError(
            f"{path} is missing or damaged ({exc}); re-run `bertindex index` on the same "
            "store to rebuild the index"
        ) from None
    if len(deleted) != count:
        raise VectorIndexError(
            f"{path} lists {len(deleted)} deleted ids, provenance.json {count}; re-run "
            "`bertindex index` on the same store to rebuild the index"
        )
    return np.sort(deleted)  # written sorted; searches rely on it (`rescore.search_mapped`)


def publish_version(
    index: VectorIndex,
    store_dir: Path,
    data_version: int | None,
    extra: Callable[[Path], None] | None,
    switch: bool,
) -> str:
    """`VectorIndex.save`: the version folder (delta, deleted ids, provenance.json, `extra`'s
    files) written under a temporary name, fsynced and renamed; the base first (renamed into
    place and fsynced before the folder that names it) when it is not on disk yet; then
    CURRENT pointed at it unless `switch` is False, and old versions collected."""
    root = Path(store_dir) / "index"
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".v*.tmp"):  # left by a killed writer
        shutil.rmtree(stale, ignore_errors=True)
    versions = list_versions(store_dir)
    version = f"v{(versions[-1] + 1) if versions else 1}"
    base_bytes = write_base(index, store_dir, version)
    lists_bytes = _lists_bytes(store_dir, index.base)
    tmp = root / f".{version}.tmp"
    tmp.mkdir()
    written = [PROVENANCE_FILE]
    delta_bytes = 0
    if index.delta.ntotal:
        faiss.write_index(index.delta, str(tmp / DELTA_FILE))
        delta_bytes = (tmp / DELTA_FILE).stat().st_size
        written.append(DELTA_FILE)
    if len(index.deleted):
        np.save(tmp / DELETED_FILE, index.deleted)
        written.append(DELETED_FILE)
    info = {
        "spec": index.spec,
        "ntotal": index.ntotal,
        "provenance": index.provenance.to_dict(),
        "data_version": data_version,
        "tuning": index.tuning,
        "memory_bytes": base_bytes + (lists_bytes or 0) + delta_bytes,
        "base": {
            "file": index.base,
            "bytes": base_bytes,
            "ntotal": int(index.index.ntotal),
            "lists_bytes": lists_bytes,
            "rows": store_rows.record(index.rows.files if index.rows else index.row_files),
        },
        "delta": {"ntotal": int(index.delta.ntotal), "bytes": delta_bytes},
        "deleted": len(index.deleted),
        "query_encoder": index.query_encoder,
    }
    (tmp / PROVENANCE_FILE).write_text(json.dumps(info, indent=2))
    if extra is not None:
        extra(tmp)
    for name in written:
        fsync_file(tmp / name)
    fsync_dir(tmp)
    crash_point("index.before_rename")
    os.replace(tmp, root / version)
    fsync_dir(root)
    index.data_version, index.version = data_version, version
    index.file_bytes = (base_bytes + (lists_bytes or 0), delta_bytes)
    if not switch:
        return version
    crash_point("index.before_pointer")
    write_pointer(store_dir, version)
    crash_point("index.before_cleanup")
    remove_old_versions(store_dir)
    return version


def write_base(index: VectorIndex, store_dir: Path, version: str) -> int:
    """Write the base as `index/bases/<version>.faiss` unless it is there already (the base
    a loaded index maps), its trained template first; returns its size."""
    folder = bases_dir(store_dir)
    folder.mkdir(exist_ok=True)
    if index.base is not None and (folder / index.base).is_file():
        return (folder / index.base).stat().st_size
    base = faiss.index_gpu_to_cpu(index.index) if is_gpu(index.index) else index.index
    if index.trained is not None:  # first: a base on disk is always beside its template
        index.trained_file = write_template(index.trained, folder / f"{version}{TRAINED_SUFFIX}")
    if has_block_lists(base):  # then its lists, which the base file names
        move_to_file(base, lists_path(folder / f"{version}.faiss"))
    if index.rows is not None:  # built over the store's files: its first pass already
        index.row_files = index.rows.files
    else:
        base, index.row_files = store_rows.without_stage(base, index.row_files)
    size = write_index_file(plain_id_map(base), folder / f"{version}.faiss")
    index.base = f"{version}.faiss"
    return size


def _lists_bytes(store_dir: Path, base: str | None) -> int | None:
    """The size of the base's lists file (`block_lists`), None when it has none."""
    path = lists_path(bases_dir(store_dir) / base) if base else None
    return path.stat().st_size if path is not None and path.is_file() else None
