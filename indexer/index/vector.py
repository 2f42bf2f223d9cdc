"""Vector index: FAISS over chunk ids, written atomically in versions beside its provenance.

Layout under the store directory: `index/bases/<name>.faiss`, the FAISS index a rebuild wrote,
shared by every version published until the next rebuild; `index/<version>/` holding what
changed since its base (`delta.faiss`: the vectors added, `deleted.npy`: the base's ids removed)
+ `provenance.json` naming the base (+ the store snapshot that searches read); `index/CURRENT`
naming the live version (replaced with an atomic rename). Searches map the base (one copy in
the page cache for every process) rather than read it. Does not encode; the vectors come from
the store, which is the truth this index is rebuilt from.
"""

from __future__ import annotations

import functools
import logging
import math
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
from indexer.errors import ProvenanceMismatch, VectorIndexError, repair_hint
from indexer.index import auto, rescore, store_rows
from indexer.index.auto import resolve_spec
from indexer.index.block_lists import has_block_lists
from indexer.index.delta import (
    DELTA_MAX_BYTES,
    DELTA_REBUILD,
    TRAINED_SUFFIX,
    batch_selector,
    has_lists,
    merge_top,
    new_delta,
    probed_delta,
    probed_params,
    read_template,
    remove_from,
    search_delta,
    stored_ids,
    tombstoned,
    trained_copy,
)
from indexer.index.spill import fill
from indexer.index.version_files import (
    DELETED_FILE,
    DELTA_FILE,
    INDEX_FILE,
    PROVENANCE_FILE,
    bases_dir,
    full_id_map,
    id_positions,
    publish_version,
    read_deleted,
    read_faiss,
    read_info,
    remove_old_versions,
)
from indexer.records.index_spec import parse_spec
from indexer.records.provenance import Provenance
from indexer.records.versions import current_version

__all__ = ["VectorIndex", "remove_old_versions", "resolve_spec"]

log = logging.getLogger(__name__)

DELETED_REBUILD = 0.1  # rebuild instead once that many of the base's vectors are deleted
EXACT_FILTER = 16  # HNSW/Refine: ≤ 1/16 of the vectors, or ≤ 16·k, are searched exactly


