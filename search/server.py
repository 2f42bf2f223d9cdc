"""HTTP JSON API over one store (`bertindex serve`): the model, FAISS and keyword indexes stay
loaded, so a query costs only encode + search + fetch. Also the client (`remote_search`).

Endpoints: `GET /` (the search page, `search/static/`), `GET /health`, `POST /search`,
`POST /facets`, and the review page `/review` (`search.review_page`). Bodies over the
configured size, and POST bodies without a Content-Length, are refused before they are
read. Queries run side by side on a thread pool: each thread queries the read-only store
through its own DuckDB cursor, and onnxruntime, torch, FAISS and DuckDB release the GIL while
they compute. Searches do not write to the store (the review page does, one short write each).

Processes: `serve(settings, workers=N)` runs N server processes on one socket (uvicorn's
supervisor), each with its own copy of the model and indexes (`open_app`). One process's
threads cannot use 2 cores fully: the Python between the native calls holds the GIL (a
search in-process ran 1.72x faster on two threads than on one, 1.58x through HTTP); two
processes do not share it. `worker_count("auto")` picks one per core while the copies fit
in half the available memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from indexer.config import load_config
from indexer.errors import BertindexError, InputError, RemoteError
from search.filters import parse_entities, parse_labels
from search.highlight import excerpt
from search.query import Searcher, SearchHit

log = logging.getLogger(__name__)

DEFAULT_PORT = 8765
MAX_BODY_BYTES = 16_384  # a query of a few thousand characters plus filters fits easily
MAX_QUERY_CHARS = 4_000
MAX_K = 1_000
# the page's files (package data); nothing else under static/ is served
STATIC_FILES = {"app.js": "text/javascript", "app.css": "text/css"}
PAGE_HEADERS = {  # the page runs only its own script: injected markup could not execute
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; object-src 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


class Filters(BaseModel):
    """Filters shared by `POST /search` and `POST /facets`; unknown fields are refused (422)."""

    model_config = ConfigDict(extra="forbid")

    collection: str | None = None
    where: dict[str, str] = Field(default_factory=dict,
                                  description="metadata field -> value; all must match")
    labels: list[str] = Field(default_factory=list, max_length=50,
                              description="`HEAD=LABEL` from `bertindex annotate`; all must match")
    entities: list[str] = Field(default_factory=list, max_length=50,
                                description="`TYPE` or `TYPE=TEXT`; all must match")

    def parsed(self) -> dict:
        """Keyword arguments for `Searcher.search` / `Store.facet_counts` (InputError on a
        malformed label or entity string)."""
        return {"collection": self.collection, "where": list(self.where.items()),
                "labels": parse_labels(self.labels), "entities": parse_entities(self.entities)}


class SearchRequest(Filters):
    """The body of `POST /search`."""

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    k: int = Field(10, ge=1, le=MAX_K)
    offset: int = Field(0, ge=0, le=MAX_K, description="skip this many hits (the next page)")
    mode: Literal["dense", "keyword", "hybrid"] | None = None
    annotations: bool = Field(False, description="add each hit's labels and entities")
    highlight: bool = Field(False, description="add each hit's matching window and the spans "
                                               "of it that hold query words")


def _one_line(exc) -> str:
    """A request validation error as one line: `field: problem; field: problem`."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return "; ".join(parts) or "invalid request"


def thread_pinner(threads: int | None) -> Callable[[], None]:
    """A function that, called first thing in a worker thread, caps the OpenMP threads torch
    and FAISS use from that thread.

    `torch.set_num_threads` and `faiss.omp_set_num_threads` set the calling thread's OpenMP
    team size only: a query on one of FastAPI's pool threads otherwise forks a team of one
    thread per core whose spinning doubled the CPU a query cost (28 -> 17 ms on SciFact with
    the cap, `benchmarks/serve_latency.py`).

    Args:
        threads: the cap; None: what the calling (main) thread has now.
    """
    import faiss

    torch = sys.modules.get("torch")  # pinned only where the query path loaded it
    if threads is None:
        threads = torch.get_num_threads() if torch is not None else faiss.omp_get_max_threads()
    local = threading.local()

    def pin() -> None:
        if getattr(local, "threads", None) == threads:
            return
        if torch is not None:
            torch.set_num_threads(threads)
        faiss.omp_set_num_threads(threads)
        local.threads = threads

    return pin


