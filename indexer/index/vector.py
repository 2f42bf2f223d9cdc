"""Vector index: FAISS over chunk ids, written atomically in versions beside its provenance.

Layout under the store directory: `index/<version>/index.faiss` + `provenance.json` (+ the
store snapshot that searches read), and `index/CURRENT` naming the live version (replaced with an
atomic rename). Searches map `index.faiss` (one copy in the page cache for every process) rather
than read it. Does not encode; the vectors come from the store, which is the truth this index
is rebuilt from.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

try:
    import faiss
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "FAISS is missing: install bertindex with one of its builds, "
        "`pip install 'bertindex[cpu]'` or `pip install 'bertindex[gpu]'`"
    ) from exc

from indexer.config import IndexConfig
from indexer.core.faults import crash_point
from indexer.core.fsio import fsync_dir, fsync_file
from indexer.errors import ProvenanceMismatch, VectorIndexError, repair_hint
from indexer.index.auto import (
    Batches,
    build_on_gpu,
    choose_spec,
    gather_rows,
    search_params,
    training_rows,
    tunable,
    tune_batches,
)
from indexer.records.index_spec import parse_spec
from indexer.records.provenance import Provenance
from indexer.records.versions import current_version, list_versions, write_pointer

log = logging.getLogger(__name__)

INDEX_FILE = "index.faiss"
PROVENANCE_FILE = "provenance.json"
DELETED_FILE = "deleted.npy"  # ids removed from an index that cannot remove (HNSW, Refine)
DELETED_REBUILD = 0.1  # rebuild instead once that many of the stored vectors are deleted
EXACT_FILTER = 16  # HNSW/Refine: ≤ 1/16 of the vectors, or ≤ 16·k, are searched exactly
KEEP_VERSIONS = 2


def has_gpu() -> bool:
    return hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0


def resolve_spec(
    spec: str, n_vectors: int, config: IndexConfig | None = None, dim: int | None = None
) -> str:
    """The FAISS factory string for `index.spec`; `auto` picks by collection size and memory
    budget (`indexer.index.auto.choose_spec`; the index section's defaults without `config`).

    Args:
        spec: `auto` or a FAISS factory string.
        n_vectors: vectors the index will hold.
        config: the index section.
        dim: the vectors' dimension (needed for `auto`).
    Returns:
        The factory string.
    Raises:
        VectorIndexError: `spec` is not a form `indexer.records.index_spec` reads.
    """
    if spec != "auto":
        parse_spec(spec)
        return spec
    if dim is None:
        raise ValueError("resolve_spec('auto', ...) needs the vectors' dimension (dim=)")
    return choose_spec(n_vectors, dim, config or IndexConfig())


class VectorIndex:
    """A FAISS index whose ids are the store's chunk ids (int64), inner-product metric.

    Args:
        index: the FAISS index (with ids).
        spec: its factory string.
        provenance: what produced the vectors.
        config: search parameters (nprobe, efSearch).
        mapped: `index`'s arrays are views of its file (`load(mapped=True)`), copied before
            anything changes them.
    """

    def __init__(
        self,
        index: faiss.Index,
        spec: str,
        provenance: Provenance,
        config: IndexConfig,
        data_version: int | None = None,
        version: str | None = None,
        mapped: bool = False,
    ):
        self.index = index
        self.mapped = mapped
        self.spec = spec
        self.provenance = provenance
        self.config = config
        self.data_version = data_version  # the store's data_version this index reflects
        self.version = version  # the published version it was loaded from
        self.tuning: dict | None = None  # `auto`: measured search parameter (auto.tune)
        # ids deleted but still stored in an index that cannot remove them (HNSW): never
        # returned by a search, not counted in `ntotal`
        self.deleted = np.zeros(0, np.int64)
        # the ONNX query encoder this version names ({"path", "sha256", …}; None: none)
        self.query_encoder: dict | None = None

    @classmethod
    def build(
        cls,
        spec: str,
        provenance: Provenance,
        config: IndexConfig,
        vectors: np.ndarray,
        ids: np.ndarray,
    ) -> VectorIndex:
        """Create an index from `vectors` (n, dim) float32 with chunk `ids` (n,) int64."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        ids = np.asarray(ids, dtype=np.int64)
        return cls.build_from_batches(spec, provenance, config, lambda: [(ids, vectors)], len(ids))

    @classmethod
    def build_from_batches(
        cls, spec: str, provenance: Provenance, config: IndexConfig, batches: Batches, count: int
    ) -> VectorIndex:
        """Create an index from (ids (n,) int64, vectors (n, dim) float32) batches without
        holding them all: one pass gathers the training sample (`auto.training_rows`),
        one adds the batches, and `auto` tuning makes two more (queries, exact truth).

        Args:
            batches: called once per pass; yields the same `count` vectors in the same order
                each time (e.g. `store.vectors.iter_batches`).
            count: how many vectors the batches hold.
        """
        dim = provenance.dim
        parsed = parse_spec(spec)
        factory = f"IDMap2,{spec}" if parsed.needs_id_map else spec
        try:
            index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            raise VectorIndexError(
                f"index.spec '{spec}' is not a FAISS factory string: {exc}"
            ) from None
        if not index.is_trained and count == 0:
            raise VectorIndexError(f"index.spec '{spec}' must be trained, and there are no vectors")
        sample = None
        if not index.is_trained:  # `auto`: 64 a list; a given spec: FAISS's own 256 a list
            rows = training_rows(count, spec, 64 if config.spec == "auto" else 256)
            sample = gather_rows(batches, rows, dim)[1]
        if has_gpu() and parsed.gpu_buildable:
            out = cls(build_on_gpu(index, sample, batches), spec, provenance, config)
        else:
            if sample is not None:
                index.train(sample)
                sample = None  # not held while the index fills
            out = cls(index, spec, provenance, config)
            for ids, vectors in batches():
                out.add(vectors, ids)
        del sample
        if config.spec == "auto" and tunable(spec) is not None and count:
            out.tuning = tune_batches(
                out.index,
                spec,
                batches,
                count,
                config.target_recall,
                config.tune_sample,
                k_factor=out._k_factor(),
                headroom=config.tune_headroom,
            )
        return out

    def _own(self) -> None:
        """Swap a mapped index for a private copy before FAISS changes it: a mapped index's
        codes and lists are views of the file, and FAISS aborts the process (an assertion,
        not an exception) when it resizes one. A writer loads with `mapped=False` instead."""
        if self.mapped:
            self.index = faiss.deserialize_index(faiss.serialize_index(self.index))
            self.mapped = False

    @functools.cached_property
    def _tombstoned(self) -> bool:
        return _tombstoned(self.index)

    @property
    def _id_map(self):
        """The id vector of the IDMap the index sits under (a `_tombstoned` index, one with
        a rescoring stage)."""
        if not isinstance(self.index, faiss.IndexIDMap):
            raise VectorIndexError(f"this {self.spec} index is not under an IDMap")
        return self.index.id_map

    @property
    def ntotal(self) -> int:
        """Vectors a search can return (stored ones less the deleted)."""
        return int(self.index.ntotal) - len(self.deleted)

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        if len(ids):
            ids = np.asarray(ids, dtype=np.int64)
            if len(self.deleted) and np.isin(ids, self.deleted).any():
                again = ids[np.isin(ids, self.deleted)][:5].tolist()
                raise VectorIndexError(
                    f"ids {again} were deleted from this {self.spec} index and are "
                    "added again; rebuild it with `bertindex index` on the store"
                )
            self._own()
            self.index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids)

    def remove(self, ids: Sequence[int] | np.ndarray) -> bool:
        """Remove ids; False when the index should be rebuilt instead.

        HNSW and indexes with a rescoring stage (`IndexRefine`) cannot remove: their ids are
        recorded as deleted (saved beside the index) and left out of every search, until
        they reach DELETED_REBUILD of the stored vectors (False: dead vectors crowd the
        graph walk or the lists scanned, and hold memory).
        """
        if not len(ids):
            return True
        ids = np.asarray(ids, dtype=np.int64)
        if self._tombstoned:
            stored = faiss.vector_to_array(self._id_map)
            deleted = np.union1d(self.deleted, ids[np.isin(ids, stored)])
            if len(deleted) > DELETED_REBUILD * self.index.ntotal:
                return False
            self.deleted = deleted
            return True
        self._own()
        try:
            self.index.remove_ids(faiss.IDSelectorBatch(ids))
        except RuntimeError:
            return False
        return True

    def search(self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None):
        """Top-k chunk ids per query, optionally restricted to `allowed` ids inside FAISS.

        Returns:
            (scores (q, k) float32, ids (q, k) int64); missing results have id -1.
        """
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = max(1, min(k, self.ntotal)) if self.ntotal else 1
        if allowed is not None and len(self.deleted):
            allowed = np.setdiff1d(allowed, self.deleted)
        if self._tombstoned:
            # a graph walk or a few IVF lists meet too few of a small set (a selective
            # filter, or k near the size): exact search over their stored vectors
            among = self.ntotal if allowed is None else len(allowed)
            if among * EXACT_FILTER <= self.ntotal or among <= EXACT_FILTER * k:
                if allowed is None:
                    allowed = np.setdiff1d(faiss.vector_to_array(self._id_map), self.deleted)
                return self._exact_among(queries, k, allowed)
        params = self._search_params(allowed)
        if params is None:
            return self.index.search(queries, k)
        return self.index.search(queries, k, params=params)

    def _live_selector(self) -> tuple:
        """(deleted ids, their IDSelectorBatch, the IDSelectorNot of it: the ids not deleted),
        built once per set of deleted ids. Callers hold the whole tuple while they search: the
        Not selector points at the Batch one, and another thread may replace the cache."""
        cached = getattr(self, "_live", None)
        if cached is None or cached[0] is not self.deleted:
            batch = faiss.IDSelectorBatch(self.deleted)
            cached = self._live = (self.deleted, batch, faiss.IDSelectorNot(batch))
        return cached

    def _exact_among(self, queries: np.ndarray, k: int, allowed: np.ndarray):
        """Exact search over the `allowed` ids' stored vectors (full vectors, or the
        rescoring codes of a `Refine(SQ8)`)."""
        allowed = np.ascontiguousarray(allowed, dtype=np.int64)
        scores = np.full((len(queries), k), -np.inf, np.float32)
        found = np.full((len(queries), k), -1, np.int64)
        if len(allowed):
            vectors = self.index.reconstruct_batch(allowed)
            top = min(k, len(allowed))
            d, pos = faiss.knn(queries, vectors, top, metric=faiss.METRIC_INNER_PRODUCT)
            scores[:, :top], found[:, :top] = d, np.where(pos >= 0, allowed[pos], -1)
        return scores, found

    def _k_factor(self) -> int | None:
        """Candidates rescored per result (indexes with a rescoring stage), else None."""
        if parse_spec(self.spec).refine is None:
            return None
        return (self.tuning or {}).get("k_factor") or self.config.refine_factor

    def _search_params(self, allowed: np.ndarray | None):
        # every object the C++ side points to rides on the returned parameters, so that
        # concurrent searches (the server's threads) never free one another's selectors
        selector: faiss.IDSelector | None = None
        keep: list = []
        if allowed is not None:
            ids = np.ascontiguousarray(allowed, dtype=np.int64)
            selector = faiss.IDSelectorBatch(ids)
            keep += [ids, selector]
        elif len(self.deleted):
            live = self._live_selector()
            selector = live[2]
            keep.append(live)
        default = parse_spec(self.spec).search_param
        if self.tuning is not None:
            param, value = self.tuning["param"], self.tuning["value"]
        elif default == "nprobe":
            param, value = "nprobe", self.config.nprobe
        elif default == "efSearch":
            param, value = "efSearch", self.config.ef_search
        elif selector is None:
            return None
        else:
            params = faiss.SearchParameters()
            params.sel = selector
            params.keep_alive = keep  # type: ignore[attr-defined]  # a Python attribute on SWIG
            return params
        if allowed is not None:
            # the search keeps only passing ids: widen it by the share that fails (≤ 16×)
            share = max(len(allowed), 1) / max(self.ntotal, 1)
            value = int(min(value / share, 16 * value))
            if param == "nprobe":
                value = min(value, faiss.extract_index_ivf(self.index).nlist)
        k_factor = self._k_factor()
        if k_factor is not None and selector is not None:
            # IndexRefine reads a selector only from its first pass's parameters, which see
            # the IDMap's internal ids; the IDMap translates only a top-level selector
            selector = faiss.IDSelectorTranslated(self._id_map, selector)
            keep.append(selector)
        params = search_params(param, value, selector, k_factor)
        params.keep_alive = keep
        return params

    # -- files --------------------------------------------------------------------------
    def save(
        self,
        store_dir: Path,
        data_version: int | None = None,
        extra: Callable[[Path], None] | None = None,
        switch: bool = True,
    ) -> str:
        """Write a new version atomically and point CURRENT at it; returns the version.

        Args:
            data_version: the store's data_version these vectors reflect (recorded).
            extra: writes more files into the version folder before it is published (the
                store snapshot that searches read).
            switch: False publishes the folder without pointing CURRENT at it (the caller
                switches later with `versions.write_pointer`).
        """
        root = Path(store_dir) / "index"
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(".v*.tmp"):  # left by a killed writer
            shutil.rmtree(stale, ignore_errors=True)
        versions = list_versions(store_dir)
        version = f"v{(versions[-1] + 1) if versions else 1}"
        tmp = root / f".{version}.tmp"
        tmp.mkdir()
        index = faiss.index_gpu_to_cpu(self.index) if _is_gpu(self.index) else self.index
        faiss.write_index(index, str(tmp / INDEX_FILE))
        info = {
            "spec": self.spec,
            "ntotal": self.ntotal,
            "provenance": self.provenance.to_dict(),
            "data_version": data_version,
            "tuning": self.tuning,
            "memory_bytes": (tmp / INDEX_FILE).stat().st_size,
            "deleted": len(self.deleted),
            "query_encoder": self.query_encoder,
        }
        if len(self.deleted):
            np.save(tmp / DELETED_FILE, self.deleted)
            fsync_file(tmp / DELETED_FILE)
        (tmp / PROVENANCE_FILE).write_text(json.dumps(info, indent=2))
        if extra is not None:
            extra(tmp)
        for name in (INDEX_FILE, PROVENANCE_FILE):
            fsync_file(tmp / name)
        fsync_dir(tmp)
        crash_point("index.before_rename")
        os.replace(tmp, root / version)
        fsync_dir(root)
        self.data_version, self.version = data_version, version
        if not switch:
            return version
        crash_point("index.before_pointer")
        write_pointer(store_dir, version)
        crash_point("index.before_cleanup")
        remove_old_versions(store_dir)
        return version

    @classmethod
    def load(
        cls,
        store_dir: Path,
        config: IndexConfig,
        expected: Provenance | None = None,
        keys: Sequence[str] = (),
        version: str | None = None,
        mapped: bool = True,
    ) -> VectorIndex | None:
        """Load the current version (or `version`); None when the store has no index yet.

        Args:
            mapped: map the file (FAISS `IO_FLAG_MMAP_IFC`) instead of reading a private copy:
                flat and scalar-quantised codes, plain IVF lists (ids and PQ codes) and the
                vectors of a rescoring stage stay in the page cache, one copy for every
                process that maps this version, and a search reads only the pages it touches.
                Fast-scan PQ lists, HNSW graphs (which FAISS writes to while searching), the
                IDMap2 ids and the coarse centroids still become private memory. Versions are
                never rewritten in place, so the mapping stays valid. False: a private copy,
                for a writer that changes the index (`add`, `remove` copy a mapped one first).
        Raises:
            ProvenanceMismatch: `expected` disagrees with the index on `keys`.
            VectorIndexError: a file of the version is missing or damaged.
        """
        root = Path(store_dir) / "index"
        version = version or current_version(store_dir)
        if version is None:
            return None
        folder = root / version
        index_file, info_file = folder / INDEX_FILE, folder / PROVENANCE_FILE
        fix = (
            f"rebuild it from the stored vectors (nothing is re-encoded): {repair_hint(store_dir)}"
        )
        missing = [p.name for p in (index_file, info_file) if not p.is_file()]
        if missing:
            what = "folder" if not folder.is_dir() else ", ".join(missing)
            raise VectorIndexError(f"index {folder}: {what} missing; {fix}")
        try:
            info = json.loads(info_file.read_text())
            provenance = Provenance(**info["provenance"])
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise VectorIndexError(f"cannot read {info_file} ({exc!r}); {fix}") from None
        if expected is not None:
            diffs = provenance.mismatches(expected, keys)
            if diffs:
                raise ProvenanceMismatch(
                    f"index {folder} was built by another encoder set-up than the vectors in "
                    f"the store (index != store: {'; '.join(diffs)}); {fix}"
                )
        try:
            _check_size(index_file, info.get("memory_bytes"))
            index = faiss.read_index(str(index_file), faiss.IO_FLAG_MMAP_IFC if mapped else 0)
        except RuntimeError as exc:
            reason = str(exc).strip().rpartition("Error: ")[2][:120] or "unreadable"
            raise VectorIndexError(
                f"cannot read {index_file}: the file is damaged or truncated ({reason}); {fix}"
            ) from None
        out = cls(
            index, info["spec"], provenance, config, info.get("data_version"), version, mapped
        )
        out.tuning = info.get("tuning")
        out.query_encoder = info.get("query_encoder")
        if info.get("deleted"):
            out.deleted = _read_deleted(folder / DELETED_FILE, info["deleted"])
        if "ntotal" in info and out.ntotal != info["ntotal"]:
            raise VectorIndexError(
                f"{index_file} holds {out.ntotal} vectors but {info_file} records "
                f"{info['ntotal']}: the file was damaged or replaced; {fix}"
            )
        return out


