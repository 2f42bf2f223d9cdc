"""Who may ask `bertindex serve`: the Host check (against DNS rebinding), the Origin check on
writes (against cross-site posts), and Bearer tokens with scopes, as ASGI middleware over the
FastAPI app. Each route declares the scope it needs where it is defined (`needs`);
`route_table` reads them back from the app. Does not create or store tokens
(`indexer.store.tokens`, `bertindex token`) and does not listen (`search.workers`).

Rules, in order: a Host that is not loopback, the address the request arrived on, the address
`serve` bound or a name in `server.allowed_hosts` gets 403; then, while the store has tokens
(or `serve` minted a session token), every route but the open ones needs
`Authorization: Bearer TOKEN`: none, an unknown one or an expired one gets 401, a token whose scope
does not reach the route's gets 403 (`indexer.store.tokens.GRANTS`: `read` < `review` < `admin`;
`metrics` reaches `/metrics` only); then a route needing another scope than `read` (the writes,
`/metrics`), and on a server without tokens any route but the open ones, whose Origin is not the
server's own (or that a browser marks `Sec-Fetch-Site: cross-site`) gets 403. The open routes
are `/health` and the page shells (`/`, `/review` and their static files: package files with no
store data; the pages then send the token with each call). A store without tokens on loopback
answers as before: no token needed.

Tokens are read from the live store, again whenever its files change (at most once a
second), so `token create` and `token revoke` count within a second on a running server; while
a writer holds the file the last table read stays in force. A token's last use is written back
at most once a minute.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from fastapi import Depends, Request  # at module level: FastAPI resolves annotations by name

from indexer.core.timeutil import utc_now
from indexer.errors import StoreError
from indexer.store import DB_NAME, SCOPES, Store, hash_token, read_token_table, scope_allows
from search.error_map import Forbidden, Refusal, Unauthenticated, error_response

log = logging.getLogger(__name__)

OPEN = "open"  # no token needed
LOOPBACK_NAMES = ("localhost",)
SESSION_NAME = "serve"  # who a label made with `serve`'s session token is recorded as
SESSION_SCOPE = "review"
CHECK_EVERY_S = 1.0  # how often the store's files are looked at for token changes
TOUCH_EVERY_S = 60.0  # how often last use is written back (the resolution of `token list`)
WILDCARD_BINDS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1).

    Args:
        host: a name or address, without port or brackets.
    """
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name or address of a Host header, lowercased, without port or IPv6 brackets.

    Args:
        header: e.g. `127.0.0.1:8765`, `[::1]:8765`, `Search.Example`.
    """
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


@dataclass(frozen=True)
class Caller:
    """Who a request came from: the token's name and scope (None: the server has no tokens),
    and when the token expires (None: never)."""

    name: str | None
    scope: str | None
    expires_at: datetime | None = None


class TokenBook:
    """The tokens a server accepts: the store's (re-read when its files change) plus an
    optional session token that `serve` minted and only this server knows.

    Args:
        store_dir: the store directory (its live `store.duckdb` is read).
        session_hash: SHA-256 of `serve`'s session token (None: none).
        fallback: tokens to use while the live file cannot be read at start (the snapshot's).
        write_lock: held while last use is written (the review page's writer lock).
    """

    def __init__(
        self,
        store_dir: str | Path,
        session_hash: str | None = None,
        fallback: Sequence = (),
        write_lock: threading.Lock | None = None,
    ):
        self.store_dir = Path(store_dir)
        self.session_hash = session_hash
        self._lock = threading.Lock()
        self._write_lock = write_lock or threading.Lock()
        self._signature: tuple | None = None
        self._checked = 0.0
        self._entries: list[tuple[str, Caller]] = []  # (hash, who holds it)
        self._used: dict[str, datetime] = {}
        self._touched = time.monotonic()
        self.writer: threading.Thread | None = None  # the last write-back of last use
        if not self._reload():
            self._entries = _entries(fallback)

    @property
    def required(self) -> bool:
        """True when requests must carry a token (the store has one, or a session token)."""
        self._refresh()
        return bool(self._entries) or self.session_hash is not None

    def names(self) -> list[str]:
        """Names of the stored tokens now accepted."""
        self._refresh()
        return sorted(caller.name for _, caller in self._entries)

    def check(self, token: str) -> Caller | None:
        """The caller a token belongs to, None when no accepted token matches. Every known hash
        is compared (in constant time each) whatever matched, so timing tells nothing.

        Args:
            token: the Bearer token of a request.
        """
        self._refresh()
        digest = hash_token(token)
        found = None
        if self.session_hash is not None and hmac.compare_digest(self.session_hash, digest):
            found = Caller(SESSION_NAME, SESSION_SCOPE)
        for stored, caller in self._entries:
            if hmac.compare_digest(stored, digest):
                found = caller
        if found is not None and found.name != SESSION_NAME:
            self._note_use(found.name)
        return found

    # -- keeping up with the store -------------------------------------------------------------
    def _files_signature(self) -> tuple:
        out = []
        for name in (DB_NAME, DB_NAME + ".wal"):
            with contextlib.suppress(OSError):
                st = os.stat(self.store_dir / name)
                out.append((name, st.st_mtime_ns, st.st_size))
        return tuple(out)

    def _reload(self) -> bool:
        signature = self._files_signature()
        rows = read_token_table(self.store_dir)
        if rows is None:
            return False  # a writer holds the file: keep what was read last
        self._entries = _entries(rows)
        self._signature = signature
        return True

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < CHECK_EVERY_S:
            return
        with self._lock:
            if now - self._checked < CHECK_EVERY_S:
                return
            self._checked = now
            if self._files_signature() != self._signature and not self._reload():
                log.info("tokens of %s not re-read: a writer holds the store", self.store_dir)
            if self._used and now - self._touched >= TOUCH_EVERY_S:
                self._touched = now
                used, self._used = self._used, {}
                self.writer = threading.Thread(target=self._write_use, args=(used,), daemon=True)
                self.writer.start()

    def _note_use(self, name: str) -> None:
        self._used[name] = utc_now()

    def _write_use(self, used: dict[str, datetime]) -> None:
        """Write last use back; skipped (and kept for the next time) while another process
        writes the store."""
        with self._write_lock:
            try:
                with Store(self.store_dir) as store:
                    store.tokens.touch(used)
            except StoreError:
                with self._lock:
                    for name, when in used.items():
                        self._used.setdefault(name, when)


def _entries(rows: Iterable) -> list[tuple[str, Caller]]:
    return [(t.token_hash, Caller(t.name, t.scope, t.expires_at)) for t in rows]


def current_tokens(store_dir: str | Path) -> list:
    """The store's tokens now: from the live file, or while a writer holds it from the
    published snapshot (`serve` decides with it whether tokens are required).

    Args:
        store_dir: the store directory.
    Returns:
        `StoredToken` rows (empty: none, or no store yet).
    """
    rows = read_token_table(store_dir)
    if rows is not None:
        return rows
    with Store(store_dir, read_only=True) as store:
        return store.tokens.stored()


def needs(scope: str):
    """What a route declares as the scope it needs: `OPEN` or one of `SCOPES`. Pass it in the
    route's `dependencies`, or as a parameter's default to receive the caller.

    Args:
        scope: the least scope a token must have to reach the route.
    Returns:
        A FastAPI dependency giving the route the request's `Caller` (None while the server
        has no tokens, and on open routes).
    """

    async def caller(request: Request) -> Caller | None:  # async: no thread-pool hop
        return getattr(request.state, "caller", None)

    caller.needs = scope  # type: ignore[attr-defined]  # what `route_table` reads
    return Depends(caller)


def route_table(app) -> dict[tuple[str, str], str]:
    """(method, route path) -> the scope its route declares with `needs`, for every route of
    the app that declares one (HEAD left out: it is GET's). A route without one is missing:
    the guard asks it for `admin`, and tests/search/server/test_server_access.py fails.

    Args:
        app: the FastAPI app.
    """
    table = {}
    for route in app.router.routes:
        dependant = getattr(route, "dependant", None)
        declared = [
            d.call.needs
            for d in (dependant.dependencies if dependant else ())
            if hasattr(d.call, "needs")
        ]
        for method in sorted(getattr(route, "methods", None) or ()):
            if declared and method != "HEAD":
                table[(method, route.path)] = declared[0]
    return table


def route_key(app, scope) -> tuple[tuple[str, str] | None, bool]:
    """The `route_table` key of the route a request matches.

    Args:
        app: the FastAPI (Starlette) app.
        scope: the request's ASGI scope.
    Returns:
        ((method, route path) or None when no route has this path, full match: False when
        the path matched but not the method).
    """
    from starlette.routing import Match

    method = "GET" if scope["method"] == "HEAD" else scope["method"]
    partial = None
    for route in app.router.routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return (method, route.path), True
        if match == Match.PARTIAL and partial is None:
            partial = (method, route.path)
    return partial, False


def app_routes(app) -> list[tuple[str, str]]:
    """Every (method, path) the app answers (HEAD left out: it is GET's), for the route table
    test.

    Args:
        app: the FastAPI app.
    """
    out = []
    for route in app.router.routes:
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD":
                out.append((method, route.path))
    return out


class AccessGuard:
    """ASGI middleware applying the module's rules before a request reaches a route.

    Args:
        app: the FastAPI app, all its routes added (their scopes are read once, here).
        book: the tokens accepted.
        allowed_hosts: Host names answered beyond loopback and the bound address
            (`server.allowed_hosts`).
        bound: the address `serve` bound (None: unknown, as in tests).
    """

    def __init__(
        self, app, book: TokenBook, allowed_hosts: Iterable[str] = (), bound: str | None = None
    ):
        self.app = app
        self.book = book
        self.scopes = route_table(app)
        self.allowed_hosts = {h.lower() for h in allowed_hosts}
        if bound and bound not in WILDCARD_BINDS:
            self.allowed_hosts.add(host_name(bound) if ":" not in bound else bound.lower())

    def __getattr__(self, name):  # `.state`, `.routes`: the app's
        return getattr(self.app, name)

    def host_allowed(self, host: str, scope) -> bool:
        """True when `host` (from the Host header) names this server."""
        if not host:
            return False
        if is_loopback(host) or host in self.allowed_hosts:
            return True
        server = scope.get("server")
        return bool(server) and host == str(server[0]).lower()  # the address it arrived on

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            self.check(scope)
        except Refusal as exc:
            return await error_response(exc)(scope, receive, send)
        return await self.app(scope, receive, send)

    def check(self, scope) -> None:
        """Apply the rules to one request; the caller is left in its ASGI state.

        Raises:
            Unauthenticated: a token is needed and none, or an unknown one, came.
            Forbidden: a foreign Host or Origin, or a token whose scope is too low.
        """
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or []}
        raw_host = headers.get("host", "")
        if not self.host_allowed(host_name(raw_host), scope):
            raise Forbidden(
                f"Host {raw_host!r} is not a name of this server: use "
                "http://127.0.0.1:PORT/, or add the name to server.allowed_hosts "
                "in config.yaml"
            )
        key, full = route_key(self.app, scope)
        needed = self.scopes.get(key, "read" if not full else "admin")  # unlisted: the strictest
        if needed != OPEN and self.book.required:
            auth = headers.get("authorization", "")
            kind, _, token = auth.partition(" ")
            if kind.lower() != "bearer" or not token.strip():
                raise Unauthenticated(
                    "this server needs a token: send `Authorization: Bearer "
                    "TOKEN` (create one with `bertindex token create --scope "
                    "read --name NAME`)"
                )
            caller = self.book.check(token.strip())
            if caller is None:
                raise Unauthenticated(
                    "the token is not accepted here (revoked, mistyped, or "
                    "for another store); `bertindex token list` names the "
                    "valid ones"
                )
            if caller.expires_at is not None and caller.expires_at <= utc_now():
                when = caller.expires_at.isoformat(timespec="seconds")
                raise Unauthenticated(
                    f"the token expired ({when}Z): ask for a new one "
                    "(`bertindex token create --expires ...`)"
                )
            if not scope_allows(caller.scope, needed):
                path = key[1] if key else scope["path"]
                raise Forbidden(
                    f"token {caller.name!r} has scope {caller.scope}; "
                    f"{scope['method']} {path} needs {needed} (`bertindex token "
                    f"create --scope {needed}`)"
                )
            scope.setdefault("state", {})["caller"] = caller
        # writes and /metrics always; reads too on a server without tokens, where nothing
        # else tells a page of another site (a fetch, an <img>: no Origin, but Sec-Fetch-Site)
        # from ours
        if needed != OPEN and (needed != SCOPES[0] or not self.book.required):
            origin = headers.get("origin")
            own = f"{scope.get('scheme', 'http')}://{raw_host.strip().lower()}"
            if origin is not None and origin.lower() != own:
                raise Forbidden(
                    f"Origin {origin!r} is not this server's ({own}): it answers its own pages only"
                )
            if headers.get("sec-fetch-site", "same-origin") in ("cross-site", "same-site"):
                raise Forbidden(
                    f"a request from another site (Sec-Fetch-Site) to {own}: it "
                    "answers its own pages only"
                )
