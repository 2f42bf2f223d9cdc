"""The HTTP JSON API over one store (`bertindex serve`): the FastAPI app and its routes. The
model, FAISS and keyword indexes stay loaded, so a query costs only encode + search + fetch.
Does not start processes or listen (`search.workers`); the client is `search.client`.

Endpoints: `GET /` (the search page, `search/static/`), `GET /health`, `POST /search`,
`POST /facets`, the review page `/review` (`search.review_page`), the OpenAI-compatible
`POST /v1/embeddings` and `GET /v1/models` (`search.openai_routes`), `POST /rerank`
(`search.rerank_route`), the heads' `POST /predict` and `POST /annotate`
(`search.predict_routes`) and `GET /metrics` (`search.metrics`, which also counts every
request). Each route declares the scope
it needs (`search.access.needs`), checked before any route runs (`search.access`: Host, Origin,
tokens); the library's errors become statuses in one place (`search.error_map`). Bodies over
the configured size, POST bodies without a Content-Length and chunked ones are refused before
they are read (`search.body_limit`). Queries run side by side on a thread pool: each thread queries
the read-only store through its own DuckDB cursor, and onnxruntime, torch, FAISS and DuckDB release
the GIL while they compute. Searches do not write to the store (the review page does, one short
write each).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field

from indexer import __version__
from indexer.config import SearchConfig
from indexer.errors import InputError
from indexer.query.filters import parse_entities, parse_labels
from indexer.query.highlight import excerpt
from indexer.query.searcher import Searcher
from search.access import OPEN, AccessGuard, TokenBook, needs
from search.body_limit import MAX_BODY_BYTES, BodyLimit
from search.error_map import install as install_error_map
from search.metrics import MetricsMiddleware, ServerMetrics, add_metrics_route
from search.rerank_route import add_rerank_route, check_depth

if TYPE_CHECKING:  # torch loads only where heads are served: an ONNX query path never needs it
    from indexer.annotate.served import ServedHeads

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 4_000
MAX_K = 1_000
MAX_NAME_CHARS = 200  # a collection, metadata field or value, label or entity filter
MAX_FILTERS = 50  # entries of `where`, `labels`, `entities`
SearchMode = SearchConfig.model_fields["mode"].annotation  # the config's list of modes
# the page's files (package data); nothing else under static/ is served
STATIC_FILES = {
    "app.js": "text/javascript",
    "app.css": "text/css",
    "token.js": "text/javascript",
}  # token.js: both pages' token handling
PAGE_HEADERS = {  # the page runs only its own script: injected markup could not execute
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]


class Filters(BaseModel):
    """Filters shared by `POST /search` and `POST /facets`; unknown fields are refused (422)."""

    model_config = ConfigDict(extra="forbid")

    collection: str | None = Field(None, max_length=MAX_NAME_CHARS)
    where: dict[Name, Name] = Field(
        default_factory=dict,
        max_length=MAX_FILTERS,
        description="metadata field -> value; all must match",
    )
    labels: list[Name] = Field(
        default_factory=list,
        max_length=MAX_FILTERS,
        description="`HEAD=LABEL` from `bertindex annotate`; all must match",
    )
    entities: list[Name] = Field(
        default_factory=list,
        max_length=MAX_FILTERS,
        description="`TYPE` or `TYPE=TEXT`; all must match",
    )

    def parsed(self) -> dict:
        """Keyword arguments for `Searcher.search` / `store.filters.facet_counts` (InputError on a
        malformed label or entity string)."""
        return {
            "collection": self.collection,
            "where": list(self.where.items()),
            "labels": parse_labels(self.labels),
            "entities": parse_entities(self.entities),
        }


class SearchRequest(Filters):
    """The body of `POST /search`."""

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    k: int = Field(10, ge=1, le=MAX_K)
    offset: int = Field(0, ge=0, le=MAX_K, description="skip this many hits (the next page)")
    mode: SearchMode | None = None
    annotations: bool = Field(False, description="add each hit's labels and entities")
    highlight: bool = Field(
        False,
        description="add each hit's matching window and the spans of it that hold query words",
    )
    rerank: bool | None = Field(
        None,
        description="reorder the top hits with the server's pair "
        "head (`search.rerank`); None: as the server's config",
    )
    rerank_depth: int | None = Field(
        None, ge=1, le=MAX_K, description="hits the reranker reorders (None: `search.rerank_depth`)"
    )


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


def create_app(
    searcher: Searcher,
    max_body_bytes: int = MAX_BODY_BYTES,
    threads: int | None = None,
    *,
    bound: str | None = None,
    session_hash: str | None = None,
    undo_key: str | None = None,
    heads: ServedHeads | None = None,
):
    """The FastAPI application serving `searcher`.

    Args:
        searcher: a loaded Searcher. With its store open read-only, queries run side by side
            (one DuckDB cursor per thread); a writable store is queried one at a time.
        max_body_bytes: larger request bodies get 413 without being read.
        threads: CPU threads one query may use in torch and FAISS (None: as the calling
            thread).
        bound: the address `serve` bound (its Host is answered; None: loopback and the
            address each request arrived on only).
        session_hash: SHA-256 of the session token `serve` minted (None: none).
        undo_key: signs the review page's undo tickets; the same in every server process
            (None: a random one for this app).
        heads: the heads `POST /predict` and `POST /annotate` run (`serve --heads`; None:
            none, and both answer 404).
    Returns:
        The FastAPI app behind `search.access.AccessGuard`, wrapped in `BodyLimit`, wrapped
        in `search.metrics.MetricsMiddleware` (attributes reach the FastAPI app through all
        three).
    """
    from fastapi import FastAPI, HTTPException
    from fastapi.responses import Response

    # no /docs, /redoc or /openapi.json: the first two load scripts from a CDN, and every
    # route is described in docs/guides/server.md (search.access.route_table lists them)
    app = FastAPI(
        title="bertindex",
        description="Search one bertindex store.",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    install_error_map(app)
    app.state.searcher = searcher
    app.state.heads = heads
    store = searcher.store
    if store.read_only:
        store.share_across_threads()
        serial = contextlib.nullcontext()
    else:
        serial = threading.Lock()
    searcher.warm()  # model, keyword index and chunk map now, not on the first requests
    metrics = ServerMetrics.for_process()
    pin_threads = metrics.timed(thread_pinner(threads))  # + the queue wait (search.metrics)

    @app.get("/", include_in_schema=False, dependencies=[needs(OPEN)])
    def page() -> Response:
        """The search page."""
        return Response(
            _static("index.html"), media_type="text/html; charset=utf-8", headers=PAGE_HEADERS
        )

    @app.get("/static/{name}", include_in_schema=False, dependencies=[needs(OPEN)])
    def static(name: str) -> Response:
        if name not in STATIC_FILES:
            raise HTTPException(status_code=404, detail=f"no file {name!r}")
        return Response(
            _static(name), media_type=STATIC_FILES[name] + "; charset=utf-8", headers=PAGE_HEADERS
        )

    @app.get("/health", dependencies=[needs(OPEN)])
    def health() -> dict:
        """Liveness: `ok`, the bertindex version, the index version served, and what the
        search page offers (`rerank`: whether a pair head is configured, not which one).
        Open to anyone who reaches the server, so nothing about the store: no path, no
        counts."""
        settings = searcher.config.search
        return {
            "status": "ok",
            "version": __version__,
            "index_version": searcher.index.version if searcher.index is not None else None,
            "mode": settings.mode,
            "rerank": bool(settings.rerank),
            "rerank_depth": settings.rerank_depth,
        }

    @app.post("/search", dependencies=[needs("read")])
    def search(request: SearchRequest) -> Response:  # a plain def: FastAPI runs it on its pool
        """Top-k documents for one query (after `offset`); each hit is `SearchHit.to_dict`, as
        `bertindex search --json` prints it, and, when asked, `labels`, `entities`, `window`
        and `highlights`."""
        started = time.perf_counter()
        pin_threads()
        filters = request.parsed()
        check_rerank(request, searcher.config.search)
        with serial:
            hits = searcher.search(
                request.query,
                request.k + request.offset,
                mode=request.mode,
                **filters,
                rerank=None if request.rerank else request.rerank,
                rerank_depth=request.rerank_depth,
            )[request.offset :]
            found = (
                store.annotations.by_document([(h.collection, h.id) for h in hits])
                if request.annotations
                else {}
            )
        out = []
        for hit in hits:
            row = hit.to_dict()
            if request.annotations:
                row.update(found.get((hit.collection, hit.id), {"labels": [], "entities": []}))
            if request.highlight:
                row["window"], row["highlights"] = excerpt(
                    hit.text[hit.chunk_start : hit.chunk_end], request.query
                )
            out.append(row)
        body = {
            "hits": out,
            "offset": request.offset,
            "mode": request.mode or searcher.config.search.mode,
            "took_ms": round(1000 * (time.perf_counter() - started), 3),
        }
        # serialised here: FastAPI's own path (jsonable_encoder, then a response model check)
        # cost 0.5 ms of a 10 ms query and held the GIL other queries wait for
        return Response(json.dumps(body), media_type="application/json")

    @app.post("/facets", dependencies=[needs("read")])
    def facets(request: Filters) -> dict:
        """Documents per collection, label and entity type among those passing the filters."""
        filters = request.parsed()
        with serial:
            return store.filters.facet_counts(**filters)

    from search.openai_routes import add_openai_routes
    from search.predict_routes import add_predict_routes
    from search.review_page import add_review_routes

    add_openai_routes(app, searcher, pin_threads, metrics.count_embedded)  # /v1/embeddings ...
    add_metrics_route(app, metrics, searcher)  # /metrics (search/metrics.py)
    add_rerank_route(app, searcher, pin_threads)  # /rerank (TEI and Cohere shapes)
    add_predict_routes(app, heads, pin_threads)  # /predict, /annotate (`serve --heads`)

    write_lock = threading.Lock()  # one writer connection to the live store from this process
    add_review_routes(app, store.path, write_lock, undo_key)  # /review (search/review_page.py)
    book = TokenBook(
        store.path, session_hash, fallback=store.tokens.stored(), write_lock=write_lock
    )
    guard = AccessGuard(app, book, searcher.config.server.allowed_hosts, bound)
    return MetricsMiddleware(BodyLimit(guard, max_body_bytes), app, metrics)


def check_rerank(request: SearchRequest, settings: SearchConfig) -> None:
    """Refuse a rerank the server cannot or will not do: no reranker configured, or a depth
    above `search.rerank_max_depth` (a client must not choose the CPU a request costs)."""
    if request.rerank and not settings.rerank:
        raise InputError(
            "this server has no reranker: set search.rerank in its "
            "config.yaml to a pair head (`bertindex train rerank`)"
        )
    if request.rerank_depth is not None:
        check_depth(request.rerank_depth, settings, "rerank_depth")


def _static(name: str) -> bytes:
    return resources.files("search").joinpath("static", name).read_bytes()
