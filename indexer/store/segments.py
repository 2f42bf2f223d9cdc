"""Writes a published version's snapshot as immutable Parquet segments holding only what
changed since the previous version, merges them, and collects the ones no reader needs.

Each store table readers use (every base table; `vectors` without `embedding`, which only the
writer reads, from the live file) is a list of segments under `index/segments/`, oldest first:
`<table>-<seq>.parquet` (rows) and `<table>-<seq>.dead.parquet` (tombstones). Every row
carries `_h`, DuckDB's 64-bit `hash()` of all its columns (for a table without a primary key
or unique constraint, of the columns and the row's ordinal among identical rows, so copies
count), and `_seg`, its segment's number. A publish reads the published `_h` (8 bytes a row),
anti-joins it with the live rows' hashes, and writes the live rows whose `_h` is not
published and tombstones for the published `_h` no longer live: a changed row is one of each.
A tombstone in segment k hides rows with that `_h` in segments before k.

Collisions: two different rows of one table share an `_h` with probability about n^2 / 2^65
(n rows: 1e6 rows ~ 3e-8, 1e8 rows ~ 3e-4), and only a changed row colliding with a published
one of the same table matters; a collision would leave that one change out of the snapshot
until the row changes again. Hashes are DuckDB's: after an upgrade that changes `hash()` the
first publish rewrites each table once (all rows new, all published ones tombstoned).

Merging: after a publish adds a table's newest segment, the newest segments are merged while
the next older one holds at most `MERGE_RATIO` times their rows (rows plus tombstones), so
sizes grow geometrically and a table keeps O(log N) segments; each row is rewritten O(log N)
times, so a publish costs O(changed * log N) amortised. A merge drops the rows its own
tombstones hide; one that reaches the oldest segment drops all tombstones.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexer.core.faults import crash_point
from indexer.core.fsio import fsync_dir, fsync_file
from indexer.errors import StoreError
from indexer.records.versions import MANIFEST_FILE, current_version, list_versions, version_dir
from indexer.store.row_pack import pack_name, write_missing
from indexer.store.schema import ALL_META, COUNT_CHUNKS, read_meta, scalar
from indexer.store.snapshot import (
    FORMAT,
    HASH,
    SEG,
    lock_path,
    parquet_list,
    read_manifest,
    segment_problems,
    segments_dir,
    visible_sql,
)

if TYPE_CHECKING:
    import duckdb

CHECKPOINT = "CHECKPOINT"
MERGE_RATIO = 2
# columns readers never read from a snapshot
LEFT_OUT = {"vectors": ("embedding",)}
# row groups of 2048 rows: a search's few hits are read by id straight from the row groups
# that hold them (`segment_fetch`, one ~0.5 ms decode each at 10M), so a smaller group decodes
# less; through DuckDB's views (which walk every group's statistics per query) 2048 had cost
# more than 8192 at 10M (benchmarks/row_groups.py: results/row_groups_10m.json)
_PARQUET = "(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 2048)"
_SEQ = re.compile(r"^(?:m|[a-z_]+-)(\d+)")
_TABLES = (
    "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database() "
    "AND table_schema = 'main' AND table_type = 'BASE TABLE' ORDER BY table_name"
)
_COLUMNS = (
    "SELECT column_name, data_type FROM information_schema.columns WHERE table_catalog = "
    "current_database() AND table_schema = 'main' AND table_name = ? ORDER BY ordinal_position"
)
_KEYED = (
    "SELECT DISTINCT table_name FROM duckdb_constraints() WHERE database_name = "
    "current_database() AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')"
)


def publish_segments(con: duckdb.DuckDBPyConnection, folder: Path) -> dict[str, Any]:
    """Write the segments that bring the current version's snapshot to the live store, and
    the new version's manifest (`folder/snapshot.json` and its lock copy in `segments/`).

    Only the writer calls this, nothing writing meanwhile. The previous version's segments are
    the base when they all read as recorded; otherwise (none, a legacy copy, one missing or
    damaged) every table is written whole, which is how `doctor --repair` rebuilds them.

    Args:
        con: the writer's connection to the live store.
        folder: the (temporary) version folder being published, `<store>/index/.vN.tmp`.
    Returns:
        The manifest written.
    """
    con.execute(CHECKPOINT)  # a reader of the live file (`read_briefly`) sees no WAL
    store_dir = folder.parent.parent
    where = segments_dir(store_dir)
    where.mkdir(exist_ok=True)
    seqs = _sequence(where)
    previous = _previous_tables(store_dir)
    tables = _live_tables(con)
    manifest: dict[str, Any] = {"format": FORMAT, "id": f"m{next(seqs)}", "tables": {}}
    for i, (name, (columns, keyed)) in enumerate(tables.items()):
        if i == len(tables) // 2:
            crash_point("snapshot.partial")
        before = previous.get(name)
        if before is not None and before["columns"] != columns:
            before = None  # a migration changed the columns: written whole
        segments = _diff(con, where, name, columns, keyed, before, next(seqs))
        manifest["tables"][name] = {
            "columns": columns,
            "segments": _merge(con, where, name, segments, seqs),
        }
    data_version = read_meta(con, "data_version")
    manifest["facts"] = {
        "data_version": int(data_version) if data_version is not None else 0,
        "chunks": int(scalar(con, COUNT_CHUNKS)),
        "meta": dict(con.execute(ALL_META).fetchall()),  # what readers ask (`StoreCore.meta`)
    }
    write_missing(where, manifest)  # derived: a reader without one reads the Parquet
    text = json.dumps(manifest, indent=1)
    _write_text(lock_path(store_dir, manifest["id"]), text)
    fsync_dir(where)
    _write_text(folder / MANIFEST_FILE, text)
    return manifest


def _sequence(where: Path) -> Iterator[int]:
    """Segment and manifest numbers above any file in `where` (leftovers included)."""
    top = 0
    for path in where.iterdir():
        match = _SEQ.match(path.name.removeprefix(".tmp-"))
        if match:
            top = max(top, int(match.group(1)))
    while True:
        top += 1
        yield top


def _live_tables(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[list[list[str]], bool]]:
    """Each live base table: its columns ([name, type], as readers see them) and whether a
    primary key or unique constraint makes its rows distinct."""
    keyed = {row[0] for row in con.execute(_KEYED).fetchall()}
    out = {}
    for (name,) in con.execute(_TABLES).fetchall():
        columns = [
            [column, kind]
            for column, kind in con.execute(_COLUMNS, [name]).fetchall()
            if column not in LEFT_OUT.get(name, ())
        ]
        out[name] = (columns, name in keyed)
    return out


def _previous_tables(store_dir: Path) -> dict[str, dict[str, Any]]:
    """The current version's tables to diff against; empty (write everything) when it has no
    manifest or a segment of it is missing or damaged."""
    version = current_version(store_dir)
    if version is None:
        return {}
    folder = version_dir(store_dir, version)
    if not (folder / MANIFEST_FILE).is_file():
        return {}
    try:
        if segment_problems(store_dir, folder):
            return {}
        return read_manifest(folder / MANIFEST_FILE)["tables"]
    except (StoreError, KeyError):
        return {}


def _quoted(columns: list[list[str]]) -> str:
    return ", ".join(f'"{name}"' for name, _ in columns)


def _live_sql(name: str, columns: list[list[str]], keyed: bool) -> str:
    """The live rows with their `_h`: the hash of all columns, and for a table whose rows
    may repeat, of that and the row's ordinal among its identical copies; and `_r`, the
    row's rowid."""
    cols = _quoted(columns)
    if keyed:
        return f'SELECT {cols}, hash({cols}) AS {HASH}, rowid AS _r FROM "{name}"'
    return (
        f"SELECT {cols}, hash(_h0, row_number() OVER (PARTITION BY _h0)) AS {HASH}, _r "
        f'FROM (SELECT {cols}, hash({cols}) AS _h0, rowid AS _r FROM "{name}")'
    )


