"""Search filters as SQL: `--collection`, `--where FIELD=VALUE`, `--label HEAD=LABEL` and
`--entity TYPE[=TEXT]` become clauses whose values are always bound parameters, and the chunk
or document ids that pass them. Does not rank."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from indexer.store.core import StoreCore

CHUNKS_PASSING = (
    "SELECT c.chunk_id FROM chunks c JOIN documents d ON c.doc_id = d.doc_id WHERE {clauses}"
)
DOCS_PASSING = "SELECT doc_id FROM documents WHERE {clauses}"
# `{doc}` and `{prefix}` are column prefixes chosen here, never input; every value is a `?`
COLLECTION_IS = "{prefix}collection = ?"
METADATA_IS = "json_extract_string({prefix}metadata, ?) = ?"
LABEL_IS = "{doc} IN (SELECT doc_id FROM annotations WHERE head = ? AND label = ?)"
# a person's label (the latest review row) ...
HUMAN_LABEL_IS = (
    "{doc} IN (SELECT doc_id FROM reviews WHERE head = ? GROUP BY doc_id "
    "HAVING arg_max(label, review_id) = ?)"
)
# ... else the model's: a reviewed document is never matched by a model label it was corrected from
EFFECTIVE_LABEL_IS = (
    "("
    + HUMAN_LABEL_IS
    + " OR ("
    + LABEL_IS
    + " AND {doc} NOT IN (SELECT doc_id FROM reviews WHERE head = ?)))"
)
HAS_REVIEWS = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'reviews'"
ENTITY_TYPE_IS = "{doc} IN (SELECT doc_id FROM entities WHERE type = ?)"
ENTITY_IS = "{doc} IN (SELECT doc_id FROM entities WHERE type = ? AND lower(text) = lower(?))"


@dataclass
class Clauses:
    """SQL conditions joined with AND, and their bound parameters in order."""

    conditions: list[str] = field(default_factory=list)
    params: list[str] = field(default_factory=list)

    def add(self, condition: str, *params: str) -> None:
        self.conditions.append(condition)
        self.params.extend(params)

    @property
    def sql(self) -> str:
        return " AND ".join(self.conditions)


def json_path(field_name: str) -> str:
    """A JSON pointer (RFC 6901) selecting one top-level key, whatever characters the key
    holds: `~` and `/` are its only special characters and are escaped, so no key can become
    a wildcard (`*`), a nested path (`a.b`, `$..x`) or an array index. (A quoted `$."*"` path
    is still a wildcard in DuckDB, and `$.""` an error.)

    Args:
        field_name: a metadata key as the user typed it.
    Returns:
        The pointer, to be bound as a parameter.
    """
    return "/" + field_name.replace("~", "~0").replace("/", "~1")


def filter_clauses(
    prefix: str,
    collection: str | None,
    where: Sequence[tuple[str, str]],
    labels: Sequence[tuple[str, str]],
    entities: Sequence[tuple[str, str | None]],
    human: bool = False,
    reviews: bool = False,
) -> Clauses | None:
    """Conditions over `documents` columns named with `prefix`.

    Args:
        prefix: "d." inside a join, "" on `documents` alone.
        collection: keep one collection.
        where: (metadata field, value) pairs, compared as text.
        labels: (head, label) pairs: a person's label (`review import`) where there is
            one, else the model's (`bertindex annotate`).
        entities: (type, text or None) pairs; text compared case-insensitively.
        human: `labels` match a person's labels only.
        reviews: the store has the `reviews` table (schema step 4); without it there are
            model labels only, and `human` matches nothing.
    Returns:
        The clauses with their parameters; None when there is no filter at all.
    """
    if collection is None and not where and not labels and not entities:
        return None
    out = Clauses()
    if collection is not None:
        out.add(COLLECTION_IS.format(prefix=prefix), collection)
    for field_name, value in where:
        out.add(METADATA_IS.format(prefix=prefix), json_path(field_name), value)
    doc = f"{prefix}doc_id"
    for head, label in labels:
        if not reviews and human:
            out.add("false")  # a store before step 4 holds no human label
        elif not reviews:
            out.add(LABEL_IS.format(doc=doc), head, label)
        elif human:
            out.add(HUMAN_LABEL_IS.format(doc=doc), head, label)
        else:
            out.add(EFFECTIVE_LABEL_IS.format(doc=doc), head, label, head, label, head)
    for kind, text in entities:
        if text is None:
            out.add(ENTITY_TYPE_IS.format(doc=doc), kind)
        else:
            out.add(ENTITY_IS.format(doc=doc), kind, text)
    return out


class Filters:
    """Search filters as bound SQL over the documents (`store.filters`).

    Args:
        core: the open store.
    """

    def __init__(self, core: StoreCore):
        self.core = core

    def chunk_ids(
        self,
        collection: str | None = None,
        where: Sequence[tuple[str, str]] = (),
        labels: Sequence[tuple[str, str]] = (),
        entities: Sequence[tuple[str, str | None]] = (),
        human: bool = False,
    ) -> np.ndarray | None:
        """Chunk ids of documents that pass every filter.

        Args:
            collection: keep one collection.
            where: (metadata field, value) pairs, compared as text; values are bound
                parameters, never SQL.
            labels: (head, label) pairs: a person's label where there is one, else the model's.
            entities: (type, text or None) pairs; text compared case-insensitively.
            human: `labels` match a person's labels only (`search --human`).
        Returns:
            int64 chunk ids; None when there is no filter.
        """
        return self._passing(
            CHUNKS_PASSING, "d.", "chunk_id", collection, where, labels, entities, human
        )

    def doc_ids(
        self,
        collection: str | None = None,
        where: Sequence[tuple[str, str]] = (),
        labels: Sequence[tuple[str, str]] = (),
        entities: Sequence[tuple[str, str | None]] = (),
        human: bool = False,
    ) -> np.ndarray | None:
        """Doc ids that pass every filter (arguments as `chunk_ids`).

        Returns:
            int64 doc ids; None when there is no filter.
        """
        return self._passing(DOCS_PASSING, "", "doc_id", collection, where, labels, entities, human)

    def _passing(
        self,
        statement: str,
        prefix: str,
        column: str,
        collection: str | None,
        where: Sequence[tuple[str, str]],
        labels: Sequence[tuple[str, str]],
        entities: Sequence[tuple[str, str | None]],
        human: bool = False,
    ) -> np.ndarray | None:
        """Ids (`column`) that `statement` returns under the filters; None without a filter."""
        reviews = bool(labels) and bool(self.core.scalar(HAS_REVIEWS))
        clauses = filter_clauses(
            prefix, collection, where, labels, entities, human, reviews=reviews
        )
        if clauses is None:
            return None
        rows = self.core.con.execute(statement.format(clauses=clauses.sql), clauses.params)
        return rows.fetchnumpy()[column].astype(np.int64)

    def facet_counts(
        self,
        collection: str | None = None,
        where: Sequence[tuple[str, str]] = (),
        labels: Sequence[tuple[str, str]] = (),
        entities: Sequence[tuple[str, str | None]] = (),
    ) -> dict:
        """Documents per collection, per (head, label) and per entity type, among the documents
        that pass the filters (arguments as `chunk_ids`; the collection count ignores
        `collection` so every collection stays choosable).

        Returns:
            {"collections": {name: n}, "labels": {head: {label: n}}, "entities": {type: n}};
            a store without annotation tables has empty label and entity counts.
        """

        def passing(keep_collection: bool) -> tuple[str, list[str]]:
            clauses = filter_clauses(
                "", collection if keep_collection else None, where, labels, entities
            )
            if clauses is None:
                return "SELECT doc_id FROM documents", []
            return DOCS_PASSING.format(clauses=clauses.sql), clauses.params

        sql, params = passing(False)
        out: dict = {"collections": {}, "labels": {}, "entities": {}}
        for name, count in self.core.con.execute(
            "SELECT collection, count(*) FROM documents WHERE doc_id IN "
            f"({sql}) GROUP BY collection ORDER BY collection",
            params,
        ).fetchall():
            out["collections"][name] = int(count)
        tables = {
            row[0]
            for row in self.core.con.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_name IN ('annotations', 'entities')"
            ).fetchall()
        }
        sql, params = passing(True)
        if "annotations" in tables:
            for head, label, count in self.core.con.execute(
                "SELECT head, label, count(DISTINCT doc_id) FROM annotations WHERE doc_id IN "
                f"({sql}) GROUP BY head, label ORDER BY head, count(DISTINCT doc_id) DESC, "
                "label",
                params,
            ).fetchall():
                out["labels"].setdefault(head, {})[label] = int(count)
        if "entities" in tables:
            for kind, count in self.core.con.execute(
                "SELECT type, count(DISTINCT doc_id) FROM entities WHERE doc_id IN "
                f"({sql}) GROUP BY type ORDER BY count(DISTINCT doc_id) DESC, type",
                params,
            ).fetchall():
                out["entities"][kind] = int(count)
        return out
