"""Readers: stream validated records out of corpus files, in batches.

The registered format (`indexer.ingest.formats`) turns a file into raw rows; here they become
Records or Rejections (file, row, reason): types, empty text, NUL bytes, invalid Unicode,
over-long documents, duplicate ids. A file that cannot be read at all (or past some row)
becomes one rejection (row 0: the whole file), not an exception. Nothing is encoded here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import hashlib
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from indexer.errors import InputError
from indexer.ingest.formats import AUTO, corpus_format, get_format, unknown_suffix_reason
from indexer.ingest.formats.base import Unreadable

DEFAULT_ID_FIELDS = ("id", "_id")


@dataclass(frozen=True)
class FieldMap:
    """Which columns hold the id, text and title. Every other column becomes metadata.

    `id_field=None` means `id` or `_id`, whichever the file has; a file with neither gets
    `<file name>:<row>` ids, stable as long as the file keeps its order.
    """

    id_field: str | None = None
    text_field: str = "text"
    title_field: str | None = "title"
    metadata_fields: tuple[str, ...] | None = None  # None: every other column


@dataclass
class Record:
    external_id: str
    text: str
    title: str | None
    metadata: dict
    source: str
    row: int  # 1-based line or row number in the source file
    # when the store first took it in: kept by a store copied into a new generation
    # (`bertindex reindex`); None, as read from a source: now
    ingested_at: dt.datetime | None = None


@dataclass
class Rejected:
    source: str
    row: int
    external_id: str | None
    reason: str


@dataclass
class Batch:
    records: list[Record] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)


class IdRegistry:
    """The ids accepted so far, with the file and row where each was first read.

    One registry per file by default; `run_index` shares one across all the files of a run
    (one collection), so that the first record read with an id wins and every later one, in
    the same file or another, is rejected: a run never stores two versions of one id, and a
    re-run of the same files keeps the same one.

    Kept compact, since a run may read millions of ids: each id as a 128-bit blake2b
    fingerprint and its packed place (source index << 40 | row), 24 bytes, in numpy arrays
    sorted by the fingerprint's high half, plus a dict of the latest claims merged into them
    every RECENT. Two different ids
    share a fingerprint with probability ~n²/2¹²⁹ (≈ 1e-27 for a million ids).
    """

    RECENT = 65536

    def __init__(self) -> None:
        self._recent: dict[bytes, int] = {}  # fingerprint -> packed place, latest claims
        self._hi = np.zeros(0, np.uint64)  # sorted fingerprints (high, low 64 bits) ...
        self._lo = np.zeros(0, np.uint64)
        self._packed = np.zeros(0, np.int64)  # ... and their packed places
        self._sources: list[str] = []
        self._source_index: dict[str, int] = {}

    def claim(self, external_id: str, source: str, row: int) -> tuple[str, int] | None:
        """Record `external_id` as read at (source, row); the earlier (source, row) when the
        id was already taken (and nothing is recorded)."""
        key = hashlib.blake2b(external_id.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        packed = self._recent.get(key)
        if packed is None and len(self._hi):
            packed = self._lookup(key)
        if packed is not None:
            return self._sources[packed >> 40], packed & ((1 << 40) - 1)
        index = self._source_index.get(source)
        if index is None:
            index = self._source_index[source] = len(self._sources)
            self._sources.append(source)
        self._recent[key] = (index << 40) | row
        if len(self._recent) >= self.RECENT:
            self._merge()
        return None

    def claim_many(
        self, external_ids: list[str], source: str, rows: list[int]
    ) -> list[tuple[str, int] | None]:
        """`claim` each id in order (a batch's valid records): the arrays are searched for
        all of them at once, so an id costs its hash and a dict lookup, not a binary search
        from Python (`benchmarks/id_registry.py`)."""
        keys = [
            hashlib.blake2b(i.encode("utf-8", "surrogatepass"), digest_size=16).digest()
            for i in external_ids
        ]
        held = self._lookup_many(keys)
        index = self._source_index.get(source)
        if index is None:
            index = self._source_index[source] = len(self._sources)
            self._sources.append(source)
        recent = self._recent
        out: list[tuple[str, int] | None] = []
        for key, row, packed in zip(keys, rows, held):
            if packed is None:
                packed = recent.get(key)
            if packed is not None:
                out.append((self._sources[packed >> 40], packed & ((1 << 40) - 1)))
                continue
            recent[key] = (index << 40) | row
            out.append(None)
        if len(recent) >= self.RECENT:
            self._merge()
        return out

    def _lookup_many(self, keys: list[bytes]) -> list[int | None]:
        """The packed place of each key in the arrays (None: not there)."""
        found: list[int | None] = [None] * len(keys)
        if not len(self._hi) or not keys:
            return found
        his = np.frombuffer(b"".join(keys), dtype="<u8").reshape(-1, 2)[:, 0]
        pos = np.minimum(np.searchsorted(self._hi, his), len(self._hi) - 1)
        for i in np.flatnonzero(self._hi[pos] == his):  # a high half held: compare exactly
            found[i] = self._lookup(keys[i])
        return found

    def preload(self, keys: np.ndarray, source: str) -> None:
        """Claim the fingerprints `keys` ((n, 2) uint64, as `keys_by_source` gives) for
        `source`, a file not read again (`indexer.store.sources`): a later record with one of
        them is rejected as it would have been had the file been read. Claims already made
        stay first. Their row is 0 (unknown)."""
        if not len(keys):
            return
        self._merge()
        index = self._source_index.get(source)
        if index is None:
            index = self._source_index[source] = len(self._sources)
            self._sources.append(source)
        self._insert(keys[:, 0], keys[:, 1], np.full(len(keys), index << 40, np.int64))

    def keys_by_source(self) -> dict[str, np.ndarray]:
        """Each source's accepted ids as fingerprints, (n, 2) uint64 (preloaded ones too)."""
        self._merge()
        owners = self._packed >> 40
        order = np.argsort(owners, kind="stable")
        bounds = np.searchsorted(owners[order], np.arange(len(self._sources) + 1))
        keys = np.stack([self._hi, self._lo], axis=1)[order]
        return {source: keys[bounds[i] : bounds[i + 1]] for i, source in enumerate(self._sources)}

    def _lookup(self, key: bytes) -> int | None:
        hi, lo = (np.uint64(int.from_bytes(key[i : i + 8], "little")) for i in (0, 8))
        pos = int(np.searchsorted(self._hi, hi))
        while pos < len(self._hi) and self._hi[pos] == hi:
            if self._lo[pos] == lo:
                return int(self._packed[pos])
            pos += 1
        return None

    def _merge(self) -> None:
        if not self._recent:
            return
        keys = np.frombuffer(b"".join(self._recent), dtype="<u8").reshape(-1, 2)
        packed = np.fromiter(self._recent.values(), np.int64, len(self._recent))
        self._insert(keys[:, 0], keys[:, 1], packed)
        self._recent = {}

    def _insert(self, hi: np.ndarray, lo: np.ndarray, packed: np.ndarray) -> None:
        """Insert claims into the arrays, kept sorted by the high 64 bits only (`_lookup`
        scans a run of equal ones): the new claims sorted, then placed by binary search, after
        any equal ones (an earlier claim stays first). One pass over the arrays, not a sort of
        them: merging every RECENT claims into 10M ids had cost a lexsort of up to 10M pairs
        each time, quadratic in all (`benchmarks/id_registry.py`)."""
        order = np.argsort(hi, kind="stable")
        hi, lo, packed = hi[order], lo[order], packed[order]
        at = np.searchsorted(self._hi, hi, side="right")
        self._hi = np.insert(self._hi, at, hi)
        self._lo = np.insert(self._lo, at, lo)
        self._packed = np.insert(self._packed, at, packed)


def read_batches(
    path: Path,
    fmt: str = "auto",
    fields: FieldMap = FieldMap(),
    batch_size: int = 2048,
    *,
    max_chars: int | None = None,
    ids: IdRegistry | None = None,
) -> Iterator[Batch]:
    """Yield validated records of one file, `batch_size` rows at a time.

    Args:
        path: the corpus file (gzip allowed where its format says so).
        fmt: a registered format name (`indexer.ingest.formats.format_names`); `auto`
            decides by file name.
        fields: the column mapping (a format with fixed columns, BEIR, overrides it).
        batch_size: rows per batch.
        max_chars: documents whose title + text hold more characters are rejected (the
            reason names `long_documents.max_chars`); None or 0: no limit.
        ids: the run's id registry (first occurrence wins across files); None: one per file.
    Returns:
        An iterator of Batches.
    Raises:
        InputError: `fmt` is unknown, or `auto` cannot tell the format from the name.
    """
    if fmt == AUTO:
        found = corpus_format(path)
        if found is None:
            raise InputError(f"{path}: {unknown_suffix_reason()}")
    else:
        found = get_format(fmt)
    if found.fields is not None:
        fields = dataclasses.replace(fields, **found.fields)
    validator = _Validator(path, fields, max_chars=max_chars, ids=ids)
    producer = found.frames(path, batch_size)
    source = str(path)
    next_row = 1
    while True:
        try:
            first_row, frame, bad = next(producer)
        except StopIteration:
            return
        except Unreadable as exc:
            yield Batch(rejected=[Rejected(source, exc.row, None, str(exc))])
            return
        except (OSError, EOFError, zlib.error) as exc:  # e.g. a truncated or bad .gz
            row = 0 if next_row == 1 else next_row
            where = "the file" if row == 0 else f"the file from row {row} on"
            yield Batch(
                rejected=[
                    Rejected(
                        source,
                        row,
                        None,
                        f"cannot read {where}: {exc}; the rows before it "
                        "were read. Re-create or re-compress the file",
                    )
                ]
            )
            return
        numbers = [r["__row"] for r in frame] + [row for row, _ in bad]
        next_row = max(numbers, default=next_row - 1) + 1
        yield validator.check(
            first_row, frame, [Rejected(source, row, None, reason) for row, reason in bad]
        )


def read_files(
    files: list[Path],
    unchanged: dict[str, np.ndarray],
    fmt: str,
    fields: FieldMap,
    batch_size: int,
    max_chars: int | None,
) -> Iterator[int | tuple[str, Batch] | IdRegistry]:
    """Read `files` in order, one id registry across them (first occurrence wins).

    Args:
        files: the files, in the run's order.
        unchanged: str(path) -> id fingerprints ((n, 2) uint64) of files not read again:
            their ids are claimed at their place (`IdRegistry.preload`).
        fmt, fields, batch_size, max_chars: as `read_batches` takes them.
    Returns:
        An iterator of each file's number (1-based) before its batches, each batch with its
        file (`(str(path), batch)`), and the registry last: what `indexer.core.in_process`
        pickles back when a child process reads.
    """
    ids = IdRegistry()
    for i, path in enumerate(files, start=1):
        yield i
        keys = unchanged.get(str(path))
        if keys is not None:
            ids.preload(keys, str(path))
            continue
        for batch in read_batches(path, fmt, fields, batch_size, ids=ids, max_chars=max_chars):
            yield str(path), batch
    yield ids


class _Validator:
    """Turn raw rows into Records; reject rows with no usable id or text.

    Rules (README, "Input files"): the id is a non-empty string or number; the text a string
    (bytes must be UTF-8); the title a string, a number or null; no NUL byte (U+0000) or
    unpaired surrogate in id, title or text, none of the latter in metadata either; title +
    text not empty and at most `max_chars` characters; the first record read with an id wins.
    """

    def __init__(
        self,
        path: Path,
        fields: FieldMap,
        max_chars: int | None = None,
        ids: IdRegistry | None = None,
    ):
        self.path = path
        self.source = str(path)
        self.fields = fields
        self.max_chars = max_chars or None
        self.ids = ids if ids is not None else IdRegistry()
        self.id_field: str | None = fields.id_field
        self.id_resolved = fields.id_field is not None

    def _resolve_id_field(self, row: dict) -> None:
        if not self.id_resolved:
            self.id_field = next((f for f in DEFAULT_ID_FIELDS if f in row), None)
            self.id_resolved = True

    def check(self, first_row: int, rows: list[dict], bad: list[Rejected]) -> Batch:
        """Validate the rows, then claim the valid ones' ids in row order, all at once."""
        batch = Batch(rejected=list(bad))
        valid: list[Record] = []
        for row in rows:
            number = row.pop("__row")
            outcome = self._record(row, number)
            if isinstance(outcome, Record):
                valid.append(outcome)
            else:
                batch.rejected.append(outcome)
        ids, numbers = [r.external_id for r in valid], [r.row for r in valid]
        firsts = self.ids.claim_many(ids, self.source, numbers)
        for record, first in zip(valid, firsts):
            if first is None:
                batch.records.append(record)
            else:
                batch.rejected.append(self._duplicate(record, *first))
        batch.rejected.sort(key=lambda r: r.row)
        return batch

    def _duplicate(self, record: Record, source: str, row_number: int) -> Rejected:
        if row_number == 0:  # a file skipped as unchanged (`IdRegistry.preload`)
            where = f"{source}, unchanged since an earlier run and not read again"
        elif source == self.source:
            where = f"row {row_number}"
        else:
            where = f"{source} row {row_number}"
        return self._reject(
            record.row,
            record.external_id,
            f"duplicate id '{record.external_id}' (first at {where}); "
            "the first record read with an id is kept",
        )

    def _reject(self, number: int, ext_id: str | None, reason: str) -> Rejected:
        return Rejected(self.source, number, ext_id, reason)

    def _record(self, row: dict, number: int) -> Record | Rejected:
        self._resolve_id_field(row)
        ext_id = None
        try:
            ext_id = self._external_id(row, number)
            text = self._text(row)
            title = self._title(row)
            if not text.strip() and not title:
                raise _Bad("empty text")
            size = len(text) + len(title or "")
            if self.max_chars is not None and size > self.max_chars:
                raise _Bad(
                    f"document is {size:,} characters, over long_documents.max_chars "
                    f"({self.max_chars:,}); raise that limit in config.yaml (0: no "
                    "limit) or split the document"
                )
            metadata = self._metadata(row)
        except _Bad as bad:
            return self._reject(number, ext_id, str(bad))
        return Record(ext_id, text, title, metadata, self.source, number)

    def _external_id(self, row: dict, number: int) -> str:
        """The record's id: its id field as a string, or `file:row` without one."""
        if self.id_field is None:
            return f"{self.path.name}:{number}"
        if self.id_field not in row:
            raise _Bad(f"missing id field '{self.id_field}'")
        value = row.get(self.id_field)
        if isinstance(value, (dict, list, bool, bytes)):
            raise _Bad(
                f"id field '{self.id_field}' must be a string or number, got {type(value).__name__}"
            )
        if (
            value is None
            or (isinstance(value, float) and math.isnan(value))
            or str(value).strip() == ""
        ):
            raise _Bad(f"empty id field '{self.id_field}'")
        ext_id = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
        problem = _string_problem(ext_id)
        if problem:
            raise _Bad(f"id {problem}")
        return ext_id

    def _text(self, row: dict) -> str:
        f = self.fields
        if f.text_field not in row:
            raise _Bad(
                f"missing text field '{f.text_field}' (columns: "
                f"{', '.join(sorted(row))}); map it with --text-field"
            )
        text = row.get(f.text_field)
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _Bad(f"invalid UTF-8 in the text at byte {exc.start}") from None
        if not isinstance(text, str):
            raise _Bad(
                "text is null"
                if text is None
                else f"text must be a string, got {type(text).__name__}"
            )
        problem = _string_problem(text)
        if problem:
            raise _Bad(f"text {problem}")
        return text

    def _title(self, row: dict) -> str | None:
        f = self.fields
        title = row.get(f.title_field) if f.title_field else None
        if isinstance(title, float) and not math.isfinite(title):
            title = None
        if isinstance(title, (dict, list, bytes)):
            raise _Bad(f"title must be a string, a number or null, got {type(title).__name__}")
        if title is not None and not isinstance(title, str):
            title = str(title)
        title = title.strip() if title else None
        problem = _string_problem(title) if title else None
        if problem:
            raise _Bad(f"title {problem}")
        return title

    def _metadata(self, row: dict) -> dict:
        f = self.fields
        skip = {self.id_field, f.text_field, f.title_field}
        if f.metadata_fields is None:
            metadata = {k: _clean(v) for k, v in row.items() if k not in skip}
        else:
            metadata = {k: _clean(row.get(k)) for k in f.metadata_fields}
        if _has_surrogate(metadata):
            raise _Bad(
                "metadata holds an unpaired surrogate (invalid Unicode, e.g. a lone "
                "\\ud800 escape); fix the record"
            )
        return metadata


class _Bad(Exception):
    """Why a record is rejected (caught in `_record`, which files it with its row)."""


def _string_problem(value: str) -> str | None:
    """Why an id, title or text cannot be stored as it is; None when it can."""
    if "\x00" in value:
        return (
            f"holds a NUL byte (U+0000) at character {value.index(chr(0))}: binary or "
            "damaged data; remove it"
        )
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (
                f"holds an unpaired surrogate (U+{ord(value[exc.start]):04X}) at character "
                f"{exc.start}: not valid Unicode; fix the record"
            )
    return None


def _has_surrogate(value) -> bool:
    if isinstance(value, str):
        if value.isascii():
            return False
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    return False


def _clean(value):
    """JSON-native metadata, so that it reads back equal to what was written (a re-run sees
    unchanged metadata as unchanged): NaN and infinities become null; dates and times ISO
    strings; decimals and other scalars their text; bytes their UTF-8 text (else hex)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.hex()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return str(value)


class TitledText(Protocol):
    """What `document_text` reads: a record's, or a stored document's, title and text."""

    @property
    def title(self) -> str | None: ...

    @property
    def text(self) -> str: ...


def document_text(record: TitledText) -> str:
    """The text that is encoded: title and body joined by a space (as MTEB does for BEIR)."""
    return f"{record.title} {record.text}".strip() if record.title else record.text