def _diff(
    con: duckdb.DuckDBPyConnection,
    where: Path,
    name: str,
    columns: list[list[str]],
    keyed: bool,
    before: dict[str, Any] | None,
    seq: int,
) -> list[dict[str, Any]]:
    """The table's segments after adding segment `seq`: the live rows not published and
    tombstones for the published rows not live (the whole table when `before` is None).

    The diff is done on hashes alone (`_live`: rowid and `_h`, 16 bytes a row), then only the
    new rows are read whole, by rowid: an anti join of the whole rows against the published
    hashes spilled every row's columns to DuckDB's temporary files once the hashes passed
    its memory limit (10M documents: a forced rebuild's snapshot filled 15 GB of disk)."""
    live = _live_sql(name, columns, keyed)
    names = [f'"{column}"' for column, _ in columns]
    old = before["segments"] if before is not None else []
    if any(s["rows"] for s in old):
        con.execute(f"CREATE OR REPLACE TEMP TABLE _pub AS {visible_sql(where, old, f'r.{HASH}')}")
        con.execute(f"CREATE OR REPLACE TEMP TABLE _live AS SELECT _r, {HASH} FROM ({live})")
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _new AS SELECT l._r, l.{HASH} FROM _live l "
            f"ANTI JOIN _pub p USING ({HASH})"
        )
        # the table streams through the join in its order (one thread: `_copy`), the new
        # rows' hashes are the build side
        new_rows = (
            f"SELECT {', '.join('t.' + n for n in names)}, n.{HASH}, {seq}::BIGINT AS {SEG} "
            f'FROM "{name}" t JOIN _new n ON t.rowid = n._r'
        )
        gone = (
            f"SELECT p.{HASH}, {seq}::BIGINT AS {SEG} FROM _pub p ANTI JOIN _live l USING ({HASH})"
        )
    else:
        whole = ", ".join("l." + n for n in names)
        new_rows, gone = f"SELECT {whole}, l.{HASH}, {seq}::BIGINT AS {SEG} FROM ({live}) l", None
    segment = _segment(con, where, f"{name}-{seq}", new_rows, gone)
    if gone is not None:
        con.execute("DROP TABLE _pub; DROP TABLE _live; DROP TABLE _new")
    return [*old, segment] if segment else list(old)


