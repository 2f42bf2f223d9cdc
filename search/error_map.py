"""The server's one error map: which exception answers with which HTTP status (`STATUS`), and
the `{"detail": message}` body every error answer has. Routes raise the library's errors
(`indexer.errors`) and never translate them; `install` makes them FastAPI exception handlers.
The checks that run before any route (`search.access`, `search.body_limit`) refuse with the
`Refusal` classes below, answered through the same map.

A remote caller is never told who holds the store's writer lock (`StoreBusy` names the pid
and command line): it gets BUSY_DETAIL, and the detail is logged here at INFO; the CLI prints
the full message locally. Exceptions outside the map (a bug) stay FastAPI's plain 500. Imports no
web framework at module level: the CLI loads `search.body_limit` at start.

The OpenAI-compatible routes (`/v1/...`, `search.openai_routes`) answer their own refusals and
invalid bodies in OpenAI's shape instead, `{"error": {"message", "type", "param", "code"}}`, with
400 where the rest of the API says 422: that is what the clients written for OpenAI read.
"""

from __future__ import annotations

import logging

from indexer.errors import BertindexError, InputError, StoreBusy, StoreError

log = logging.getLogger(__name__)

BUSY_DETAIL = "the store is being written by another bertindex process; try again in a moment"
RETRY_HINT = " (try again in a moment)"  # ends the detail of a 409


class Refusal(Exception):
    """A request refused before any route ran; `headers` go with the answer."""

    headers: dict[str, str] = {}


class Unauthenticated(Refusal):
    """No token, or one the server does not accept."""

    headers = {"WWW-Authenticate": 'Bearer realm="bertindex"'}


class Forbidden(Refusal):
    """A foreign Host or Origin, or a token whose scope is below the route's."""


class LengthRequired(Refusal):
    """A body sent without a Content-Length (it would be read unbounded)."""

    headers = {"Connection": "close"}


class TooLarge(Refusal):
    """A body declared larger than the server reads."""

    headers = {"Connection": "close"}


class OpenAIError(Exception):
    """A refusal of an OpenAI-compatible route, answered in OpenAI's error shape.

    Args:
        status: the HTTP status.
        message: what is wrong and what to send instead.
        param: the request field at fault (None: none in particular).
        code: OpenAI's machine-readable code (`model_not_found`, ...; None: none).
    """

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    def response(self):
        from starlette.responses import JSONResponse

        kind = "invalid_request_error" if self.status < 500 else "server_error"
        body = {"message": str(self), "type": kind, "param": self.param, "code": self.code}
        return JSONResponse({"error": body}, status_code=self.status)


class NotFound(Exception):
    """A route's resource is not on this server (e.g. no reranker configured)."""


OPENAI_PREFIX = "/v1/"  # the routes whose errors are OpenAIError's shape


# the most specific class of an exception that is listed decides
STATUS: dict[type[Exception], int] = {
    InputError: 400,  # the request's own fault: a malformed filter, an unknown head or label
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    StoreError: 409,  # another process writes the store: the same request may pass later
    LengthRequired: 411,
    TooLarge: 413,
    BertindexError: 500,  # what else the library names: a damaged index, a model that won't load
}


def status_of(exc: Exception) -> int:
    """The status `exc` answers with: its own class's, else its nearest base class's in
    `STATUS`, else 500."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_response(exc: Exception):
    """The answer to `exc`: its status, `{"detail": message}` and the refusal's headers; a
    Starlette response, itself an ASGI app the checks before routing call directly."""
    from starlette.responses import JSONResponse

    status = status_of(exc)
    if isinstance(exc, StoreBusy):
        log.info("answered 409: %s", exc)
        detail = BUSY_DETAIL
    else:
        detail = str(exc) + (RETRY_HINT if status == 409 else "")
    return JSONResponse(
        {"detail": detail}, status_code=status, headers=getattr(exc, "headers", None)
    )


def install(app) -> None:
    """Answer every exception class of `STATUS` raised in a route through `error_response`,
    request validation errors as 422 with one line naming each field's problem (400 in
    OpenAI's shape under `OPENAI_PREFIX`), and `OpenAIError` in its shape.

    Args:
        app: a FastAPI app.
    """
    from fastapi.exceptions import RequestValidationError
    from starlette.responses import JSONResponse

    async def mapped(request, exc):
        return error_response(exc)

    async def invalid(request, exc):
        if request.url.path.startswith(OPENAI_PREFIX):
            first = next(iter(exc.errors()), {})
            param = next((str(x) for x in first.get("loc", ()) if x != "body"), None)
            return OpenAIError(400, _one_line(exc), param).response()
        return JSONResponse({"detail": _one_line(exc)}, status_code=422)

    async def openai(request, exc):
        return exc.response()

    for cls in STATUS:
        app.add_exception_handler(cls, mapped)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(OpenAIError, openai)


def _one_line(exc) -> str:
    """A request validation error as one line: `field: problem; field: problem`."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return "; ".join(parts) or "invalid request"
