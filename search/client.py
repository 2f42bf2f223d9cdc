"""HTTP client of `bertindex serve` (`bertindex search --server URL`): one `POST /search`,
the answer read back as `SearchHit`s. Standard library only (plus the typed errors): asking a
server loads no model, index or store here. Does not retry.

An https server's certificate is verified against the system's CAs, or a CA file given
(`--ca-cert`, $BERTINDEX_CA_CERT: e.g. a private CA's). The token goes in an
`Authorization` header that is never forwarded on a redirect to another origin (scheme, host
or port): urllib would otherwise copy it to wherever the server points.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence

from indexer.errors import RemoteError
from indexer.query.hits import SearchHit

DEFAULT_PORT = 8765  # where `bertindex serve` listens unless --port says otherwise
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
DETAIL_CHARS = 500  # of an error answer, quoted in the RemoteError
TOKEN_ENV = "BERTINDEX_TOKEN"  # where `search --server` finds a token unless --token-file says
CA_CERT_ENV = "BERTINDEX_CA_CERT"  # a CA file to verify an https server with (`--ca-cert`)
AUTH_HINTS = {401: f"; give a token in ${TOKEN_ENV} or --token-file (`bertindex token create`)"}


class SameOriginAuth(urllib.request.HTTPRedirectHandler):
    """Follows redirects as urllib does, carrying the Authorization header only to the same
    origin: it is added as an unredirected header, which urllib never copies, and put back
    here when the new address has the old one's scheme, host and port."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        auth = req.unredirected_hdrs.get("Authorization")
        if new is not None and auth and _origin(newurl) == _origin(req.full_url):
            new.add_unredirected_header("Authorization", auth)
        return new


def _origin(url: str) -> tuple:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


def remote_search(
    url: str,
    query: str,
    k: int = 10,
    collection: str | None = None,
    where: Sequence[tuple[str, str]] = (),
    mode: str | None = None,
    timeout: float = 30.0,
    *,
    labels: Sequence[tuple[str, str]] = (),
    entities: Sequence[tuple[str, str | None]] = (),
    token: str | None = None,
    ca_cert: str | None = None,
) -> list[SearchHit]:
    """Ask a running `bertindex serve` at `url` for the top-k documents of one query.

    Args:
        url: the server, e.g. DEFAULT_URL (http://127.0.0.1:8765) or https://HOST:PORT.
        query: the query text.
        k: documents to return.
        collection: search this collection only (None: all).
        where: (field, value) metadata filters; all must match.
        mode: `dense`, `keyword` or `hybrid`; None: the server's `search.mode`.
        timeout: seconds to wait for the answer.
        labels: (head, label) filters; all must match.
        entities: (type, text or None) filters; all must match.
        token: sent as `Authorization: Bearer TOKEN` (None: no header; a server whose store
            has tokens then answers 401).
        ca_cert: a PEM file of the CA(s) an https server's certificate must chain to (None:
            the system's).
    Returns:
        The hits, best first.
    Raises:
        RemoteError: the server is unreachable, its certificate is not trusted, or it answered
            with an error.
    """
    payload = {
        "query": query,
        "k": k,
        "collection": collection,
        "where": dict(where),
        "mode": mode,
        "labels": [f"{h}={lb}" for h, lb in labels],
        "entities": [t if x is None else f"{t}={x}" for t, x in entities],
    }
    data = json.dumps(payload).encode()
    request = urllib.request.Request(
        url.rstrip("/") + "/search",
        data=data,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    if token:
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    try:
        context = ssl.create_default_context(cafile=ca_cert)
    except OSError as exc:
        raise RemoteError(f"cannot read the CA file {ca_cert} ({exc})") from None
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=context), SameOriginAuth()
    )
    try:
        with opener.open(request, timeout=timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:DETAIL_CHARS]
        hint = (
            AUTH_HINTS.get(exc.code, "")
            if exc.code != 401 or not token
            else (f"; the token given was refused: check ${TOKEN_ENV} / --token-file")
        )
        raise RemoteError(f"server {url} answered {exc.code}: {detail}{hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ssl.SSLCertVerificationError):
            raise RemoteError(
                f"cannot verify {url}'s certificate ({reason.verify_message}); "
                f"give its CA with --ca-cert FILE or ${CA_CERT_ENV}"
            ) from None
        raise RemoteError(
            f"cannot reach {url} ({exc}); start a server with `bertindex serve "
            "--store DIR` or drop --server"
        ) from None
    return [SearchHit.from_dict(h) for h in answer["hits"]]