def _segment(
    con: duckdb.DuckDBPyConnection, where: Path, stem: str, rows: str | None, dead: str | None
) -> dict[str, Any] | None:
    """Write segment `stem` (`<table>-<seq>`): the result of `rows` as its rows, of `dead`
    as its tombstones; None when both are empty (no file left)."""
    out: dict[str, Any] = {"seq": int(stem.rpartition("-")[2]), "rows": None, "n_rows": 0}
    out |= {"dead": None, "n_dead": 0}
    for key, sql, suffix in (("rows", rows, ".parquet"), ("dead", dead, ".dead.parquet")):
        count = _copy(con, sql, where / f"{stem}{suffix}") if sql is not None else 0
        if count:
            out[key], out[f"n_{key}"] = f"{stem}{suffix}", count
    return out if out["rows"] or out["dead"] else None


def merge_tail(sizes: list[int]) -> int:
    """Where the merge of the newest segments starts: the newest segments are taken while
    the next older one holds at most MERGE_RATIO times their rows.

    Args:
        sizes: each segment's rows plus tombstones, oldest first.
    Returns:
        The index of the oldest segment to merge (len - 1: no merge).
    """
    start = len(sizes) - 1
    total = sizes[start] if sizes else 0
    while start > 0 and sizes[start - 1] <= MERGE_RATIO * total:
        start -= 1
        total += sizes[start]
    return start


