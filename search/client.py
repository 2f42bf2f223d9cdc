"""HTTP client of `bertindex serve` (`bertindex search --server URL`): one `POST /search`,
the answer read back as `SearchHit`s. Standard library only (plus the typed errors): asking a
server loads no model, index or store here. Does not retry.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence

from indexer.errors import RemoteError
from indexer.query.hits import SearchHit

DEFAULT_PORT = 8765  # where `bertindex serve` listens unless --port says otherwise
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
DETAIL_CHARS = 500  # of an error answer, quoted in the RemoteError
TOKEN_ENV = "BERTINDEX_TOKEN"  # where `search --server` finds a token when --token is not given
AUTH_HINTS = {401: f"; give a token with --token or {TOKEN_ENV} (`bertindex token create`)"}


def remote_search(url: str, query: str, k: int = 10, collection: str | None = None,
                  where: Sequence[tuple[str, str]] = (), mode: str | None = None,
                  timeout: float = 30.0, *, labels: Sequence[tuple[str, str]] = (),
                  entities: Sequence[tuple[str, str | None]] = (),
                  token: str | None = None) -> list[SearchHit]:
    """Ask a running `bertindex serve` at `url` for the top-k documents of one query.

    Args:
        url: the server, e.g. DEFAULT_URL (http://127.0.0.1:8765).
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
    Returns:
        The hits, best first.
    Raises:
        RemoteError: the server is unreachable or answered with an error.
    """
    payload = {"query": query, "k": k, "collection": collection, "where": dict(where),
               "mode": mode, "labels": [f"{h}={lb}" for h, lb in labels],
               "entities": [t if x is None else f"{t}={x}" for t, x in entities]}
    data = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url.rstrip("/") + "/search", data=data, method="POST",
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:DETAIL_CHARS]
        hint = AUTH_HINTS.get(exc.code, "") if exc.code != 401 or not token else (
            "; the token given was refused: check --token / BERTINDEX_TOKEN")
        raise RemoteError(f"server {url} answered {exc.code}: {detail}{hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RemoteError(f"cannot reach {url} ({exc}); start a server with `bertindex serve "
                          "--store DIR` or drop --server") from None
    return [SearchHit.from_dict(h) for h in answer["hits"]]