def create_app(searcher: Searcher, max_body_bytes: int = MAX_BODY_BYTES,
               threads: int | None = None):
    """The FastAPI application serving `searcher`.

    Args:
        searcher: a loaded Searcher. With its store open read-only, queries run side by side
            (one DuckDB cursor per thread); a writable store is queried one at a time.
        max_body_bytes: larger request bodies get 413 without being read.
        threads: CPU threads one query may use in torch and FAISS (None: as the calling
            thread).
    """
    from fastapi import FastAPI, HTTPException
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response

    app = FastAPI(title="bertindex", description="Search one bertindex store.")
    app.state.searcher = searcher
    store = searcher.store
    if store.read_only:
        store.share_across_threads()
        serial = contextlib.nullcontext()
    else:
        serial = threading.Lock()
    searcher.warm()  # model, keyword index and chunk map now, not on the first requests
    pin_threads = thread_pinner(threads)

    @app.exception_handler(RequestValidationError)
    async def invalid(request, exc) -> JSONResponse:
        return JSONResponse({"detail": _one_line(exc)}, status_code=422)

    @app.get("/", include_in_schema=False)
    def page() -> Response:
        """The search page."""
        return Response(_static("index.html"), media_type="text/html; charset=utf-8",
                        headers=PAGE_HEADERS)

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in STATIC_FILES:
            raise HTTPException(status_code=404, detail=f"no file {name!r}")
        return Response(_static(name), media_type=STATIC_FILES[name] + "; charset=utf-8",
                        headers=PAGE_HEADERS)

    @app.get("/health")
    def health() -> dict:
        """Liveness and what is loaded."""
        ntotal = searcher.index.ntotal if searcher.index is not None else 0
        return {"status": "ok", "store": str(store.path), "vectors": ntotal,
                "mode": searcher.config.search.mode}

    @app.post("/search")
    def search(request: SearchRequest) -> Response:  # a plain def: FastAPI runs it on its pool
        """Top-k documents for one query (after `offset`); each hit has the fields of
        `bertindex search --json`, its side scores (`dense`, `keyword`) and, when asked,
        `labels`, `entities`, `window` and `highlights`."""
        started = time.perf_counter()
        pin_threads()
        try:
            filters = request.parsed()
            with serial:
                hits = searcher.search(request.query, request.k + request.offset,
                                       mode=request.mode, **filters)[request.offset:]
                found = _annotations(store, hits) if request.annotations else {}
        except InputError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        except BertindexError as exc:
            raise HTTPException(status_code=500, detail=str(exc)) from None
        out = []
        for hit in hits:
            row = hit.to_dict()
            if request.annotations:
                row.update(found.get((hit.collection, hit.id), {"labels": [], "entities": []}))
            if request.highlight:
                row["window"], row["highlights"] = excerpt(
                    hit.text[hit.chunk_start:hit.chunk_end], request.query)
            out.append(row)
        body = {"hits": out, "offset": request.offset,
                "mode": request.mode or searcher.config.search.mode,
                "took_ms": round(1000 * (time.perf_counter() - started), 3)}
        # serialised here: FastAPI's own path (jsonable_encoder, then a response model check)
        # cost 0.5 ms of a 10 ms query and held the GIL other queries wait for
        return Response(json.dumps(body), media_type="application/json")

    @app.post("/facets")
    def facets(request: Filters) -> dict:
        """Documents per collection, label and entity type among those passing the filters."""
        try:
            filters = request.parsed()
            with serial:
                return store.facet_counts(**filters)
        except InputError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        except BertindexError as exc:
            raise HTTPException(status_code=500, detail=str(exc)) from None

    from search.review_page import add_review_routes

    add_review_routes(app, searcher.store.path)  # /review (search/review_page.py)
    return _BodyLimit(app, max_body_bytes)


SETTINGS_ENV = "BERTINDEX_SERVE_SETTINGS"  # how `serve` hands its settings to each process
MAX_AUTO_WORKERS = 4
WORKER_OVERHEAD_BYTES = 300 << 20  # Python, onnxruntime, DuckDB, tantivy: measured ~250 MB


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    """What each server process opens: `config_path` (None: defaults) with `store.path`
    set to `store_path`, and the app's limits."""

    config_path: str | None
    store_path: str
    threads: int = 1
    max_body_bytes: int = MAX_BODY_BYTES


def open_app(settings: ServeSettings):
    """Load the configuration, open the store read-only, load the Searcher and return the
    app (one per server process; the store stays open for the process's life).

    Raises:
        BertindexError: the store, index or model cannot be opened (before any listening).
    """
    import faiss

    from indexer.store import Store

    faiss.omp_set_num_threads(settings.threads)
    config = load_config(settings.config_path).with_overrides(
        **{"store.path": settings.store_path})
    store = Store(config.store.path, read_only=True)
    try:
        store.set_threads(settings.threads)
        return create_app(Searcher(config, store), settings.max_body_bytes, settings.threads)
    except BaseException:
        store.close()
        raise


