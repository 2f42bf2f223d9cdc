"""Human labels in the store: the heads `annotate` knew (label names to validate against),
the candidates a review export ranks, appending reviewed labels (never replacing a row) and
reading the current ones back and the history. Tables come from schema step 4 in
`indexer/store/schema.py` (`reviews.who`, the token a page label came with: step 5).
Does not rank or parse files (`indexer.review`). `ReviewTables` is `store.reviews`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from indexer.core.timeutil import utc_now
from indexer.store.core import StoreCore
from indexer.store.schema import read_briefly

RECORD_HEAD = "INSERT OR REPLACE INTO review_heads VALUES (?, ?, ?, ?, ?, ?)"
SELECT_HEAD = "SELECT task, label_names, path, head_version FROM review_heads WHERE head = ?"
SELECT_HEADS = "SELECT head FROM review_heads ORDER BY head"
# the current human label of each (document, head): its latest row
CURRENT = (
    "SELECT doc_id, head, arg_max(label, review_id) AS label, "
    "arg_max(reviewer, review_id) AS reviewer, max(reviewed_at) AS reviewed_at, "
    "arg_max(content_hash, review_id) AS content_hash FROM reviews "
    "WHERE head = ? GROUP BY doc_id, head"
)
# `{allowed}` and `{other}` are fixed fragments chosen below, never input; values are bound
SELECT_CANDIDATES = (
    "SELECT a.doc_id, a.label, a.probability, a.runner_up, b.label AS other_label, "
    "b.probability AS other_probability FROM annotations a JOIN documents d ON d.doc_id = a.doc_id "
    "LEFT JOIN annotations b ON b.doc_id = a.doc_id AND b.head = ? "
    "WHERE a.head = ? {allowed} AND a.doc_id NOT IN (SELECT doc_id FROM reviews WHERE head = ?) "
    "ORDER BY a.doc_id"
)
ALLOWED_IN = "AND a.doc_id IN {ids}"
SELECT_EXPORT_ROWS = (
    "SELECT d.doc_id, d.collection, d.external_id, d.title, d.text, a.label, a.probability "
    "FROM documents d LEFT JOIN annotations a ON a.doc_id = d.doc_id AND a.head = ? "
    "WHERE d.doc_id IN {ids}"
)
SELECT_DOCS_BY_KEY = (
    "SELECT d.doc_id, d.collection, d.external_id, d.content_hash FROM documents d "
    "JOIN {keys} k ON d.external_id = k.external_id "
    "AND (k.collection IS NULL OR d.collection = k.collection)"
)
NEXT_REVIEW_ID = "SELECT coalesce(max(review_id), 0) FROM reviews"
INSERT_REVIEWS = "INSERT INTO reviews SELECT * FROM {view}"
PAGE_SOURCE = "page"  # `source` of a label stored from the review page (`review_page.py`)
# only a page row, and only by the same token name (NULL without tokens): an imported row or
# another person's is never removed here
_OWN_PAGE_ROW = "review_id = ? AND head = ? AND source = ? AND who IS NOT DISTINCT FROM ?"
DELETE_PAGE_REVIEW = f"DELETE FROM reviews WHERE {_OWN_PAGE_ROW}"
COUNT_PAGE_REVIEW = f"SELECT count(*) FROM reviews WHERE {_OWN_PAGE_ROW}"
REVIEWED_SINCE = "SELECT DISTINCT doc_id FROM reviews WHERE head = ? AND review_id > ?"
COUNT_REVIEWS = "SELECT count(*) FROM reviews WHERE head = ?"
SELECT_REVIEWED = (
    "SELECT c.doc_id, d.external_id, d.text, c.label, c.content_hash = d.content_hash AS fresh "
    "FROM (" + CURRENT + ") c JOIN documents d ON d.doc_id = c.doc_id ORDER BY c.doc_id"
)

REVIEW_SCHEMA = pa.schema(
    [
        ("review_id", pa.int64()),
        ("doc_id", pa.int64()),
        ("head", pa.string()),
        ("label", pa.string()),
        ("reviewer", pa.string()),
        ("reviewed_at", pa.timestamp("us")),
        ("content_hash", pa.string()),
        ("source", pa.string()),
        ("who", pa.string()),
    ]
)
SELECT_HISTORY = (
    "SELECT r.review_id, d.collection, d.external_id, r.label, r.reviewer, r.who, r.reviewed_at, "
    "r.source FROM reviews r LEFT JOIN documents d ON d.doc_id = r.doc_id WHERE r.head = ? "
    "ORDER BY r.review_id"
)


@dataclass(frozen=True)
class HeadInfo:
    """What `annotate` recorded of a head."""

    task: str
    label_names: list[str]
    path: str | None
    version: str | None


@dataclass(frozen=True)
class Candidates:
    """A head's annotated, not yet reviewed documents, by doc id (parallel arrays)."""

    doc_ids: np.ndarray  # int64
    labels: np.ndarray  # object (str)
    top: np.ndarray  # float64: probability of `labels`
    runner_up: np.ndarray  # float64, NaN where not stored
    other_labels: np.ndarray  # object, None where the other head has no label
    other_top: np.ndarray  # float64, NaN likewise


