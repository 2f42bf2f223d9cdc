"""A snapshot's views, each created when a query first names its table.

Creating a view binds it, and binding `read_parquet` reads its first segment's Parquet footer:
at 10M documents the documents, chunks and vectors footers (row groups of 2,048 rows: 3-6.5 MB
each) cost every reader ~120 ms at open, before its first query (AMD EPYC, 2026-12-06). A
one-off search names one of the 17 tables (`meta`), so each view waits for the first query
whose SQL names its table.

The order of a view's segments is kept: DuckDB estimates a multi-file scan as the first file's
rows times the files, so putting a small segment first to bind faster would skew its plans.

Which tables a query names is read from its text: a word equal to a table's name (quoted
or not, any case), or a string parameter equal to one, creates that view; a catalog
query (`information_schema`, `duckdb_tables()`, `SHOW`, `DESCRIBE`, `PRAGMA`) that names no
table creates them all (`WHERE table_name = 'meta'` creates `meta` only). A false match (a
column named like a table) only creates a view early. Damage found then is the error opening the
snapshot gives (`snapshot._damaged`); the cheap part of that check (each segment is there and
ends with Parquet's magic bytes) still runs at open.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb


_CATALOG = re.compile(
    r"information_schema|duckdb_(?:tables|views|columns|dependencies)|\bshow\b|\bdescribe\b"
    r"|\bpragma\b|\bsummarize\b",
    re.IGNORECASE,
)


class LazyViews:
    """The views not created yet, by table name, and their creation.

    Args:
        tables: every table of the snapshot (views made or not).
        pending: table name -> the SELECT its view runs, for the views not made yet.
        damaged: turns a DuckDB error creating a view into the error to raise.
    """

    def __init__(
        self, tables: list[str], pending: dict[str, str], damaged: Callable[[Exception], Exception]
    ):
        self.tables = set(tables)
        self.pending = dict(pending)
        self._damaged = damaged
        self._lock = threading.Lock()
        names = "|".join(re.escape(name) for name in sorted(tables, key=len, reverse=True))
        self._names = re.compile(rf"\b({names})\b", re.IGNORECASE) if tables else None

    def ensure(self, con: duckdb.DuckDBPyConnection, sql: str, params: Any = None) -> None:
        """Create, through `con`, the views `sql` (and its string `params`) name that do not
        exist yet; a catalog query that names no table creates them all."""
        if not self.pending or self._names is None:
            return
        named = {name.lower() for name in self._names.findall(sql)}
        if isinstance(params, (list, tuple)):
            named.update(p for p in params if isinstance(p, str) and p in self.tables)
        if not named and _CATALOG.search(sql):
            named = set(self.pending)
        if named & self.pending.keys():
            self.create(con, named)

    def create(self, con: duckdb.DuckDBPyConnection, names: set[str]) -> None:
        import duckdb

        with self._lock:  # another thread's cursor may be creating the same view
            for name in sorted(names):
                select = self.pending.get(name)
                if select is None:
                    continue
                try:
                    con.execute(f'CREATE VIEW "{name}" AS {select}')
                except duckdb.Error as exc:
                    raise self._damaged(exc) from None
                del self.pending[name]


class ViewsOnDemand:
    """A DuckDB connection or cursor whose queries first create the views they name;
    everything else is the connection's own."""

    __slots__ = ("_con", "_views")

    def __init__(self, con: duckdb.DuckDBPyConnection, views: LazyViews):
        self._con = con
        self._views = views

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> ViewsOnDemand:
        self._views.ensure(self._con, str(query), args[0] if args else kwargs.get("parameters"))
        self._con.execute(query, *args, **kwargs)
        return self

    def executemany(self, query: Any, *args: Any, **kwargs: Any) -> ViewsOnDemand:
        self._views.ensure(self._con, str(query))
        self._con.executemany(query, *args, **kwargs)
        return self

    def sql(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        self._views.ensure(self._con, str(query))
        return self._con.sql(query, *args, **kwargs)

    query = sql

    def table(self, name: str) -> Any:
        self._views.ensure(self._con, name)
        return self._con.table(name)

    def view(self, name: str) -> Any:
        self._views.ensure(self._con, name)
        return self._con.view(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)
