"""Vector index: FAISS over chunk ids, written atomically in versions beside its provenance.

Layout under the store directory: `index/<version>/index.faiss` + `provenance.json` (+ the
store snapshot that searches read), and `index/CURRENT` naming the live version (replaced with an
atomic rename). Does not encode; the vectors come from the store, which is the truth this index
is rebuilt from.
"""

from __future__ import annotations

import json
import logging
import math
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

from indexer.auto_index import (
    build_on_gpu,
    choose_spec,
    search_params,
    training_sample,
    tunable,
    tune,
)
from indexer.config import IndexConfig
from indexer.encoder import Provenance
from indexer.errors import IndexError_, ProvenanceMismatch
from indexer.faults import crash_point
from indexer.versions import current_version, fsync_dir, list_versions, write_pointer

log = logging.getLogger(__name__)

FLAT_LIMIT = 100_000  # `auto` keeps exact search up to this many vectors
INDEX_FILE = "index.faiss"
PROVENANCE_FILE = "provenance.json"
KEEP_VERSIONS = 2


def has_gpu() -> bool:
    return hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0


def resolve_spec(spec: str, n_vectors: int, config: IndexConfig | None = None,
                 dim: int | None = None) -> str:
    """The FAISS factory string for `index.spec`; `auto` picks by collection size.

    `auto`: exact inner-product search (`Flat`) up to FLAT_LIMIT vectors, else an IVF index
    with about 4·√n lists.
    """
    if spec != "auto":
        return spec
    if config is not None and dim is not None:  # size and memory budget: indexer.auto_index
        return choose_spec(n_vectors, dim, config)
    if n_vectors <= FLAT_LIMIT:
        return "Flat"
    lists = 1 << int(round(math.log2(4 * math.sqrt(n_vectors))))
    return f"IVF{lists},Flat"


def _needs_id_map(spec: str) -> bool:
    return not spec.split(",")[0].startswith("IVF") and not spec.startswith("IDMap")


class VectorIndex:
    """A FAISS index whose ids are the store's chunk ids (int64), inner-product metric.

    Args:
        index: the FAISS index (with ids).
        spec: its factory string.
        provenance: what produced the vectors.
        config: search parameters (nprobe, efSearch).
    """

    def __init__(self, index: faiss.Index, spec: str, provenance: Provenance, config: IndexConfig,
                 data_version: int | None = None, version: str | None = None):
        self.index = index
        self.spec = spec
        self.provenance = provenance
        self.config = config
        self.data_version = data_version  # the store's data_version this index reflects
        self.version = version  # the published version it was loaded from
        self.tuning: dict | None = None  # `auto`: measured search parameter (auto_index.tune)

    @classmethod
    def build(cls, spec: str, provenance: Provenance, config: IndexConfig,
              vectors: np.ndarray, ids: np.ndarray) -> VectorIndex:
        """Create an index from `vectors` (n, dim) float32 with chunk `ids` (n,) int64."""
        dim = provenance.dim
        factory = f"IDMap2,{spec}" if _needs_id_map(spec) else spec
        try:
            index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            raise IndexError_(f"index.spec '{spec}' is not a FAISS factory string: {exc}") from None
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        ids = np.asarray(ids, dtype=np.int64)
        if not index.is_trained and len(vectors) == 0:
            raise IndexError_(f"index.spec '{spec}' must be trained, and there are no vectors")
        if has_gpu() and spec.startswith("IVF"):
            out = cls(build_on_gpu(index, spec, vectors, ids), spec, provenance, config)
        else:
            if not index.is_trained:
                index.train(training_sample(vectors, spec) if config.spec == "auto" else vectors)
            out = cls(index, spec, provenance, config)
            out.add(vectors, ids)
        if config.spec == "auto" and tunable(spec) is not None and len(vectors):
            out.tuning = tune(out.index, spec, vectors, ids, config.target_recall,
                              config.tune_sample)
        return out

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        if len(ids):
            self.index.add_with_ids(
                np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64)
            )

    def remove(self, ids: Sequence[int]) -> bool:
        """Remove ids; False when this index type cannot remove (rebuild it instead)."""
        if not len(ids):
            return True
        try:
            self.index.remove_ids(faiss.IDSelectorBatch(np.asarray(ids, dtype=np.int64)))
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
        params = self._search_params(allowed)
        if params is None:
            return self.index.search(queries, k)
        return self.index.search(queries, k, params=params)

    def _search_params(self, allowed: np.ndarray | None):
        selector = None
        if allowed is not None:
            self._selector_ids = np.ascontiguousarray(allowed, dtype=np.int64)  # kept alive
            selector = faiss.IDSelectorBatch(self._selector_ids)
        inner = faiss.extract_index_ivf(self.index) if "IVF" in self.spec else None
        if self.tuning is not None:
            params = search_params(self.tuning["param"], self.tuning["value"])
        elif inner is not None:
            params = faiss.SearchParametersIVF(nprobe=self.config.nprobe)
        elif "HNSW" in self.spec:
            params = faiss.SearchParametersHNSW(efSearch=self.config.ef_search)
        elif selector is None:
            return None
        else:
            params = faiss.SearchParameters()
        if selector is not None:
            params.sel = selector
        return params

    # -- files --------------------------------------------------------------------------
    def save(self, store_dir: Path, data_version: int | None = None,
             extra: Callable[[Path], None] | None = None, switch: bool = True) -> str:
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
        info = {"spec": self.spec, "ntotal": self.ntotal, "provenance": self.provenance.to_dict(),
                "data_version": data_version, "tuning": self.tuning,
                "memory_bytes": (tmp / INDEX_FILE).stat().st_size}
        (tmp / PROVENANCE_FILE).write_text(json.dumps(info, indent=2))
        if extra is not None:
            extra(tmp)
        for name in (INDEX_FILE, PROVENANCE_FILE):
            _fsync_file(tmp / name)
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
    def load(cls, store_dir: Path, config: IndexConfig, expected: Provenance | None = None,
             keys: Sequence[str] = (), version: str | None = None) -> VectorIndex | None:
        """Load the current version (or `version`); None when the store has no index yet.

        Raises ProvenanceMismatch when `expected` disagrees with the index on `keys`.
        """
        root = Path(store_dir) / "index"
        version = version or current_version(store_dir)
        if version is None:
            return None
        folder = root / version
        index_file, info_file = folder / INDEX_FILE, folder / PROVENANCE_FILE
        if not index_file.is_file() or not info_file.is_file():
            raise IndexError_(
                f"index files missing in {folder}; rebuild the index from the stored vectors "
                "with `bertindex index` on the same store"
            )
        info = json.loads(info_file.read_text())
        provenance = Provenance(**info["provenance"])
        if expected is not None:
            diffs = provenance.mismatches(expected, keys)
            if diffs:
                raise ProvenanceMismatch(
                    f"index {folder} was built by another encoder set-up (index != configured: "
                    f"{'; '.join(diffs)}). Search with the configuration it was built with, "
                    "or re-index into a new --store."
                )
        try:
            index = faiss.read_index(str(index_file))
        except RuntimeError as exc:
            raise IndexError_(f"cannot read {index_file} ({exc}); it is damaged: re-run "
                              "`bertindex index` on the same store to rebuild it") from None
        out = cls(index, info["spec"], provenance, config, info.get("data_version"), version)
        out.tuning = info.get("tuning")
        return out


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


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _is_gpu(index: faiss.Index) -> bool:
    return "Gpu" in type(index).__name__