def app_from_environment():
    """`open_app` with the settings `serve` left in SETTINGS_ENV: the factory each worker
    process of a multi-process server imports."""
    return open_app(ServeSettings(**json.loads(os.environ[SETTINGS_ENV])))


def worker_count(requested: int | str, app) -> int:
    """Server processes for `--workers`: a number as given; `auto`, one per core (at most
    MAX_AUTO_WORKERS) while that many copies of this app's indexes and model fit in half of
    the available memory, else fewer, at least one.

    Args:
        app: an app from `open_app`, whose searcher's sizes are counted.
    """
    if requested != "auto":
        return int(requested)
    searcher = app.app.state.searcher
    each = WORKER_OVERHEAD_BYTES + _loaded_bytes(searcher)
    cores = os.cpu_count() or 1
    fit = int(_available_memory() // 2 // each)
    return max(1, min(cores, MAX_AUTO_WORKERS, fit))


def _loaded_bytes(searcher: Searcher) -> int:
    """What one process keeps in memory for `searcher`: the vector index file(s) and the
    query model file."""
    from indexer.versions import version_dir

    total = 0
    index = searcher.index
    if index is not None:
        folder = (version_dir(searcher.store.path, index.version) if index.version
                  else searcher.store.path)
        total += sum(f.stat().st_size for f in folder.glob("*.faiss"))
    model_file = getattr(searcher.encoder, "model_file", None)
    if model_file is not None:
        total += model_file.stat().st_size
    return total


def _available_memory() -> int:
    """MemAvailable from /proc/meminfo; elsewhere, physical memory."""
    with contextlib.suppress(OSError, ValueError):
        for line in open("/proc/meminfo"):  # noqa: SIM115 - a short read
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def serve(settings: ServeSettings, host: str, port: int, workers: int | str = 1,
          announce=lambda message: None) -> None:
    """Serve until stopped: one process, or `workers` processes on one socket.

    The settings are checked in this process first (store, index, model), so a bad store
    fails here with its message instead of in every worker.
    """
    import uvicorn

    app = open_app(settings)
    count = worker_count(workers, app)
    announce(f"serving {settings.store_path} on http://{host}:{port}"
             + (f" ({count} processes)" if count > 1 else ""))
    if count == 1:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
        return
    app.app.state.searcher.store.close()
    del app
    os.environ[SETTINGS_ENV] = json.dumps(dataclasses.asdict(settings))
    uvicorn.run("search.server:app_from_environment", factory=True, workers=count, host=host,
                port=port, log_level="warning", access_log=False)


def _static(name: str) -> bytes:
    return resources.files("search").joinpath("static", name).read_bytes()


def _annotations(store, hits: Sequence[SearchHit]) -> dict:
    """{(collection, id): {"labels", "entities"}} of the hits (empty for an old store)."""
    from indexer.store.annotations import annotations_by_document, has_annotations

    if not hits or not has_annotations(store):
        return {}
    return annotations_by_document(store, [(h.collection, h.id) for h in hits])


class _BodyLimit:
    """ASGI middleware: 413 for a declared body over the limit, 411 for a POST without one."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    def __getattr__(self, name):  # TestClient and uvicorn only need the ASGI call
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        status = None
        if length is None and scope["method"] in ("POST", "PUT", "PATCH"):
            status, detail = 411, "send a Content-Length header"
        elif length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            status, detail = 413, f"request body over {self.max_bytes} bytes"
        if status is None:
            return await self.app(scope, receive, send)
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def remote_search(url: str, query: str, k: int = 10, collection: str | None = None,
                  where: Sequence[tuple[str, str]] = (), mode: str | None = None,
                  timeout: float = 30.0, *, labels: Sequence[tuple[str, str]] = (),
                  entities: Sequence[tuple[str, str | None]] = ()) -> list[SearchHit]:
    """Ask a running `bertindex serve` at `url` (e.g. http://127.0.0.1:8765).

    Raises:
        RemoteError: the server is unreachable or answered with an error.
    """
    payload = {"query": query, "k": k, "collection": collection, "where": dict(where),
               "mode": mode, "labels": [f"{h}={lb}" for h, lb in labels],
               "entities": [t if x is None else f"{t}={x}" for t, x in entities]}
    data = json.dumps(payload).encode()
    request = urllib.request.Request(url.rstrip("/") + "/search", data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:500]
        raise RemoteError(f"server {url} answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RemoteError(f"cannot reach {url} ({exc}); start a server with `bertindex serve "
                          "--store DIR` or drop --server") from None
    names = {f.name for f in dataclasses.fields(SearchHit)}
    return [SearchHit(**{key: value for key, value in h.items() if key in names})
            for h in answer["hits"]]
