"""A searcher's IVF first pass (`rescore.search_mapped`): on how many threads it scans, and
concurrent queries' passes merged into one FAISS call.

Threads. FAISS's fast-scan search runs one query on one thread whatever OpenMP allows (it
splits a batch by queries), so on an idle 2-core server half the machine waited while a 10M
query scanned 2 million codes. A searcher's pass runs on the cores idle when it starts
(`index.scan_threads` 0, `machine.idle_cores`; n: n): all of them on an idle server, one on a
busy one (`benchmarks/scan_threads.py`); a lone query on several threads with FAISS's
implementation that splits its probed lists over them (`SPLIT_PROBES`), a batch with FAISS's
own choice, which splits it by queries.

Merging. A served query's pass reads ~200 MB of codes at 10M, memory-bound; queries that run
together probe many of the same lists, and FAISS scans a list once for all the queries of a
batch that probe it: 28.2 ms a query alone, 16.8 in a batch of 8, 8.7 in 64, one thread
(`benchmarks/first_pass_batches.py`). So a searcher's unfiltered one-query passes with the
same parameters wait while one runs, and the next to run takes the waiting ones (the oldest
`MAX_MERGED`) into one call, then hands each caller its own candidates: 16 clients of a 10M
`serve` got 59-61 q/s against 48-50 (docs/guides/scale.md). A query alone runs at once.
Filtered passes (a selector of their own) run alone. Candidates equal a pass alone's up to
ties at the cut-off.

A base and its probed delta (`Also`). The delta is an empty copy of the base as trained, so
both probe the same lists: a query's lists are chosen once, and the delta is scanned in the
same held pass as the base, for the same merged queries. Before, each query chose its lists
alone before its base pass and the delta's pass ran after it, mostly alone (in an ad hoc probe
under load, 246 of 359 delta passes held one query, against 3 of 135 base passes). At 10M
after a 1 % change, two processes of 8 searching threads ran 70.7-72.1 q/s at 27.2-27.7 ms of
CPU a query against 68.0-69.0 at 28.4-28.8, one query alone as fast
(`benchmarks/search_load.py`), and a 16-client `serve` 1-4 % more queries a second
(`benchmarks/serve_ab.py`; docs/guides/scale.md, the twenty-third session).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

import faiss
import numpy as np

from indexer.core.machine import idle_cores

# FAISS's fast-scan implementation that splits one query's probed lists over the OpenMP
# threads and merges their candidates (14 keeps a heap, 15 a reservoir: k·k_factor > 20). On
# one thread it gives the candidates of the default (12/13, which splits a batch by queries);
# for batches it was 3-21 % slower (`benchmarks/first_pass_batches.py`), so only a lone query
# on several threads uses it.
SPLIT_PROBES = 15
MAX_MERGED = 64  # queries one merged pass takes at most


def ivf_of(index: faiss.Index):
    """The IVF index inside `index` (under an IDMap, a rescoring stage), downcast, or None."""
    try:
        return faiss.downcast_index(faiss.extract_index_ivf(index))
    except RuntimeError:  # not an IVF index
        return None


def fast_scan(first: faiss.Index):
    """The fast-scan IVF index (blocks of 32) inside `first`, or None."""
    ivf = ivf_of(first)
    if isinstance(ivf, faiss.IndexIVFFastScan) and ivf.bbs == 32:
        return ivf
    return None


def scan_threads(threads: int) -> int:
    """OpenMP threads for a searcher's first pass: `index.scan_threads` n gives n, 0 the cores
    idle now (`machine.idle_cores`), at least the caller's own."""
    return threads or max(faiss.omp_get_max_threads(), idle_cores())


@contextlib.contextmanager
def split_probes(first: faiss.Index, lone: bool):
    """Inside, a fast-scan `first` scans a `lone` query's lists with `SPLIT_PROBES`; its own
    implementation (as read from its file) back after. The caller holds its searcher's pass
    lock; a filtered search of the same index outside it (a delta's, `delta.search_delta`)
    that runs meanwhile keeps its filter and finds the same candidates up to ties
    (`test_a_filtered_search_that_meets_a_lone_querys_implementation_keeps_its_filter`)."""
    ivf = fast_scan(first) if lone else None
    if ivf is None:
        yield
        return
    before = ivf.implem
    ivf.implem = SPLIT_PROBES
    try:
        yield
    finally:
        ivf.implem = before


@contextlib.contextmanager
def omp_threads(threads: int | None):
    """FAISS's OpenMP threads for this thread set to `threads` inside (None: unchanged), then
    back to what they were (the setting is per calling thread)."""
    before = faiss.omp_get_max_threads()
    if threads is None or threads == before:
        yield
        return
    faiss.omp_set_num_threads(threads)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


@dataclass(frozen=True)
class Also:
    """A second index scanned in the same pass as a first pass, over the same lists: a probed
    delta of `quantizer`'s base (module docstring).

    first: the delta's first-pass index (IVF, the base's centroids).
    wide: the candidates it keeps a query.
    quantizer: the base's coarse quantizer, which chooses the lists of both.
    """

    first: faiss.Index
    wide: int
    quantizer: faiss.Index


