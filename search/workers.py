"""Server processes of `bertindex serve`: the settings each process opens its app with, how
many processes fit (`worker_count`), and `serve`, which runs one process or N on one socket
(uvicorn's supervisor). The app itself and its routes are `search.server`.

Each process has its own copy of the model, the heads and the keyword index (`open_app`);
the vector index's file is mapped, one copy in the page cache for all of them. One process's
threads cannot use 2 cores fully: the Python between the native calls holds the GIL (a search
in-process ran 1.72x faster on two threads than on one, 1.58x through HTTP); two processes do
not share it. `worker_count("auto")` picks one per core while they fit in half the available
memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from indexer.config import load_config
from search.body_limit import MAX_BODY_BYTES

if TYPE_CHECKING:
    from indexer.query.searcher import Searcher

SETTINGS_ENV = "BERTINDEX_SERVE_SETTINGS"  # how `serve` hands its settings to each process
APP_FACTORY = "search.workers:app_from_environment"  # what uvicorn imports in each process
MAX_AUTO_WORKERS = 4
DEFAULT_THREADS = 1  # CPU threads one query may use (`serve --threads`)
WORKER_OVERHEAD_BYTES = 300 << 20  # Python, onnxruntime, DuckDB, tantivy: measured ~250 MB


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    """What each server process opens: `config_path` (None: defaults) with `store.path`
    set to `store_path`, and the app's limits (`threads`: CPU threads one query may use;
    `max_body_bytes`: larger request bodies are refused), the address bound (`host`, whose
    name the server answers), the SHA-256 of `serve`'s session token (`session_hash`; the
    token itself never reaches the workers) and the key every process signs the review page's
    undo tickets with (`undo_key`: random per `serve`, so a ticket from one worker is good in
    another and none outlives the server), and the heads `POST /predict` and `POST /annotate`
    run (`heads`: `NAME=DIR` each, as `bertindex annotate --heads` takes them; each process
    loads them)."""

    config_path: str | None
    store_path: str
    threads: int = DEFAULT_THREADS
    max_body_bytes: int = MAX_BODY_BYTES
    host: str | None = None
    session_hash: str | None = None
    undo_key: str | None = None
    heads: tuple[str, ...] = ()


def open_app(settings: ServeSettings):
    """Load the configuration, open the store read-only, load the Searcher and the served
    heads, and return the app (one per server process; the store stays open for the
    process's life).

    Args:
        settings: what to open and the app's limits.
    Returns:
        The ASGI app of `search.server.create_app`.
    Raises:
        BertindexError: the store, index, model or a head cannot be opened (before any
            listening).
    """
    import faiss  # the model, FAISS and the store load here, not when the CLI starts

    from indexer.query.searcher import Searcher
    from indexer.store import Store
    from search.server import create_app

    faiss.omp_set_num_threads(settings.threads)
    config = load_config(settings.config_path).with_overrides(**{"store.path": settings.store_path})
    store = Store(config.store.path, read_only=True)
    try:
        store.set_threads(settings.threads)
        heads = None
        if settings.heads:
            from indexer.annotate.served import ServedHeads

            heads = ServedHeads.load(settings.heads, config)
        return create_app(
            Searcher(config, store),
            settings.max_body_bytes,
            settings.threads,
            bound=settings.host,
            session_hash=settings.session_hash,
            undo_key=settings.undo_key,
            heads=heads,
        )
    except BaseException:
        store.close()
        raise


def app_from_environment():
    """`open_app` with the settings `serve` left in SETTINGS_ENV: the factory each worker
    process of a multi-process server imports (APP_FACTORY).

    Returns:
        The process's app.
    """
    fields = json.loads(os.environ[SETTINGS_ENV])
    return open_app(ServeSettings(**{**fields, "heads": tuple(fields["heads"])}))


def worker_count(requested: int | str, app) -> int:
    """Server processes for `--workers`: a number as given; `auto`, one per core (at most
    MAX_AUTO_WORKERS) while that many processes fit in half of the available memory (each
    with what it keeps for itself: the model, the heads, the private part of the vector
    index), else fewer, at least one. The mapped part of the index is not counted: it is page
    cache that every process shares, whatever their number, and that the kernel evicts as
    it needs (a 10M index's 16 GB file must not make a 24 GB machine serve one process).

    Args:
        requested: a number of processes, or `auto`.
        app: an app from `open_app`, whose searcher's sizes are counted.
    Returns:
        The number of processes to run.
    """
    if requested != "auto":
        return int(requested)
    state = app.app.state
    private, _ = _loaded_bytes(state.searcher)
    each = WORKER_OVERHEAD_BYTES + private + _heads_bytes(state.heads)
    cores = os.cpu_count() or 1
    fit = int((_available_memory() // 2) // each)
    return max(1, min(cores, MAX_AUTO_WORKERS, fit))


def _loaded_bytes(searcher: Searcher) -> tuple[int, int]:
    """(bytes each process keeps for itself, bytes the processes share) for `searcher`: the
    query model file and the vector index's files (`VectorIndex.footprint`: the delta and a
    mapped base's resident part private, the rest of the base shared)."""
    private, shared = searcher.index.footprint() if searcher.index is not None else (0, 0)
    model_file = getattr(searcher.encoder, "model_file", None)
    if model_file is not None:
        private += model_file.stat().st_size
    return private, shared


def _heads_bytes(heads) -> int:
    """The weight files of the served heads (`ServedHeads`; None: none)."""
    from indexer.records.provenance import weight_files

    if heads is None:
        return 0
    return sum(f.stat().st_size for h in heads.heads.values() for f in weight_files(h.path))


def _available_memory() -> int:
    """MemAvailable from /proc/meminfo; elsewhere, physical memory."""
    with contextlib.suppress(OSError, ValueError):
        for line in open("/proc/meminfo"):  # noqa: SIM115 - a short read
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def serve(
    settings: ServeSettings,
    host: str,
    port: int,
    workers: int | str = 1,
    announce: Callable[[str], None] = lambda message: None,
    tls: tuple[str, str] | None = None,
) -> None:
    """Serve until stopped: one process, or `workers` processes on one socket.

    The settings are checked in this process first (store, index, model), so a bad store
    fails here with its message instead of in every worker.

    Args:
        settings: what each process opens.
        host: the address to bind.
        port: the TCP port.
        workers: a number of processes, or `auto` (`worker_count`).
        announce: called with one line once the app is loaded, before listening.
        tls: (certificate file, key file), PEM: serve https (uvicorn's ssl_certfile and
            ssl_keyfile; each worker process loads them). None: plain http.
    Raises:
        BertindexError: the store, index or model cannot be opened.
    """
    import uvicorn

    from search.metrics import multiprocess_dir

    # OpenMP threads sleep once a parallel region ends instead of spinning for the next (read
    # when FAISS loads, here and in each worker): a query whose scan took the idle cores
    # (`index.scan_threads`) otherwise left a thread spinning on a core another query wants,
    # 8 ms of CPU a 10M query for nothing (`benchmarks/scan_threads.py`)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    app = open_app(settings)
    count = worker_count(workers, app)
    scheme = "https" if tls else "http"
    announce(
        f"serving {settings.store_path} on {scheme}://{host}:{port}"
        + (f" ({count} processes)" if count > 1 else "")
    )
    options = {"host": host, "port": port, "log_level": "warning", "access_log": False}
    if tls:
        options.update(ssl_certfile=tls[0], ssl_keyfile=tls[1])
    if count == 1:
        uvicorn.run(app, **options)
        return
    # the workers open their own: this process keeps none of the index (a fast-scan base
    # read into memory is 1.1 GB at 10M) — the app's closures hold the searcher in a cycle
    # that only the collector frees, and the heap returns freed blocks only when trimmed
    searcher = app.app.state.searcher
    searcher.release()  # its encoder too: the app's routes hold that on (FastAPI's caches)
    del app, searcher
    gc.collect()
    _trim_heap()
    os.environ[SETTINGS_ENV] = json.dumps(dataclasses.asdict(settings))
    with multiprocess_dir():  # the workers' metrics, merged by each scrape (search.metrics)
        uvicorn.run(APP_FACTORY, factory=True, workers=count, **options)


def _trim_heap() -> None:
    """Give the C heap's free memory back to the system (glibc `malloc_trim`; elsewhere
    nothing)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
