"""The review page of `bertindex serve` (`/review`): one document at a time with the head's
label and score, a button (and a key) per label, skip and undo. A label is stored as `bertindex
review import` stores a row (`indexer.review.loop.page_review`: the same checks, one row
appended to the review history, `source` = `page`; under tokens `who` = the token's name);
undo deletes the row it just wrote. The head is chosen from the store's (`/review/api/heads`).
Each route declares the scope it needs (`search.access.needs`); the check runs before the route.

Each write opens the live store for the moment it takes (one writer at a time); while another
process writes (`bertindex index`, `annotate`) the page answers 409 (`search.error_map`) and
the click can be retried. The page builds every element with `textContent`, so document text is
never markup, and a Content-Security-Policy allows only its own script and style. Searches see
page labels after the next published snapshot (any `index`, `annotate` or `review import` run).
"""

from __future__ import annotations

import threading
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from indexer.errors import InputError
from search.access import OPEN, Caller, needs  # Caller at module level: FastAPI resolves it by name

STATIC = Path(__file__).parent / "static"
PAGE_FILES = {"review.html": "text/html; charset=utf-8", "review.js": "text/javascript",
              "review.css": "text/css"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
MAX_SKIPPED = 5_000


class LabelRequest(BaseModel):
    """Body of `POST /review/api/label`."""

    model_config = ConfigDict(extra="forbid")
    head: str = Field(min_length=1, max_length=200)
    doc_id: int
    label: str = Field(min_length=1, max_length=200)
    reviewer: str | None = Field(None, max_length=200)


class UndoRequest(BaseModel):
    """Body of `POST /review/api/undo`."""

    model_config = ConfigDict(extra="forbid")
    head: str = Field(min_length=1, max_length=200)
    review_id: int


def add_review_routes(app, store_path: str | Path, lock: threading.Lock | None = None) -> None:
    """Add `/review` and its JSON API to a FastAPI app.

    Args:
        app: the server's FastAPI application, with `search.error_map` installed (the routes
            raise the library's errors).
        store_path: the store directory (its live `store.duckdb` is written).
        lock: held around each connection to the live store (None: a new one); the server
            shares it with what else of it writes there (a token's last use).
    """
    from fastapi import HTTPException, Query
    from fastapi.responses import Response

    from indexer.review.loop import page_review, select_for_review
    from indexer.review.strategies import STRATEGIES
    from indexer.store import Store

    lock = lock or threading.Lock()  # one writer connection at a time from this process

    def static(name: str) -> Response:
        body = (STATIC / name).read_bytes()
        return Response(body, media_type=PAGE_FILES[name],
                        headers={"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                                 "Cache-Control": "no-store"})

    @app.get("/review", include_in_schema=False, dependencies=[needs(OPEN)])
    def review_page() -> Response:
        return static("review.html")

    @app.get("/review/static/{name}", include_in_schema=False, dependencies=[needs(OPEN)])
    def review_static(name: str) -> Response:
        if name not in PAGE_FILES:
            raise HTTPException(status_code=404, detail="no such file")
        return static(name)

    @app.get("/review/api/heads", dependencies=[needs("read")])
    def heads() -> dict:
        """The heads `annotate` recorded in the store, for the page's choice of head."""
        with lock, Store(store_path) as store:
            return {"heads": store.reviews.known_heads()}

    @app.get("/review/api/next", dependencies=[needs("read")])
    def next_document(head: str = Query(min_length=1, max_length=200),
                      strategy: str = Query("uncertain"), collection: str | None = None,
                      skip: str = Query("", max_length=100_000)) -> dict:
        """The next document to label for `head` (None when none is left), its head's labels."""
        if strategy not in STRATEGIES or strategy == "disagree":
            raise InputError(f"strategy '{strategy}': the page takes uncertain, margin or random")
        try:
            skipped = {int(x) for x in skip.split(",") if x.strip()}
        except ValueError:
            raise InputError("skip: comma-separated doc ids") from None
        if len(skipped) > MAX_SKIPPED:
            raise InputError(f"more than {MAX_SKIPPED} skipped")
        with lock, Store(store_path) as store:
            rows = select_for_review(store, head, strategy, n=len(skipped) + 1,
                                     collection=collection)
            info = store.reviews.head_info(head)
            reviewed = store.reviews.count(head)
        row = next((r for r in rows if r["doc_id"] not in skipped), None)
        return {"head": head, "labels": info.label_names, "reviewed": reviewed,
                "document": row and {k: row[k] for k in ("doc_id", "id", "collection", "title",
                                                        "text", "predicted", "score")}}

    @app.post("/review/api/label")
    def label_document(request: LabelRequest, caller: Caller | None = needs("review")) -> dict:
        """Store a person's label, as `review import` would; returns the review id for undo.
        Under tokens the token's name is stored as who made it."""
        with lock, Store(store_path) as store:
            review_id = page_review(store, request.head, request.doc_id, request.label,
                                    request.reviewer or None,
                                    caller.name if caller is not None else None)
        return {"review_id": review_id}

    @app.post("/review/api/undo", dependencies=[needs("review")])
    def undo(request: UndoRequest) -> dict:
        """Delete the review row the page wrote last."""
        with lock, Store(store_path) as store:
            return {"undone": store.reviews.delete(request.head, request.review_id)}
