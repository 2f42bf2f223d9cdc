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
from search.hits import SearchHit

DEFAULT_PORT = 8765  # where `bertindex serve` listens unless --port says otherwise
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
DETAIL_CHARS = 500  # of an error answer, quoted in the RemoteError


def remote_search(url: str, query: str, k: int = 10, collection: str | None = None,
                  where: Sequence[tuple[str, str]] = (), mode: str | None = None,
                  timeout: float = 30.0, *, labels: Sequence[tuple[str, str]] = (),
                  entities: Sequence[tuple[str, str | None]] = ()) -> list[SearchHit]:
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
    Returns:
        The hits, best first.
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
        detail = exc.read().decode("utf-8", "replace")[:DETAIL_CHARS]
        raise RemoteError(f"server {url} answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RemoteError(f"cannot reach {url} ({exc}); start a server with `bertindex serve "
                          "--store DIR` or drop --server") from None
    return [SearchHit.from_dict(h) for h in answer["hits"]]