class VectorIndex:
    """A FAISS index whose ids are the store's chunk ids (int64), inner-product metric: a base
    that is never changed once built, the vectors added since in a delta (`indexer.index.delta`:
    probed like the base when it has IVF lists, else exact flat), and the base's ids removed
    since (`deleted`, left out of every search). A search merges the base's and the delta's top
    k (as one index over the same vectors, for an exact base). A changed document's old chunk
    ids are deleted and its new ones added.

    A rebuild is due (`remove` → False, `takes` → False) once deleted ids pass DELETED_REBUILD
    (10 %) of the base (dead vectors crowd its lists and hold memory), or the delta would pass
    DELTA_REBUILD (5 %) of it or, flat (scanned whole per query), DELTA_MAX_BYTES (16 MiB).
    Until then a publish writes what changed. The base's tuning (nprobe, k_factor) serves both.

    Args:
        index: the base FAISS index (with ids).
        spec: its factory string.
        provenance: what produced the vectors.
        config: search parameters (nprobe, efSearch).
        mapped: `index`'s arrays are views of its file (`load(mapped=True)`).
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
        # the base's deleted ids (it still stores them): never returned, not in `ntotal`
        self.deleted = np.zeros(0, np.int64)
        self.delta: faiss.Index = new_delta(index.d, index.metric_type)  # added since the base
        # the base trained and empty (probed deltas' template), or its file; neither: flat
        self.trained: np.ndarray | None = None
        self.trained_file: Path | None = None
        self.base: str | None = None  # the base's file name in `index/bases/` (None: unsaved)
        # the ONNX query encoder this version names ({"path", "sha256", …}; None: none)
        self.query_encoder: dict | None = None
        self.file_bytes = (0, 0)  # (base, delta) file sizes of the version saved or loaded
        self.delta_mapped = False  # the delta maps its file (`load(delta_mapped=True)`)
        # the store's vector files a build offers the base to rescore from (`store_rows`)
        self.row_files: list | None = None
        self.rows: store_rows.StoreRows | None = None

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
        batch = (np.asarray(ids, np.int64), np.ascontiguousarray(vectors, np.float32))
        return cls.build_from_batches(spec, provenance, config, lambda: [batch], len(ids))

    @classmethod
    def build_from_batches(
        cls,
        spec: str,
        provenance: Provenance,
        config: IndexConfig,
        batches: auto.Batches,
        count: int,
        spill: Path | None = None,
        tune_queries: np.ndarray | None = None,
        files: tuple[Path, list] | None = None,
    ) -> VectorIndex:
        """Create an index from (ids (n,) int64, vectors (n, dim) float32) batches without
        holding them all: one pass gathers the training sample (`auto.training_rows`), one
        adds the batches, and `auto` tuning two more (queries, exact truth).

        Args:
            batches: called once per pass; yields the same `count` vectors in the same order
                each time (e.g. `store.vectors.iter_batches`).
            count: how many vectors the batches hold.
            spill: a folder where a rescoring stage's codes wait while it fills (None: RAM).
            tune_queries: encoded example queries for `auto`'s tuning (`index.tune_queries`).
            files: (store folder, its vector files) holding every vector (`store_rows`).
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
            rows = auto.training_rows(count, spec, 64 if config.spec == "auto" else 256)
            sample = auto.gather_rows(batches, rows, dim)[1]
        if auto.has_gpu() and parsed.gpu_buildable:
            out = cls(auto.build_on_gpu(index, sample, batches), spec, provenance, config)
        else:
            trained = None
            if sample is not None:
                index.train(sample)
                sample = None  # not held while the index fills
                trained = trained_copy(index)
            over = store_rows.fill_first_pass(index, batches, *files) if files else None
            base = over[0] if over else fill(index, spec, batches, spill)  # (`add`: the delta)
            out = cls(base, spec, provenance, config)
            out.trained, out.rows = trained, over[1] if over else None
        del sample
        if config.spec == "auto" and auto.tunable(spec) is not None and count:
            searched = store_rows.Rescored.of(out) or out.index
            out.tuning = auto.tune_batches(
                *(searched, spec, batches, count, config.target_recall, config.tune_sample),
                k_factor=out._k_factor(),
                headroom=config.tune_headroom,
                queries=tune_queries,
            )
        return out

    @functools.cached_property
    def _tombstoned(self) -> bool:
        return self.rows is not None or tombstoned(self.index)

    @property
    def _id_map(self):
        """The id vector of the IDMap the index sits under (a `_tombstoned` index, one with
        a rescoring stage), filled from the file first where it was left there."""
        if not isinstance(self.index, faiss.IndexIDMap):
            raise VectorIndexError(f"this {self.spec} index is not under an IDMap")
        return full_id_map(self.index)

    @functools.cached_property
    def _rescored_here(self) -> rescore.MappedRefine | None:
        threads = self.config.scan_threads if self.mapped else None  # a searcher's (`rescore`)
        if self.rows is not None:  # a base rescoring from the store's files, mapped or not
            rows = self.rows
            return rescore.rows_refine(self.index, rows, rows.ids, self.provenance.dim, threads)
        if not self.mapped or not isinstance(self.index, faiss.IndexIDMap):
            return None
        return rescore.mapped_refine(self.index, threads=threads)

    @functools.cached_property
    def _held(self) -> tuple[np.ndarray, np.ndarray | None]:
        """An IDMap base's ids by position and their argsort (`rescore.id_view`)."""
        return rescore.id_view(self.index)

    @functools.cached_property
    def _base_ids(self) -> np.ndarray:
        """The ids the base stores, sorted (it never changes)."""
        return np.sort(stored_ids(self.index))

    def _delta_ids(self) -> np.ndarray:
        return stored_ids(self.delta)

    def _template(self) -> np.ndarray | None:
        """The base's trained copy, read from its file on first use (None: deltas are flat)."""
        if self.trained is None and self.trained_file is not None and self.base is not None:
            base = self.trained_file.with_name(self.base)
            self.trained = read_template(self.trained_file, base)
            self.trained_file = None if self.trained is None else self.trained_file
        return self.trained

    @property
    def _base_live(self) -> int:
        """Vectors of the base a search can return."""
        return int(self.index.ntotal) - len(self.deleted)

    @property
    def ntotal(self) -> int:
        """Vectors a search can return (the base's less the deleted, and the delta's)."""
        return self._base_live + int(self.delta.ntotal)

    def ids(self) -> np.ndarray:
        """The chunk ids a search can return: the base's less the deleted, then the delta's
        (an id held twice appears twice)."""
        return np.concatenate([np.setdiff1d(self._base_ids, self.deleted), self._delta_ids()])

    def takes(self, count: int) -> bool:
        """Whether `count` more vectors fit in the delta before a rebuild is due."""
        most = DELTA_REBUILD * self.index.ntotal
        probed = has_lists(self.delta) if self.delta.ntotal else self._template() is not None
        if not probed:
            most = min(most, DELTA_MAX_BYTES / (4 * self.index.d))
        return self.delta.ntotal + count <= most

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Add vectors to the delta (the base is never changed once built)."""
        if len(ids):
            if not self.delta.ntotal and (template := self._template()) is not None:
                self.delta = probed_delta(template)  # empty: a probed one when it can be
            vectors = np.ascontiguousarray(vectors, dtype=np.float32)
            self.delta.add_with_ids(vectors, np.asarray(ids, dtype=np.int64))

    def remove(self, ids: Sequence[int] | np.ndarray) -> bool:
        """Remove ids: from the delta, or recorded as deleted from the base (saved beside it);
        False, and nothing changed, once the deleted would pass DELETED_REBUILD of the
        base's vectors: rebuild instead."""
        if not len(ids):
            return True
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        in_delta = np.isin(ids, self._delta_ids())
        rest = ids[~in_delta]
        deleted = np.union1d(self.deleted, rest[np.isin(rest, self._base_ids)])
        if len(deleted) > DELETED_REBUILD * self.index.ntotal:
            return False
        if in_delta.any():
            self.delta = remove_from(self.delta, ids[in_delta], self._template())
        self.deleted = deleted
        return True

    def search(self, queries: np.ndarray, k: int, allowed=None, ranked: int | None = None):
        """Top-k chunk ids per query, optionally restricted to `allowed` ids inside FAISS.

        The base (less the deleted) and the delta are searched apart and their top k merged.
        `ranked`: how many of the k results the caller ranks by (`rescore.search_mapped`).

        Returns:
            (scores (q, k) float32, ids (q, k) int64); missing results have id -1.
        """
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = max(1, min(k, self.ntotal)) if self.ntotal else 1
        ranked = k if ranked is None else max(1, min(ranked, k))
        if not self.delta.ntotal:
            return self._search_base(queries, k, allowed, ranked)
        if allowed is None and (both := self._search_probed_together(queries, k, ranked)):
            return both
        base_allowed = delta_allowed = None
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=np.int64)
            held = np.isin(allowed, self._delta_ids())
            base_allowed, delta_allowed = allowed[~held], allowed[held]
        parts = []
        in_base = base_allowed is None or len(base_allowed)
        in_delta = delta_allowed is None or len(delta_allowed)
        if (self._base_live and in_base) or not in_delta:  # the base also answers "none"
            parts.append(self._search_base(queries, k, base_allowed, ranked))
        if in_delta:
            params = None
            if has_lists(self.delta):
                tuned = self.tuning and auto.retarget(self.tuning, self.config.target_recall)
                nprobe = tuned or self.config.nprobe
                params = probed_params(self.delta, nprobe, self._k_factor(), delta_allowed)
            parts.append(search_delta(self.delta, queries, k, delta_allowed, params))
        return merge_top(parts, k, self.index.metric_type)

    def _search_probed_together(self, queries: np.ndarray, k: int, ranked: int):
        """A mapped base rescored here (`rescore.mapped_refine`) and its probed delta searched
        with one coarse assignment: the delta is a copy of the base's trained index, so the same
        centroids; at 10M the quantizer's 16,384 inner products a query were done twice. A
        searcher scans both in one held pass, merged with concurrent queries'
        (`rescore.search_both`). None where that does not apply (no rescoring stage
        here, a flat delta, no live base vector)."""
        base, delta = self._rescored_here, self._delta_parts()
        if base is None or delta is None or not self._base_live:
            return None
        mapped = self._mapped_pass(None)
        if mapped is None or not hasattr(mapped[0], "nprobe"):
            return None
        first, k_factor, delta_factor, exclude = mapped
        factors = (k_factor, delta_factor)
        parts = rescore.search_both(base, delta, queries, k, factors, first, exclude, ranked)
        return merge_top(parts, k, self.index.metric_type)

    def _mapped_pass(self, allowed: np.ndarray | None):
        """A mapped base's first pass before its rescoring here: (its parameters, candidates
        a result, the delta's candidates a result, the deleted ids to drop from the candidates or
        None); None without parameters. Unfiltered, the deleted ids are dropped after the first pass
        (`rescore.search_mapped`), which asks for more candidates by their share."""
        after = allowed is None and len(self.deleted) > 0
        params = self._search_params(allowed, deleted=not after)
        if params is None:
            return None
        # the first pass's own parameters as `search_params` made them (`base_index_params`
        # comes back from SWIG as the base class, which FAISS's preassigned search refuses)
        first, k_factor = params.keep[0], float(params.k_factor)
        if not after:
            return first, math.ceil(k_factor), math.ceil(k_factor), None
        share = min(len(self.deleted) / max(int(self.index.ntotal), 1), 0.5)
        return first, math.ceil(k_factor / (1 - share)), math.ceil(k_factor), self.deleted

    def _delta_parts(self) -> rescore.MappedRefine | None:
        """The probed delta's first pass, rescoring vectors and ids (`rescore.mapped_refine`);
        kept for a mapped delta (a searcher's, never changed), read anew for one that an
        update may change in place."""
        if "_mapped_delta" in self.__dict__:
            return self.__dict__["_mapped_delta"]
        parts = None
        if has_lists(self.delta) and hasattr(self.delta, "id_map"):
            ids = faiss.vector_to_array(self.delta.id_map)
            # no passes of its own: a searcher scans it in the base's (`_search_probed_together`)
            parts = rescore.mapped_refine(self.delta, ids, self.delta_mapped)
        if self.delta_mapped:
            self.__dict__["_mapped_delta"] = parts
        return parts

    def _search_base(self, queries: np.ndarray, k: int, allowed, ranked: int | None = None):
        """Top-k of the base, deleted ids left out (`allowed`: ids it stores, or others)."""
        live = self._base_live
        k = max(1, min(k, live)) if live else 1
        if allowed is not None and len(self.deleted):
            allowed = np.setdiff1d(allowed, self.deleted)
        if self._tombstoned:
            # a graph walk or a few IVF lists meet too few of a small set (a selective
            # filter, or k near the size): exact search over their stored vectors
            among = live if allowed is None else len(allowed)
            if among * EXACT_FILTER <= live or among <= EXACT_FILTER * k:
                if allowed is None:
                    allowed = np.setdiff1d(faiss.vector_to_array(self._id_map), self.deleted)
                else:  # only ids the base stores can be read back
                    stored = self._base_ids
                    at = np.minimum(np.searchsorted(stored, allowed), max(len(stored) - 1, 0))
                    allowed = allowed[stored[at] == allowed] if len(stored) else stored
                return self._exact_among(queries, k, allowed)
        if self._rescored_here is not None and (mapped := self._mapped_pass(allowed)):
            first, k_factor, _, exclude = mapped
            parts = self._rescored_here
            return rescore.search_mapped(parts, queries, k, k_factor, first, exclude, ranked)
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
        """Exact search over the `allowed` ids' stored vectors (or rescoring codes)."""
        allowed = np.ascontiguousarray(allowed, dtype=np.int64)
        scores = np.full((len(queries), k), -np.inf, np.float32)
        found = np.full((len(queries), k), -1, np.int64)
        if len(allowed):
            vectors = self._reconstruct(allowed)
            top = min(k, len(allowed))
            d, pos = faiss.knn(queries, vectors, top, metric=faiss.METRIC_INNER_PRODUCT)
            scores[:, :top], found[:, :top] = d, np.where(pos >= 0, allowed[pos], -1)
        return scores, found

    def _reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors of base ids: through an IDMap2's reverse map, or for a base
        read as a plain IDMap (`version_files.plain_id_map`) at their positions in its ids."""
        if isinstance(self.index, faiss.IndexIDMap2) or not isinstance(
            self.index, faiss.IndexIDMap
        ):
            return self.index.reconstruct_batch(ids)
        positions = id_positions(*self._held, ids)
        if self.rows is not None:
            return self.rows.read(positions)
        return self.index.index.reconstruct_batch(positions)

    def _k_factor(self) -> int | None:
        """Candidates rescored per result (indexes with a rescoring stage), else None."""
        if parse_spec(self.spec).refine is None:
            return None
        return (self.tuning or {}).get("k_factor") or self.config.refine_factor

    def _search_params(self, allowed: np.ndarray | None, deleted: bool = True):
        """The base's search parameters; `deleted` False: no selector leaving out the deleted
        ids (the caller drops them from the results)."""
        # every object the C++ side points to rides on the returned parameters, so that
        # concurrent searches (the server's threads) never free one another's selectors
        selector: faiss.IDSelector | None = None
        keep: list = []
        if allowed is not None:
            selector, keep = batch_selector(allowed)
        elif deleted and len(self.deleted):
            live = self._live_selector()
            selector = live[2]
            keep.append(live)
        default = parse_spec(self.spec).search_param
        if self.tuning is not None:
            param = self.tuning["param"]
            value = auto.retarget(self.tuning, self.config.target_recall)
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
            share = max(len(allowed), 1) / max(self._base_live, 1)
            value = int(min(value / share, 16 * value))
            if param == "nprobe":
                value = min(value, faiss.extract_index_ivf(self.index).nlist)
        k_factor = self._k_factor()
        if k_factor is not None and selector is not None:
            # IndexRefine reads a selector only from its first pass's parameters, which see
            # the IDMap's internal ids; the IDMap translates only a top-level selector
            selector = faiss.IDSelectorTranslated(self._id_map, selector)
            keep.append(selector)
        params = auto.search_params(param, value, selector, k_factor)
        params.keep_alive = keep
        return params

    # -- files --------------------------------------------------------------------------
    def footprint(self) -> tuple[int, int]:
        """(bytes each process that loads this version keeps to itself, bytes they share): the
        delta, and of a mapped base its resident part (`auto.resident_bytes`), are private."""
        base, delta = self.file_bytes
        own = base
        if self.mapped and not has_block_lists(self.index):  # (a base before `block_lists`)
            dim = self.provenance.dim
            own = min(base, int(auto.resident_bytes(self.spec, int(self.index.ntotal), dim)))
        if self.delta_mapped:  # its reverse id map is private: ~56 bytes a vector
            return own + int(self.delta.ntotal) * auto.ID_MAP_BYTES, base - own + delta
        return own + delta, base - own

    def save(
        self,
        store_dir: Path,
        data_version: int | None = None,
        extra: Callable[[Path], None] | None = None,
        switch: bool = True,
    ) -> str:
        """Publish a new version atomically and point CURRENT at it; returns the version
        (`version_files.publish_version`).

        Args:
            data_version: the store's data_version these vectors reflect (recorded).
            extra: writes more files (the store snapshot searches read) into the version
                folder before it is published.
            switch: False: not pointing CURRENT at it (the caller does: `versions.write_pointer`).
        """
        return publish_version(self, Path(store_dir), data_version, extra, switch)

    @classmethod
    def load(
        cls,
        store_dir: Path,
        config: IndexConfig,
        expected: Provenance | None = None,
        keys: Sequence[str] = (),
        version: str | None = None,
        mapped: bool = True,
        delta_mapped: bool = False,
    ) -> VectorIndex | None:
        """Load the current version (or `version`); None when the store has no index yet.

        Args:
            mapped: map the base file (FAISS `IO_FLAG_MMAP_IFC`) instead of reading a private
                copy: flat and scalar-quantised codes, plain IVF lists (ids and PQ codes) and
                the vectors of a rescoring stage stay in the page cache, one copy for every
                process that maps the base, and a search reads only the pages it touches.
                A fast-scan base's lists are mapped from the file beside it (`block_lists`).
                HNSW graphs (which FAISS writes to while searching), the
                IDMap2 ids and the coarse centroids still become private memory. Bases are
                never rewritten in place, so the mapping stays valid.
            delta_mapped: map the delta too (a searcher's: 190 MB read into every process at
                10M with 1 % changed); never for an index that will be updated (`add`,
                `remove`), which changes the delta in memory. Version files are never
                rewritten in place either.
        Raises:
            ProvenanceMismatch: `expected` disagrees with the index on `keys`.
            VectorIndexError: a file of the version (or its base) is missing or damaged.
        """
        version = version or current_version(store_dir)
        if version is None:
            return None
        folder = Path(store_dir) / "index" / version
        fix = (
            f"rebuild it from the stored vectors (nothing is re-encoded): {repair_hint(store_dir)}"
        )
        info, provenance = read_info(folder, fix)
        if expected is not None:
            diffs = provenance.mismatches(expected, keys)
            if diffs:
                raise ProvenanceMismatch(
                    f"index {folder} was built by another encoder set-up than the vectors in "
                    f"the store (index != store: {'; '.join(diffs)}); {fix}"
                )
        base = info.get("base") or {}
        base_file = bases_dir(store_dir) / base["file"] if base else folder / INDEX_FILE
        base_bytes = base.get("bytes", info.get("memory_bytes"))
        index = read_faiss(base_file, base_bytes, mapped, fix, folder, base.get("lists_bytes"))
        out = cls(
            index, info["spec"], provenance, config, info.get("data_version"), version, mapped
        )
        out.base = base.get("file")  # None: an older version's own file, written anew
        out.rows = store_rows.open_rows(store_dir, base.get("rows"), provenance.dim, index, fix)
        if out.base and has_lists(index):  # read, or derived from the base, when first needed
            out.trained_file = base_file.with_name(base_file.stem + TRAINED_SUFFIX)
        out.tuning = info.get("tuning")
        out.query_encoder = info.get("query_encoder")
        delta = info.get("delta") or {}
        if delta.get("ntotal"):
            file = folder / DELTA_FILE
            out.delta_mapped = mapped and delta_mapped
            out.delta = read_faiss(file, delta["bytes"], out.delta_mapped, fix, folder)
        lists = base.get("lists_bytes") or 0  # a fast-scan base's mapped lists file
        out.file_bytes = (base_file.stat().st_size + lists, delta.get("bytes", 0))
        if info.get("deleted"):
            out.deleted = read_deleted(folder / DELETED_FILE, info["deleted"])
        if "ntotal" in info and out.ntotal != info["ntotal"]:
            raise VectorIndexError(
                f"{base_file} holds {out.ntotal} vectors but {folder / PROVENANCE_FILE} "
                f"records {info['ntotal']}: the file was damaged or replaced; {fix}"
            )
        return out