def run_both(
    first: faiss.Index,
    queries: np.ndarray,
    wide: int,
    params,
    also: Also,
    threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """`run` over `first` and over `also.first` with one choice of lists (`params`' nprobe):
    each index's candidates (internal positions, -1 missing). `threads`: the scans' OpenMP
    threads (None: the caller's); the lists are chosen on the caller's (FAISS's flat search
    of one query on two threads cost a lone 10M query 0.5 ms more and 3 ms more CPU)."""
    lists = also.quantizer.search(queries, int(params.nprobe))
    with omp_threads(threads):
        return (
            run(first, queries, wide, params, lists),
            run(also.first, queries, also.wide, params, lists),
        )


def run(first: faiss.Index, queries: np.ndarray, wide: int, params, assigned) -> np.ndarray:
    """The first pass's `wide` candidates (internal positions, -1 missing) of each query; over
    the lists already chosen when `assigned` (scores, lists) is given."""
    if assigned is None:
        return first.search(queries, wide, params=params)[1]
    return _preassigned(first, queries, wide, params, assigned)


def _preassigned(
    first: faiss.Index, queries: np.ndarray, wide: int, params, assigned
) -> np.ndarray:
    """The IVF first pass over lists already chosen (FAISS's `search_preassigned`, called
    with the parameters: its Python wrapper would need the index's own nprobe set, which
    threads searching one index must not change)."""
    ivf = faiss.extract_index_ivf(first)
    scores, lists = (np.ascontiguousarray(a) for a in assigned)
    n = len(queries)
    out_scores = np.empty((n, wide), np.float32)
    out_ids = np.empty((n, wide), np.int64)
    ivf.search_preassigned_c(  # type: ignore[attr-defined]  # the SWIG method under the wrapper
        n,
        faiss.swig_ptr(queries),
        wide,
        faiss.swig_ptr(lists),
        faiss.swig_ptr(scores),
        faiss.swig_ptr(out_scores),
        faiss.swig_ptr(out_ids),
        False,
        params,
    )
    return out_ids


@dataclass
class _Pass:
    """One caller's query (1, d), then its candidates (and its `Also` index's) or the error."""

    query: np.ndarray
    cand: np.ndarray | None = None
    also: np.ndarray | None = None  # the `Also` index's candidates, when one is scanned too
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Merged:
    """One searcher's first passes, run one at a time, each taking the waiting one-query passes
    with the same parameters (module docstring).

    Args:
        first: the first-pass index every pass searches.
        threads: `index.scan_threads` (`scan_threads`).
    """

    def __init__(self, first: faiss.Index, threads: int):
        self.first = first
        self.threads = threads
        self._running = threading.Lock()  # one pass at a time
        self._lock = threading.Lock()  # guards _waiting
        self._waiting: dict[tuple, list[_Pass]] = {}

    def _scan(self, queries: np.ndarray, wide: int, params, also: Also | None):
        """`run` (`run_both` with `also`) on the threads the cores allow now, a lone query's
        lists split over them. The caller holds `_running`: no other pass reads an index's
        implementation meanwhile (a writer's index has no `Merged`: FAISS would save the
        choice in its file)."""
        threads = scan_threads(self.threads)
        lone = len(queries) == 1 and threads > 1
        with split_probes(self.first, lone):
            if also is None:
                with omp_threads(threads):
                    return run(self.first, queries, wide, params, None)
            with split_probes(also.first, lone):
                return run_both(self.first, queries, wide, params, also, threads)

    def search(self, queries: np.ndarray, wide: int, params) -> np.ndarray:
        """`run`'s candidates for `queries`, merged with others' when it is one unfiltered
        query of an IVF first pass.

        Raises:
            Whatever FAISS raised on the pass that held this query.
        """
        nprobe = getattr(params, "nprobe", None)
        if len(queries) != 1 or nprobe is None or params.sel is not None:
            with self._running:
                return self._scan(queries, wide, params, None)
        mine = self._wait((wide, int(nprobe)), _Pass(queries), wide, params)
        assert mine.cand is not None
        return mine.cand

    def search_with(
        self, queries: np.ndarray, wide: int, params, also: Also
    ) -> tuple[np.ndarray, np.ndarray]:
        """`run_both`'s candidates for `queries` (this index's, `also`'s), one-query passes
        merged with others' of the same `also`: their lists chosen and both indexes scanned in
        one held pass.

        Raises:
            Whatever FAISS raised on the pass that held this query.
        """
        if len(queries) != 1 or params.sel is not None:
            with self._running:
                return self._scan(queries, wide, params, also)
        key = (wide, int(params.nprobe), id(also.first), also.wide)
        mine = self._wait(key, _Pass(queries), wide, params, also)
        assert mine.cand is not None and mine.also is not None
        return mine.cand, mine.also

    def _wait(self, key: tuple, mine: _Pass, wide: int, params, also: Also | None = None) -> _Pass:
        """`mine` queued under `key` until a pass (this caller's or another's) has run it."""
        with self._lock:
            self._waiting.setdefault(key, []).append(mine)
        while not mine.done.is_set():
            with self._running:
                if not mine.done.is_set():  # else a pass that ran meanwhile took it
                    self._merged(self._take(key), wide, params, also)
        if mine.error is not None:
            raise mine.error
        return mine

    def _take(self, key: tuple) -> list[_Pass]:
        """The oldest waiting passes of `key`, at most MAX_MERGED."""
        with self._lock:
            waiting = self._waiting.get(key, [])
            taken, rest = waiting[:MAX_MERGED], waiting[MAX_MERGED:]
            if rest:
                self._waiting[key] = rest
            else:
                self._waiting.pop(key, None)
        return taken

    def _merged(self, taken: list[_Pass], wide: int, params, also: Also | None) -> None:
        """One FAISS call for `taken` (their parameters are `params`'; `also` scanned too),
        each caller's rows handed back."""
        try:
            queries = np.concatenate([p.query for p in taken])
            found = self._scan(queries, wide, params, also)
            cand, more = found if also is not None else (found, None)
            for i, p in enumerate(taken):
                p.cand = cand[i : i + 1]
                if more is not None:
                    p.also = more[i : i + 1]
        except BaseException as exc:  # noqa: BLE001 - each caller raises it, as alone
            for p in taken:
                p.error = exc
        finally:
            for p in taken:
                p.done.set()
