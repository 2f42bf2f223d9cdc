"""HTTP JSON API over one store (`bertindex serve`): the model, FAISS and keyword indexes stay
loaded, so a query costs only encode + search + fetch. Also the client (`remote_search`).

Endpoints: `GET /health`, `POST /search`, and the review page `/review` (`search.review_page`).
Bodies over the configured size, and POST bodies without a Content-Length, are refused before
they are read. Searches do not write to the store (the review page does, one short write each).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from indexer.errors import BertindexError, InputError, RemoteError
from search.query import Searcher, SearchHit

log = logging.getLogger(__name__)

DEFAULT_PORT = 8765
MAX_BODY_BYTES = 16_384  # a query of a few thousand characters plus filters fits easily
MAX_QUERY_CHARS = 4_000
MAX_K = 1_000


class SearchRequest(BaseModel):
    """The body of `POST /search`; unknown fields are refused (422)."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    k: int = Field(10, ge=1, le=MAX_K)
    mode: Literal["dense", "keyword", "hybrid"] | None = None
    collection: str | None = None
    where: dict[str, str] = Field(default_factory=dict,
                                  description="metadata field -> value; all must match")


def create_app(searcher: Searcher, max_body_bytes: int = MAX_BODY_BYTES):
    """The FastAPI application serving `searcher`.

    Args:
        searcher: a loaded Searcher (its store open read-only).
        max_body_bytes: larger request bodies get 413 without being read.
    """
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="bertindex", description="Search one bertindex store.")
    lock = threading.Lock()  # one DuckDB connection and one torch model: one query at a time
    searcher.encoder  # load the model now, not on the first request  # noqa: B018

    @app.get("/health")
    def health() -> dict:
        """Liveness and what is loaded."""
        ntotal = searcher.index.ntotal if searcher.index is not None else 0
        return {"status": "ok", "store": str(searcher.store.path), "vectors": ntotal,
                "mode": searcher.config.search.mode}

    @app.post("/search")
    async def search(request: SearchRequest) -> dict:  # inline: no thread hop, one at a time
        """Top-k documents for one query; the same fields as `bertindex search --json`."""
        started = time.perf_counter()
        try:
            with lock:
                hits = searcher.search(request.query, request.k, request.collection,
                                       list(request.where.items()), request.mode)
        except InputError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        except BertindexError as exc:
            raise HTTPException(status_code=500, detail=str(exc)) from None
        return {"hits": [h.to_dict() for h in hits],
                "took_ms": round(1000 * (time.perf_counter() - started), 3)}

    from search.review_page import add_review_routes

    add_review_routes(app, searcher.store.path)  # /review (search/review_page.py)
    return _BodyLimit(app, max_body_bytes)


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
                  timeout: float = 30.0) -> list[SearchHit]:
    """Ask a running `bertindex serve` at `url` (e.g. http://127.0.0.1:8765).

    Raises:
        RemoteError: the server is unreachable or answered with an error.
    """
    payload = {"query": query, "k": k, "collection": collection, "where": dict(where),
               "mode": mode}
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
    return [SearchHit(**h) for h in answer["hits"]]