def _merge(
    con: duckdb.DuckDBPyConnection,
    where: Path,
    name: str,
    segments: list[dict[str, Any]],
    seqs: Iterator[int],
) -> list[dict[str, Any]]:
    """Merge the newest segments by `merge_tail`'s rule into one new segment."""
    start = merge_tail([s["n_rows"] + s["n_dead"] for s in segments])
    tail = segments[start:]
    if len(tail) < 2:
        return segments
    seq = next(seqs)
    rows = None
    if any(s["rows"] for s in tail):
        rows = visible_sql(where, tail, f"r.* EXCLUDE ({SEG}), {seq}::BIGINT AS {SEG}")
    dead = [s["dead"] for s in tail if s["dead"]]
    gone = None
    if start > 0 and dead:  # tombstones still hide rows of older segments
        files = parquet_list(where, dead)
        gone = f"SELECT DISTINCT {HASH}, {seq}::BIGINT AS {SEG} FROM read_parquet({files})"
    merged = _segment(con, where, f"{name}-{seq}", rows, gone)
    return segments[:start] + ([merged] if merged else [])


def _copy(con: duckdb.DuckDBPyConnection, select: str, target: Path) -> int:
    """Write `select` to `target` as zstd Parquet: a temporary name, fsynced, renamed. An
    empty result leaves no file. Returns the rows written."""
    tmp = target.with_name(f".tmp-{target.name}")
    quoted = str(tmp).replace("'", "''")
    # one thread: an ordered parallel COPY buffers the threads' batches to keep their order,
    # past the writer's 128 MB with 10M texts (Out of Memory); one thread keeps the order
    # (readers skip row groups by doc id) in constant memory (10M documents: 16 s)
    threads = con.execute("SELECT current_setting('threads')").fetchone()
    con.execute("SET threads TO 1")
    try:
        row = con.execute(f"COPY ({select}) TO '{quoted}' {_PARQUET}").fetchone()
    finally:
        con.execute(f"SET threads TO {int(threads[0]) if threads else 1}")
    count = int(row[0]) if row else 0
    if not count:
        tmp.unlink(missing_ok=True)
        return 0
    fsync_file(tmp)
    os.replace(tmp, target)
    return count


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_text(text)
    fsync_file(tmp)
    os.replace(tmp, path)


def collect_segments(store_dir: Path) -> list[str]:
    """Remove what no version and no reader needs under `index/segments/`: the lock/manifest
    of each version whose folder is gone once no reader holds it (`LOCK_EX | LOCK_NB`), then
    every file no remaining manifest lists (old segments, a killed publish's leftovers).

    Only the writer calls this, under the writer lock, after a publish (and `remove_old_versions`).

    Args:
        store_dir: the store directory.
    Returns:
        The names removed.
    """
    where = segments_dir(store_dir)
    if not where.is_dir():
        return []
    referenced = set()
    for number in list_versions(store_dir):
        try:
            referenced.add(
                read_manifest(version_dir(store_dir, f"v{number}") / MANIFEST_FILE)["id"]
            )
        except (StoreError, KeyError):
            continue  # a legacy version, or one without a snapshot
    removed, keep = [], set()
    for lock in sorted(where.glob("m*.json")):
        if lock.stem not in referenced and _remove_unheld(lock):
            removed.append(lock.name)
            continue
        keep.add(lock.name)
        try:
            manifest = json.loads(lock.read_text())
        except (OSError, ValueError):
            return removed  # unreadable: remove no segment it might list
        for table in manifest["tables"].values():
            for seg in table["segments"]:
                keep.update(n for n in (seg["rows"], seg["dead"]) if n)
                if seg["rows"]:
                    keep.add(pack_name(seg["rows"]))  # its row pack, when there is one
    for path in where.iterdir():
        if path.name not in keep:
            path.unlink(missing_ok=True)
            removed.append(path.name)
    fsync_dir(where)
    return removed


def _remove_unheld(lock: Path) -> bool:
    """Unlink `lock` unless a reader holds it (a shared lock); True when removed."""
    try:
        fh = open(lock, "rb")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return False
    try:
        lock.unlink()
    finally:
        fh.close()
    return True