def _check_size(path: Path, written: int | None) -> None:
    """Raise RuntimeError (read as damage) when `path` is not the size it was written at
    (`memory_bytes` in provenance.json is the file's size): FAISS's mapped read misses a cut
    of the last few bytes (it reads on into the mapping's last page)."""
    size = path.stat().st_size
    if written is not None and size != written:
        raise RuntimeError(f"Error: {size} bytes, {written} written")


def _read_deleted(path: Path, count: int) -> np.ndarray:
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
    return deleted


def remove_old_versions(store_dir: Path, keep: int = KEEP_VERSIONS) -> None:
    """Remove versions older than the newest `keep` (the current one is never removed).

    A reader that opened an old version's files keeps reading them: removal unlinks names,
    open files stay readable until closed.
    """
    live = current_version(store_dir)
    versions = list_versions(store_dir)
    for old in versions[: max(0, len(versions) - keep)]:
        if f"v{old}" != live:
            shutil.rmtree(Path(store_dir) / "index" / f"v{old}", ignore_errors=True)


def _tombstoned(index: faiss.Index) -> bool:
    """Whether deletes from `index` are recorded rather than removed: an IDMap over HNSW or
    over a rescoring stage (IndexRefine), neither of which implements remove_ids."""
    inner = getattr(index, "index", None)
    if inner is None or not hasattr(index, "id_map"):
        return False
    return isinstance(faiss.downcast_index(inner), (faiss.IndexHNSW, faiss.IndexRefine))


def _is_gpu(index: faiss.Index) -> bool:
    return "Gpu" in type(index).__name__
