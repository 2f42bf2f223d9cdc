"""Access tokens in the store: a name, a scope (`read`, `review`, `metrics`, `admin`: what each
reaches is GRANTS) and the SHA-256 of the token, never the token itself; creating, listing,
revoking, recording when each was last used, and reading the table back for a server
(`read_token_table`). Table from schema step 5, its expiry from step 6
(`indexer/store/schema.py`). Does not check a request (`search.access` does); `TokenTables` is
`store.tokens`.

A token is 32 random bytes (`secrets.token_urlsafe`), so a plain SHA-256 is enough to make a
stolen store useless for logging in: nothing slow (bcrypt, scrypt) is needed against guessing
a 256-bit secret.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from indexer.core.choices import TokenScope
from indexer.core.timeutil import utc_now
from indexer.errors import InputError
from indexer.store.core import StoreCore
from indexer.store.schema import read_briefly, scalar

if TYPE_CHECKING:
    import duckdb

TOKEN_PREFIX = "bi_"  # tells a bertindex token apart in a config file or a log
TOKEN_BYTES = 32
SCOPES: tuple[str, ...] = get_args(TokenScope)
# what a token of each scope reaches: `read` < `review` < `admin`, each with the ones before it;
# `metrics` reaches `GET /metrics` only (a scraper's token reads no document), and only `admin`
# reaches every route. The schema stores a scope as plain VARCHAR: no step for a new scope.
GRANTS: dict[str, frozenset[str]] = {
    "read": frozenset({"read"}),
    "review": frozenset({"read", "review"}),
    "metrics": frozenset({"metrics"}),
    "admin": frozenset(SCOPES),
}
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
HAS_TOKENS_TABLE = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'tokens'"
INSERT_TOKEN = (
    "INSERT INTO tokens (name, scope, token_hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?)"
)
SELECT_TOKEN_NAME = "SELECT count(*) FROM tokens WHERE name = ?"
SELECT_TOKENS = (
    "SELECT name, scope, token_hash, created_at, last_used_at, {expires} FROM tokens ORDER BY name"
)
HAS_EXPIRES_COLUMN = (
    "SELECT count(*) FROM information_schema.columns "
    "WHERE table_name = 'tokens' AND column_name = 'expires_at'"
)
DELETE_TOKEN = "DELETE FROM tokens WHERE name = ?"
TOUCH_TOKEN = (
    "UPDATE tokens SET last_used_at = greatest(coalesce(last_used_at, ?), ?) WHERE name = ?"
)


@dataclass(frozen=True)
class StoredToken:
    """One row of the token table (`token_hash`: hex SHA-256 of the token)."""

    name: str
    scope: str
    token_hash: str
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None = None  # None: never

    def to_dict(self) -> dict:
        """What `bertindex token list --json` prints: never the hash."""
        return {
            "name": self.name,
            "scope": self.scope,
            "created": _iso(self.created_at),
            "last_used": _iso(self.last_used_at),
            "expires": _iso(self.expires_at),
        }

    def expired(self, now: datetime | None = None) -> bool:
        """True once `expires_at` is reached (`now`: UTC, naive; default the current time)."""
        return self.expires_at is not None and self.expires_at <= (now or utc_now())


def _iso(when: datetime | None) -> str | None:
    return when.isoformat(timespec="seconds") + "Z" if when else None


def hash_token(token: str) -> str:
    """The hex SHA-256 a token is stored and compared as.

    Args:
        token: the token as a client sends it.
    Returns:
        64 hex characters.
    """
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def scope_allows(held: str, needed: str) -> bool:
    """True when a token of scope `held` may use a route that needs `needed` (GRANTS).

    Args:
        held: the token's scope, one of SCOPES.
        needed: the route's scope, one of SCOPES.
    """
    return needed in GRANTS[held]


def new_token() -> str:
    """A fresh random token (TOKEN_PREFIX + 43 URL-safe characters)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def _rows(con: duckdb.DuckDBPyConnection) -> list[StoredToken]:
    if not scalar(con, HAS_TOKENS_TABLE):
        return []  # a store (or snapshot) from before schema step 5: no tokens
    # a file from before step 6 (a snapshot, or a live file no writer has upgraded): no expiry
    expires = "expires_at" if scalar(con, HAS_EXPIRES_COLUMN) else "NULL"
    return [StoredToken(*r) for r in con.execute(SELECT_TOKENS.format(expires=expires)).fetchall()]


def read_tokens_file(path: Path) -> list[StoredToken] | None:
    """The tokens in one DuckDB file, opened read-only for the moment it takes (the facade's
    `read_token_table` names the live file).

    Args:
        path: a store's `store.duckdb`.
    Returns:
        The rows (empty: no file, or no token in it), or None when the file cannot be opened
        now (a writer holds it); the caller keeps what it read last and tries again later.
    """
    if not path.is_file():
        return []
    return read_briefly(path, _rows)


class TokenTables:
    """Access tokens, hashed (`store.tokens`).

    Args:
        core: the open store.
    """

    def __init__(self, core: StoreCore):
        self.core = core

    def stored(self) -> list[StoredToken]:
        """Every stored token, by name (empty on a store without the table)."""
        return _rows(self.core.con)

    def create(self, name: str, scope: str, expires_at: datetime | None = None) -> str:
        """Store a new token's hash under `name`.

        Args:
            name: who or what holds it (letters, digits, `_.@-`, at most 64; recorded as who
                made each review label).
            scope: one of SCOPES.
            expires_at: when servers start refusing it (UTC, naive; None: never).
        Returns:
            The token: shown once, never stored.
        Raises:
            InputError: a bad name or scope, or the name is taken.
        """
        if not NAME_PATTERN.fullmatch(name):
            raise InputError(
                f"token name {name!r}: use letters, digits and _ . @ - (at most 64, "
                "starting with a letter or digit), e.g. --name alice"
            )
        if scope not in SCOPES:
            raise InputError(f"token scope {scope!r}: choose one of {', '.join(SCOPES)}")
        if expires_at is not None and expires_at <= utc_now():
            raise InputError(
                f"token expiry {_iso(expires_at)} is in the past: give a later "
                "date or a duration (--expires 30d)"
            )
        if self.core.scalar(SELECT_TOKEN_NAME, [name]):
            raise InputError(
                f"a token named {name!r} exists; revoke it first "
                f"(`bertindex token revoke {name}`) or choose another --name"
            )
        token = new_token()
        with self.core.transaction():
            self.core.con.execute(
                INSERT_TOKEN, [name, scope, hash_token(token), utc_now(), expires_at]
            )
        return token

    def revoke(self, name: str) -> None:
        """Delete the token named `name`; servers refuse it from their next look at the store.

        Raises:
            InputError: no token has that name.
        """
        known = [t.name for t in self.stored()]
        if name not in known:
            raise InputError(
                f"no token named {name!r}; the tokens are: "
                f"{', '.join(known) or 'none'} (`bertindex token list`)"
            )
        with self.core.transaction():
            self.core.con.execute(DELETE_TOKEN, [name])

    def touch(self, used: dict[str, datetime]) -> None:
        """Record when tokens were last used (a later time never moves back).

        Args:
            used: token name -> when a server last accepted it (UTC, naive).
        """
        with self.core.transaction():
            for name, when in used.items():
                self.core.con.execute(TOUCH_TOKEN, [when, when, name])
