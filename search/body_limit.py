"""ASGI middleware that refuses a request body before it is read: a declared length over the
limit (413), a POST, PUT or PATCH without a Content-Length (411), and any request sent with
`Transfer-Encoding` (chunked; 411 too), answered through `search.error_map`. Does not count
the bytes of a body it lets through: the declared length is what the server reads.

A chunked body is refused rather than counted: its size is known only once read, so counting
would mean buffering every body here (or cutting a route's read short mid-parse), while every
client of this API (the pages' fetch, `search.client`, curl -d) sends a JSON body of a few KB
with its length. Refusing it whatever else the request says also settles a request that
declares both a Content-Length and chunked encoding (the smuggling case): neither is trusted.
"""

from __future__ import annotations

from search.error_map import LengthRequired, TooLarge, error_response

MAX_BODY_BYTES = 16_384  # a query of a few thousand characters plus filters fits easily
BODY_METHODS = ("POST", "PUT", "PATCH")  # methods whose body must declare its length


class BodyLimit:
    """Wraps an ASGI app; answers over-limit and length-less bodies itself.

    Args:
        app: the ASGI application (the FastAPI app of `search.server`).
        max_bytes: the largest Content-Length let through.
    """

    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES):
        self.app = app
        self.max_bytes = max_bytes

    def __getattr__(self, name):  # TestClient and uvicorn only need the ASGI call
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        refusal = None
        if b"transfer-encoding" in headers:
            refusal = LengthRequired(
                "send the body with a Content-Length header, not "
                "Transfer-Encoding (chunked bodies are not read)"
            )
        elif length is None and scope["method"] in BODY_METHODS:
            refusal = LengthRequired("send a Content-Length header")
        elif length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            refusal = TooLarge(f"request body over {self.max_bytes} bytes")
        if refusal is None:
            return await self.app(scope, receive, send)
        await error_response(refusal)(scope, receive, send)