@dataclass(frozen=True)
class NewReview:
    """One human label to append."""

    doc_id: int
    label: str
    reviewer: str
    reviewed_at: datetime
    content_hash: str
    source: str  # the file it came from, or `page`
    who: str | None = None  # the name of the token the page label came with (None: no token)


@dataclass(frozen=True)
class ReviewRow:
    """One row of a head's review history, as `bertindex review history` prints it."""

    review_id: int
    collection: str | None  # None: the document was deleted since
    id: str | None
    label: str
    reviewer: str
    who: str | None
    reviewed_at: datetime
    source: str

    def to_dict(self) -> dict:
        """The row as JSON-ready values (`reviewed_at` in ISO 8601, UTC)."""
        return {
            "review_id": self.review_id,
            "collection": self.collection,
            "id": self.id,
            "label": self.label,
            "reviewer": self.reviewer,
            "who": self.who,
            "reviewed_at": self.reviewed_at.isoformat(timespec="seconds") + "Z",
            "source": self.source,
        }


class ReviewTables:
    """People's labels and the heads they are checked against (`store.reviews`).

    Args:
        core: the open store.
    """

    def __init__(self, core: StoreCore):
        self.core = core

    def has_tables(self) -> bool:
        """True when the store has the review tables (schema step 4)."""
        return self.core.has_table("reviews")

    def last_review_id(self) -> int:
        """The highest review number in this file (0: none): what a reader of a snapshot asks
        the live file about (`read_reviewed_file`)."""
        return int(self.core.scalar(NEXT_REVIEW_ID)) if self.has_tables() else 0

    def record_heads(self, heads: Sequence[tuple[str, str, list[str], str, str]]) -> None:
        """Remember heads `annotate` ran: (name, task, label names, directory, version)."""
        if not self.has_tables():
            return
        now = utc_now()
        for name, task, names, path, version in heads:
            self.core.con.execute(
                RECORD_HEAD, [name, task, json.dumps(list(names)), path, version, now]
            )

    def head_info(self, head: str) -> HeadInfo | None:
        """What `annotate` recorded of `head`; None when it never ran over this store."""
        row = self.core.con.execute(SELECT_HEAD, [head]).fetchone()
        if row is None:
            return None
        return HeadInfo(row[0], json.loads(row[1]), row[2], row[3])

    def known_heads(self) -> list[str]:
        """Names of the heads `annotate` recorded, sorted."""
        return [r[0] for r in self.core.con.execute(SELECT_HEADS).fetchall()]

    def candidates(
        self, head: str, allowed: np.ndarray | None, other: str | None = None
    ) -> Candidates:
        """Documents `head` labelled and no person has reviewed for it.

        Args:
            head: the head's name in the self.
            allowed: doc ids passing the export's filters (None: every document).
            other: a second head whose label and probability come along (`disagree`).
        """
        con = self.core.con
        with self.core.bound([] if allowed is None else allowed) as ids:
            sql = SELECT_CANDIDATES.format(
                allowed="" if allowed is None else ALLOWED_IN.format(ids=ids)
            )
            t = con.execute(sql, [other, head, head]).fetch_arrow_table()

        def floats(name: str) -> np.ndarray:
            return np.asarray(t.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)

        return Candidates(
            doc_ids=np.asarray(t.column("doc_id").to_numpy(), dtype=np.int64),
            labels=np.asarray(t.column("label").to_pylist(), dtype=object),
            top=floats("probability"),
            runner_up=floats("runner_up"),
            other_labels=np.asarray(t.column("other_label").to_pylist(), dtype=object),
            other_top=floats("other_probability"),
        )

    def export_rows(self, head: str, doc_ids: Sequence[int]) -> list[dict]:
        """Documents to review, in the order of `doc_ids`, with the head's label and score."""
        if not len(doc_ids):
            return []
        with self.core.bound([int(d) for d in doc_ids]) as ids:
            rows = self.core.con.execute(SELECT_EXPORT_ROWS.format(ids=ids), [head]).fetchall()
        by_id = {r[0]: r for r in rows}
        out = []
        for doc in doc_ids:
            r = by_id.get(int(doc))
            if r is None:
                continue
            out.append(
                {
                    "doc_id": r[0],
                    "collection": r[1],
                    "id": r[2],
                    "title": r[3],
                    "text": r[4],
                    "predicted": r[5],
                    "score": None if r[6] is None else round(float(r[6]), 6),
                }
            )
        return out

    def resolve_documents(
        self, keys: Sequence[tuple[str | None, str]]
    ) -> dict[tuple[str | None, str], list[tuple[int, str, str]]]:
        """Stored documents for (collection or None for any, external id) keys.

        Returns:
            key -> [(doc id, collection, content hash)] (empty: not stored; several: the id is
            in more than one collection and the key named none).
        """
        out: dict = {tuple(k): [] for k in keys}
        if not keys:
            return out
        table = pa.table(
            {
                "collection": pa.array([k[0] for k in keys], pa.string()),
                "external_id": pa.array([k[1] for k in keys], pa.string()),
            }
        )
        name = "review_keys_view"
        self.core.con.register(name, table)
        try:
            rows = self.core.con.execute(SELECT_DOCS_BY_KEY.format(keys=name)).fetchall()
        finally:
            self.core.con.unregister(name)
        for doc_id, collection, external_id, digest in rows:
            for key in ((collection, external_id), (None, external_id)):
                if key in out and (doc_id, collection, digest) not in out[key]:
                    out[key].append((doc_id, collection, digest))
        return out

    def content_hash_of(self, doc_id: int) -> str | None:
        """A document's content hash; None when it is not stored."""
        row = self.core.con.execute(
            "SELECT content_hash FROM documents WHERE doc_id = ?", [int(doc_id)]
        ).fetchone()
        return row[0] if row else None

    def current_labels(self, head: str, doc_ids: Sequence[int]) -> dict[int, str]:
        """doc id -> current human label for `head`, for those of `doc_ids` that have one."""
        if not len(doc_ids):
            return {}
        with self.core.bound([int(d) for d in doc_ids]) as ids:
            rows = self.core.con.execute(
                f"SELECT doc_id, label FROM ({CURRENT}) WHERE doc_id IN {ids}", [head]
            ).fetchall()
        return {r[0]: r[1] for r in rows}

    def append(self, head: str, reviews: Sequence[NewReview]) -> list[int]:
        """Append human labels in one transaction (searches see them after the next publish).

        Returns:
            The new review ids, in input order.
        """
        if not reviews:
            return []
        with self.core.transaction():
            start = self.core.scalar(NEXT_REVIEW_ID) + 1
            ids = list(range(start, start + len(reviews)))
            table = pa.Table.from_pylist(
                [
                    {
                        "review_id": i,
                        "doc_id": r.doc_id,
                        "head": head,
                        "label": r.label,
                        "reviewer": r.reviewer,
                        "reviewed_at": r.reviewed_at,
                        "content_hash": r.content_hash,
                        "source": r.source,
                        "who": r.who,
                    }
                    for i, r in zip(ids, reviews)
                ],
                schema=REVIEW_SCHEMA,
            )
            self.core.insert_view(INSERT_REVIEWS, table)
            self.core.bump_data_version()
        return ids

    def delete(self, head: str, review_id: int, who: str | None = None) -> bool:
        """Remove one label the review page stored (the page's undo), only when `who` stored
        it: rows from `review import` and other people's rows are never removed.

        Args:
            who: the token name the row was stored under (None: a server without tokens).
        Returns:
            True when such a row existed.
        """
        args = [review_id, head, PAGE_SOURCE, who]
        with self.core.transaction():
            found = self.core.scalar(COUNT_PAGE_REVIEW, args)
            self.core.con.execute(DELETE_PAGE_REVIEW, args)
            if found:
                self.core.bump_data_version()
        return bool(found)

    def count(self, head: str) -> int:
        """Rows in the review history of `head` (every label a person stored)."""
        return int(self.core.scalar(COUNT_REVIEWS, [head]))

    def history(self, head: str) -> list[ReviewRow]:
        """Every review row of `head`, oldest first: each label a person stored, who stored it
        (the reviewer's name and, for page labels under tokens, the token's name), when and
        from where."""
        return [ReviewRow(*r) for r in self.core.con.execute(SELECT_HISTORY, [head]).fetchall()]

    def reviewed_documents(self, head: str) -> list[tuple[int, str, str, str, bool]]:
        """Every document with a human label for `head`: (doc id, external id, current text,
        label, fresh), fresh false when the text changed since the person labelled it."""
        return [tuple(r) for r in self.core.con.execute(SELECT_REVIEWED, [head]).fetchall()]


def read_reviewed_file(path: Path, head: str, after: int) -> set[int] | None:
    """The documents labelled for `head` in one DuckDB file by reviews numbered above `after`,
    read without the writer lock (`schema.read_briefly`): the review page learns what was
    labelled since the last publish, at a cost that grows with that, not with every label.

    Returns:
        The doc ids, or None when the file cannot be opened now (a writer holds it) or has
        no review table.
    """
    return read_briefly(
        path, lambda con: {r[0] for r in con.execute(REVIEWED_SINCE, [head, after]).fetchall()}
    )
