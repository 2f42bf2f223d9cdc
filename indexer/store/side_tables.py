"""Side tables: every table beside documents, chunks, vectors and meta (annotations, entities,
runs, rejected, ...), found by name in `information_schema`; deleting a document's rows from
them and copying them between stores. Table names come from the catalogue, never from input."""

from __future__ import annotations

from indexer.store.core import StoreCore

CORE_TABLES = ("documents", "chunks", "vectors", "vector_files", "meta")
SELECT_TABLES = (
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
    "AND table_type = 'BASE TABLE' ORDER BY table_name"
)
SELECT_DOC_KEYED = "SELECT table_name FROM information_schema.columns WHERE column_name = 'doc_id'"
# `{table}` is a name read from the catalogue above, quoted; values stay bound or in views
DELETE_DOC_ROWS = 'DELETE FROM "{table}" WHERE doc_id IN {ids}'
DELETE_ALL = 'DELETE FROM "{table}"'
SELECT_ALL = 'SELECT * FROM "{table}"'
INSERT_ALL = 'INSERT INTO "{table}" SELECT * FROM {{view}}'
_COPY_BATCH = 65536  # rows per Arrow batch while copying


class SideTables:
    """The side tables, found by name (`store.side`).

    Args:
        core: the open store.
    """

    def __init__(self, core: StoreCore):
        self.core = core

    def names(self, keyed_by_doc: bool = False) -> list[str]:
        """Names of the side tables.

        Args:
            keyed_by_doc: only those with a `doc_id` column.
        Returns:
            Table names, sorted.
        """
        names = [
            r[0] for r in self.core.con.execute(SELECT_TABLES).fetchall() if r[0] not in CORE_TABLES
        ]
        if not keyed_by_doc:
            return names
        keyed = {r[0] for r in self.core.con.execute(SELECT_DOC_KEYED).fetchall()}
        return [n for n in names if n in keyed]

    def copy_from(self, source: SideTables) -> list[str]:
        """Replace the rows of every side table with the source store's, in one transaction;
        both stores have the same schema.

        Args:
            source: the side tables of the store to copy from (doc ids must mean the same
                documents in both).
        Returns:
            The tables copied.
        """
        mine = set(self.names())
        names = [n for n in source.names() if n in mine]
        with self.core.transaction():
            for name in names:
                self.core.con.execute(DELETE_ALL.format(table=name))
                reader = source.core.con.execute(SELECT_ALL.format(table=name)).fetch_record_batch(
                    _COPY_BATCH
                )
                for rb in reader:
                    self.core.insert_view(INSERT_ALL.format(table=name), rb)
        return names

    def delete_rows(self, ids: str) -> None:
        """Delete the rows of doc ids `ids` (a `bound` reference) from every doc-keyed side
        table, inside the caller's transaction."""
        for name in self.names(keyed_by_doc=True):
            self.core.con.execute(DELETE_DOC_ROWS.format(table=name, ids=ids))
