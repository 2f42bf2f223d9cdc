"""Export the documents to label next and import labelled rows: the review loop over an open
store. Export ranks a head's annotated, unreviewed documents by a strategy, keeps one per
near-duplicate group and leaves documents already reviewed out. Import checks every row (its
own line and reason when refused, the rest kept), lets the last row of a duplicated id win
(reported), and appends the labels: a person's label is never replaced, only followed by a
newer one. Files are read and written by `indexer.review.files`; SQL is `indexer.store.reviews`.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from indexer.core.timeutil import parse_utc, utc_now
from indexer.errors import InputError
from indexer.heads.registry import capabilities
from indexer.review import strategies as st
from indexer.review.files import RawRow
from indexer.store import NewReview, Store
from indexer.store.reviews import PAGE_SOURCE

REVIEWER_ENV = "BERTINDEX_REVIEWER"  # who labelled, when the file does not say
REJECTIONS_SHOWN = 1000  # rejected rows kept in an import summary


# ---- export --------------------------------------------------------------------------------


def dedup_groups(store: Store, doc_ids: Sequence[int]) -> dict[int, int]:
    """doc id -> near-duplicate group id (`bertindex dedup`); documents never grouped are
    left out, so a store nobody ran `dedup` on groups nothing."""
    return dict(store.dedup.groups_of([int(d) for d in doc_ids]))


def select_for_review(
    store: Store,
    head: str,
    strategy: str = "uncertain",
    n: int = 200,
    collection: str | None = None,
    where: Sequence[tuple[str, str]] = (),
    other: str | None = None,
    seed: int = 0,
) -> list[dict]:
    """The `n` documents to label next for `head`.

    Args:
        store: an open store annotated by `head` (`bertindex annotate`).
        strategy: `uncertain` (lowest top-class probability), `margin` (smallest gap between
            the top two), `disagree` (`head` and `other` differ, least sure first) or `random`.
        n: how many documents.
        collection, where: only documents passing these filters.
        other: the second head of `disagree`.
        seed: the `random` permutation.
    Returns:
        Export rows (`files.EXPORT_FIELDS` plus `doc_id`), best first, `label` empty.
    Raises:
        InputError: unknown strategy or head, `disagree` without `other`.
    """
    st.check_strategy(strategy)
    if (strategy == "disagree") != (other is not None):
        raise InputError(
            "--strategy disagree needs --other HEAD (the second head), and "
            "--other is only for disagree"
        )
    names = store.reviews.known_heads()
    for name in (head, other):
        if name is not None and store.reviews.head_info(name) is None:
            raise InputError(
                f"head '{name}' has not annotated this store (known: "
                f"{', '.join(names) or 'none'}); run `bertindex annotate --heads "
                f"{name}=DIR` first"
            )
    allowed = store.filters.doc_ids(collection, where)
    c = store.reviews.candidates(head, allowed, other)
    if strategy == "uncertain":
        order = st.uncertain_order(c.top)
    elif strategy == "margin":
        order = st.margin_order(c.top, c.runner_up)
    elif strategy == "disagree":
        has_other = np.flatnonzero(np.asarray([x is not None for x in c.other_labels], dtype=bool))
        order = has_other[
            st.disagree_order(
                c.labels[has_other],
                c.other_labels[has_other],
                c.top[has_other],
                c.other_top[has_other],
            )
        ]
    else:
        order = st.random_order(len(c.doc_ids), seed)
    ranked = c.doc_ids[order].tolist()
    # the collapse needs the groups of the ranked candidates only; read a bounded prefix
    wanted: list[int] = []
    step = max(4 * n, 256)
    for start in range(0, len(ranked), step):
        part = ranked[: start + step]
        wanted = st.collapse_groups(part, dedup_groups(store, part))
        if len(wanted) >= n:
            break
    rows = store.reviews.export_rows(head, wanted[:n])
    for row in rows:
        row.update(head=head, label="")
    return rows


# ---- import --------------------------------------------------------------------------------


@dataclass
class ImportSummary:
    """What an import did, row by row where it refused."""

    file: str
    head: str
    rows: int = 0
    stored: int = 0  # new human labels (first for the document, or a changed one)
    changed: int = 0  # of `stored`: a person's earlier label replaced by a newer one
    unchanged: int = 0  # the same label as the current human one: nothing written
    unlabelled: int = 0  # `label` left empty: skipped
    rejected: list[dict] = field(default_factory=list)  # {"line", "id", "reason"}
    duplicates: list[dict] = field(default_factory=list)  # {"id", "lines", "kept"}
    rejected_total: int = 0

    def to_dict(self) -> dict:
        return {
            "file": self.file,
            "head": self.head,
            "rows": self.rows,
            "stored": self.stored,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "unlabelled": self.unlabelled,
            "rejected": self.rejected_total,
            "rejections": self.rejected,
            "duplicates": self.duplicates,
        }

    def reject(self, line: int, item_id: object, reason: str) -> None:
        self.rejected_total += 1
        if len(self.rejected) < REJECTIONS_SHOWN:
            self.rejected.append({"line": line, "id": item_id, "reason": reason})


def default_reviewer() -> str:
    """`$BERTINDEX_REVIEWER`, else the login name, else `unknown`."""
    name = os.environ.get(REVIEWER_ENV)
    if name:
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _text(fields: Mapping, key: str) -> str | None:
    value = fields.get(key)
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise TypeError(f"'{key}' must be text, not {type(value).__name__}")
    return value.strip()


def _when(value: str | None, now: datetime) -> datetime:
    if not value:
        return now
    try:
        return parse_utc(value)
    except ValueError:
        raise ValueError(
            f"reviewed_at '{value}' is not an ISO date-time (e.g. 2026-12-01T10:30:00Z)"
        ) from None


@dataclass(frozen=True)
class _Checked:
    line: int
    collection: str | None
    id: str
    label: str
    reviewer: str
    when: datetime


def import_rows(
    store: Store,
    rows: Iterable[RawRow],
    head: str,
    source: str,
    collection: str | None = None,
    reviewer: str | None = None,
) -> ImportSummary:
    """Validate labelled rows and append the good ones as human labels of `head`.

    Refused with their line and reason: unreadable rows, a missing `id`, a label that is not
    one of the head's, a row naming another head, a bad `reviewed_at`, an id not in the store
    (deleted since the export) or in several collections without a `collection`. A label
    left empty is skipped. Of rows with the same document the last wins; the others are
    reported under `duplicates`. All good rows are written in one transaction.

    Args:
        store: a writable store `head` annotated.
        rows: the file's rows (`files.read_review_file`).
        head: the head the labels are for.
        source: recorded with each label (the file name, or `page`).
        collection: the collection of rows that name none.
        reviewer: who labelled rows that name nobody (default `default_reviewer()`).
    Returns:
        The summary; nothing is written when no row is good.
    """
    info = store.reviews.head_info(head)
    if info is None:
        known = ", ".join(store.reviews.known_heads()) or "none"
        raise InputError(
            f"head '{head}' has not annotated this store (known: {known}); run "
            f"`bertindex annotate --heads {head}=DIR` first, or fix --head"
        )
    if not capabilities(info.task).reviewable:
        raise InputError(
            f"head '{head}' is a {info.task} head; review import takes classifier "
            "labels (entity spans are not supported yet)"
        )
    summary = ImportSummary(file=source, head=head)
    now = utc_now()
    who = reviewer or default_reviewer()
    checked: list[_Checked] = []
    for raw in rows:
        summary.rows += 1
        item = _check_row(raw, head, info.label_names, collection, who, now, summary)
        if item is not None:
            checked.append(item)
    last = _resolve(store, checked, summary)
    current = store.reviews.current_labels(head, list(last))
    new: list[NewReview] = []
    for doc_id, (item, digest) in last.items():
        if current.get(doc_id) == item.label:
            summary.unchanged += 1
            continue
        summary.changed += doc_id in current
        new.append(NewReview(doc_id, item.label, item.reviewer, item.when, digest, source))
    store.reviews.append(head, new)
    summary.stored = len(new)
    return summary


def _resolve(
    store: Store, checked: list[_Checked], summary: ImportSummary
) -> dict[int, tuple[_Checked, str]]:
    """The stored document of each checked row (doc id -> the row that wins, the text's
    digest): a row whose id names no document, or documents in several collections, is
    refused; of rows with the same document the last wins, the others are `duplicates`."""
    found = store.reviews.resolve_documents(
        sorted({(c.collection, c.id) for c in checked}, key=lambda k: (k[0] or "", k[1]))
    )
    last: dict[int, tuple[_Checked, str]] = {}
    lines: dict[int, list[int]] = {}
    for item in checked:
        docs = found.get((item.collection, item.id), [])
        if not docs:
            where = f"collection '{item.collection}'" if item.collection else "the store"
            summary.reject(
                item.line,
                item.id,
                f"no document '{item.id}' in {where} (deleted "
                "since the export, or a wrong collection)",
            )
            continue
        if len(docs) > 1:
            summary.reject(
                item.line,
                item.id,
                f"id '{item.id}' is in collections "
                f"{sorted(d[1] for d in docs)}; add a 'collection' column or --collection",
            )
            continue
        doc_id, _, digest = docs[0]
        last[doc_id] = (item, digest)  # the last row of a document wins
        lines.setdefault(doc_id, []).append(item.line)
    for doc_id, seen in lines.items():
        if len(seen) > 1:
            summary.duplicates.append({"id": last[doc_id][0].id, "lines": seen, "kept": seen[-1]})
    return last


def _check_row(
    raw: RawRow,
    head: str,
    label_names: list[str],
    collection: str | None,
    reviewer: str,
    now: datetime,
    summary: ImportSummary,
) -> _Checked | None:
    """One row checked (None: refused or unlabelled, counted in `summary`)."""
    if raw.fields is None:
        summary.reject(raw.line, None, raw.error or "unreadable row")
        return None
    f = raw.fields
    try:
        item_id = _text(f, "id")
        label = _text(f, "label")
        row_head = _text(f, "head")
        row_collection = _text(f, "collection") or collection
        who = _text(f, "reviewer") or reviewer
        when = _when(_text(f, "reviewed_at"), now)
    except (TypeError, ValueError) as exc:
        summary.reject(raw.line, f.get("id") if isinstance(f.get("id"), str) else None, str(exc))
        return None
    if not item_id:
        summary.reject(raw.line, None, "no 'id': every row needs the document id the export wrote")
        return None
    if row_head and row_head != head:
        summary.reject(
            raw.line,
            item_id,
            f"a label of head '{row_head}', not '{head}'; import this file with --head {row_head}",
        )
        return None
    if not label:
        summary.unlabelled += 1
        return None
    if label not in label_names:
        summary.reject(
            raw.line, item_id, f"label '{label}' is not one of head '{head}''s labels {label_names}"
        )
        return None
    return _Checked(raw.line, row_collection, item_id, label, who, when)


def page_review(
    store: Store,
    head: str,
    doc_id: int,
    label: str,
    reviewer: str | None = None,
    who: str | None = None,
) -> int:
    """Store one label from the review page, checked as `review import` checks a row.

    `who` is the name of the token the request carried (None: the server has no tokens); it
    is also the reviewer when the page names none.

    Returns:
        The new review id (the page's undo deletes it).
    Raises:
        InputError: unknown head or label, or a document no longer stored.
    """
    info = store.reviews.head_info(head)
    if info is None or label not in info.label_names:
        names = info.label_names if info else []
        raise InputError(f"label '{label}' is not one of head '{head}''s labels {names}")
    digest = store.reviews.content_hash_of(doc_id)
    if digest is None:
        raise InputError(f"document {doc_id} is no longer in the store (deleted since)")
    now = utc_now()
    review = NewReview(
        doc_id, label, reviewer or who or default_reviewer(), now, digest, PAGE_SOURCE, who
    )
    return store.reviews.append(head, [review])[0]
