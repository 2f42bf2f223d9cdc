"""Doctor: check a store against its published indexes (ids, counts, provenance, data version,
snapshot, CURRENT pointer, keyword index) and repair what the store can rebuild: the FAISS index
from the stored vectors, the keyword index from the stored texts.

Never encodes and never needs the model. Holds the store's writer lock throughout, so nothing
writes while it looks or repairs.
"""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from indexer.config import Config
from indexer.errors import BertindexError, StoreError, VectorIndexError, repair_hint
from indexer.index.keyword import KEYWORD_DIR, KeywordIndex, recorded_language, sync_keyword_index
from indexer.index.keyword import SCHEMA_VERSION as KEYWORD_SCHEMA
from indexer.index.vector import VectorIndex
from indexer.index.version_files import PROVENANCE_FILE, version_files
from indexer.indexing.steps import sync_vector_index
from indexer.records.provenance import WRITE_KEYS
from indexer.records.versions import (
    MANIFEST_FILE,
    POINTER,
    SNAPSHOT_FILE,
    current_version,
    index_root,
    version_dir,
)
from indexer.store import DB_NAME, Store, WriterLock, read_snapshot_facts, segment_problems

log = logging.getLogger(__name__)

# checks whose problems a FAISS index rebuilt from the stored vectors (a new version) repairs
VECTOR_CHECKS = (
    "pointer",
    "index_file",
    "index_provenance",
    "index_ids",
    "index_version",
    "snapshot",
    "unreachable",
    "schema_upgrade",
)
EXAMPLES = 5  # ids quoted in a message


@dataclass
class Problem:
    """One broken invariant.

    Attributes:
        check: what was checked (VECTOR_CHECKS, "keyword", "store", "schema").
        path: the file or folder at fault.
        message: what is wrong.
        fix: what to run.
        repairable: `bertindex doctor --repair` fixes it.
    """

    check: str
    path: str
    message: str
    fix: str
    repairable: bool

    def line(self) -> str:
        if self.fix in self.message:
            return f"{self.path}: {self.message}"
        return f"{self.path}: {self.message}; fix: {self.fix}"


@dataclass
class Diagnosis:
    store: str
    problems: list[Problem] = field(default_factory=list)
    facts: dict = field(default_factory=dict)  # counts, the index version, the keyword index

    def add(
        self, check: str, path: Path | str, message: str, fix: str, repairable: bool = True
    ) -> None:
        self.problems.append(Problem(check, str(path), message, fix, repairable))


def run_doctor(config: Config, repair: bool = False) -> dict:
    """Check the configured store; with `repair`, rebuild what is out of step, then check again.

    Returns:
        {"store", "ok", "problems" (found first), "repair" (what was done, None without
        `repair` or when nothing was repairable), "remaining" (problems left), "facts"}.
    Raises:
        StoreError: no store there, or another process is writing it.
    """
    path = Path(config.store.path)
    if not (path / DB_NAME).is_file():
        raise StoreError(
            f"no store at {path} ({DB_NAME} missing); index something first with "
            f"`bertindex index PATH --store {path}`"
        )
    lock = WriterLock(path)
    try:
        before = diagnose(path, config)
        after, done = before, None
        if repair and any(p.repairable for p in before.problems):
            done = _repair(path, config, before.problems)
            after = diagnose(path, config)
    finally:
        lock.release()
    return {
        "store": str(path),
        "ok": not after.problems,
        "problems": [asdict(p) for p in before.problems],
        "repair": done,
        "remaining": [asdict(p) for p in after.problems],
        "facts": after.facts,
    }


def diagnose(path: Path, config: Config) -> Diagnosis:
    """Every check; the caller holds the writer lock (no writer can change what is read)."""
    out = Diagnosis(str(path))
    db = path / DB_NAME
    try:
        store = Store(path, read_only=True, snapshot=False)
    except StoreError as exc:
        text = str(exc)
        if "newer bertindex" in text:
            out.add("schema", db, text, "upgrade bertindex", repairable=False)
        elif "schema upgrade" in text:
            out.add(
                "schema_upgrade",
                db,
                "written by an older bertindex: its schema needs an upgrade",
                repair_hint(path),
            )
        else:
            out.add(
                "store",
                db,
                text,
                "restore the store from a backup, or index the files again into a new --store",
                repairable=False,
            )
        return out
    with store:
        provenance = store.vectors.provenance()
        data_version = store.data_version()
        out.facts = {
            "documents": store.counts.documents(),
            "chunks": store.counts.chunks(),
            "vectors": store.vectors.count(),
            "data_version": data_version,
            "model": provenance.model_name if provenance else None,
            "index": None,
            "keyword_documents": None,
        }
        _check_store(store, out)
        chunk_ids = store.vectors.chunk_ids()
        _check_keyword(store, out, config.keyword.language)
    if provenance is not None:
        _check_index(path, config, provenance, data_version, chunk_ids, out)
    return out


def _check_store(store: Store, out: Diagnosis) -> None:
    """The store's own invariants: unique ids, every chunk with its document and its vector."""
    db = store.db_path
    counts = store.checks.integrity_counts()
    if counts.duplicate_ids:
        out.add(
            "store",
            db,
            f"{counts.duplicate_ids} duplicate (collection, id) pairs",
            "delete the duplicates with `bertindex delete` and index their files again",
            repairable=False,
        )
    bare = store.checks.documents_missing_vectors()
    if bare:
        names = ", ".join(f"{d.collection}/{d.external_id}" for d in bare[:EXAMPLES])
        out.add(
            "store",
            db,
            f"{len(bare)} document(s) have chunks without a stored vector "
            f"(e.g. {names}): nothing to rebuild their vectors from",
            "encode them again: `bertindex delete --collection C --id ID` for each, "
            "then `bertindex index` their files",
            repairable=False,
        )
    missing = store.vectors.missing_files()
    if missing:
        path, first = missing[0]
        out.add(
            "store",
            path,
            f"{len(missing)} recorded vector file(s) missing from {path.parent} (e.g. this one, "
            f"the vectors of chunks {first.first}..{first.stop - 1}): rebuilding an index, "
            "dedup and reindex need them",
            "copy the store's folder whole (`vectors/` with store.duckdb) or restore it from a "
            "backup; or delete the documents those chunks belong to and index their files again",
            repairable=False,
        )
    orphans, stray = counts.orphan_chunks, counts.stray_vectors
    if orphans or stray:
        out.add(
            "unreachable",
            db,
            f"{orphans} chunk(s) whose document is gone and "
            f"{stray} vector(s) whose chunk is gone (unreachable rows)",
            repair_hint(store.path),
        )


def _check_index(
    path: Path, config: Config, provenance, data_version: int, chunk_ids: np.ndarray, out: Diagnosis
) -> None:
    """CURRENT, the version folder's files, provenance, ids, data version and snapshot."""
    fix = repair_hint(path)
    pointer = index_root(path) / POINTER
    version = current_version(path)
    if version is None:
        out.add(
            "pointer",
            pointer,
            "missing: no index version is published, so searches find nothing",
            fix,
        )
        return
    folder = version_dir(path, version)
    if not re.fullmatch(r"v\d+", version) or not folder.is_dir():
        out.add(
            "pointer",
            pointer,
            f"names {version!r}, which is not a version folder in {index_root(path)}",
            fix,
        )
        return
    if not _index_files_present(path, version, fix, out):
        return
    try:
        index = VectorIndex.load(path, config.index, version=version)
    except VectorIndexError as exc:
        out.add("index_file", folder, str(exc), fix)
        return
    if index is None:  # a named version loads or raises
        raise VectorIndexError(f"{folder}: index version {version} did not load")
    out.facts["index"] = {
        "version": version,
        "spec": index.spec,
        "ntotal": index.ntotal,
        "data_version": index.data_version,
    }
    diffs = index.provenance.mismatches(provenance, WRITE_KEYS)
    if diffs:
        out.add(
            "index_provenance",
            folder / PROVENANCE_FILE,
            "the index was built by another "
            f"encoder set-up than the store's vectors (index != store: {'; '.join(diffs)})",
            fix,
        )
    _check_ids(np.sort(index.ids()), chunk_ids, folder, fix, out)
    if index.data_version is not None and index.data_version != data_version:
        out.add(
            "index_version",
            folder / PROVENANCE_FILE,
            f"the index reflects data version "
            f"{index.data_version}, the store is at {data_version} (a run stopped before "
            "publishing, or the store changed since): searches miss the latest data",
            f"{fix} (or the next `bertindex index`)",
        )
    _check_snapshot(path, folder, index, fix, out)


def _index_files_present(path: Path, version: str, fix: str, out: Diagnosis) -> bool:
    """The version's provenance.json and the files it names: its base (shared with the other
    versions built on it, under index/bases/), delta and deleted ids."""
    folder = version_dir(path, version)
    try:
        files = version_files(path, version)
    except FileNotFoundError:
        out.add("index_file", folder / PROVENANCE_FILE, "missing", fix)
        return False
    except (OSError, ValueError) as exc:
        out.add("index_file", folder / PROVENANCE_FILE, f"unreadable ({exc})", fix)
        return False
    missing = [(kind, f) for kind, f in files.items() if not f.is_file()]
    for kind, f in missing:
        what = f"the base index that version {version} names" if kind == "base" else kind
        out.add("index_file", f, f"missing ({what})", fix)
    return not missing


def _check_ids(
    ids: np.ndarray, chunk_ids: np.ndarray, where: Path, fix: str, out: Diagnosis
) -> None:
    """The index holds each stored chunk's vector once and nothing else."""
    extra, missing = np.setdiff1d(ids, chunk_ids), np.setdiff1d(chunk_ids, ids)
    twice = len(ids) - len(np.unique(ids))
    if not (len(extra) or len(missing) or twice):
        return
    parts = [f"{len(ids)} vectors for {len(chunk_ids)} stored chunks"]
    if len(extra):
        parts.append(f"{len(extra)} id(s) the store lacks (e.g. {extra[:EXAMPLES].tolist()})")
    if len(missing):
        parts.append(
            f"{len(missing)} stored chunk id(s) missing (e.g. {missing[:EXAMPLES].tolist()})"
        )
    if twice:
        parts.append(f"{twice} id(s) held twice")
    out.add("index_ids", where, "the index holds " + ", ".join(parts), fix)


def _check_snapshot(path: Path, folder: Path, index: VectorIndex, fix: str, out: Diagnosis) -> None:
    """The snapshot searches open: its manifest and every segment it lists present and
    readable (or a legacy `store.duckdb` copy), at the index's data version."""
    snap = folder / MANIFEST_FILE
    if not snap.is_file() and (folder / SNAPSHOT_FILE).is_file():
        snap = folder / SNAPSHOT_FILE  # published by an earlier bertindex
    if not snap.is_file():
        out.add(
            "snapshot",
            snap,
            "missing: searches fall back to the live store file, which a running writer locks",
            fix,
        )
        return
    try:
        facts = read_snapshot_facts(folder)
        damaged = segment_problems(path, folder) if snap.name == MANIFEST_FILE else []
    except StoreError as exc:
        out.add("snapshot", snap, str(exc), fix)
        return
    for problem in damaged:
        out.add("snapshot", snap, f"segment {problem}: searches cannot open the snapshot", fix)
    if damaged:
        return
    snap_version, chunks = facts.data_version, facts.chunks
    if index.data_version is not None and snap_version != index.data_version:
        out.add(
            "snapshot",
            snap,
            f"holds data version {snap_version}, its index {index.data_version}",
            fix,
        )
    elif chunks != index.ntotal:
        out.add("snapshot", snap, f"holds {chunks} chunks, its index {index.ntotal} vectors", fix)


def _check_keyword(store: Store, out: Diagnosis, language: str) -> None:
    """The BM25 index: present, openable, built for `keyword.language`, its count and
    manifest in step with the store."""
    folder = store.path / KEYWORD_DIR
    fix = repair_hint(store.path)
    if not folder.exists():
        if out.facts["documents"]:
            out.add(
                "keyword",
                folder,
                "missing: keyword and hybrid searches (the default mode) fail",
                fix,
            )
        return
    version_file = folder / "SCHEMA_VERSION"
    if not KeywordIndex.exists(folder):
        out.add("keyword", folder, "incomplete (meta.json or SCHEMA_VERSION missing)", fix)
        return
    if version_file.read_text().strip() != KEYWORD_SCHEMA:
        out.add(
            "keyword",
            folder,
            f"schema {version_file.read_text().strip()!r}, this "
            f"bertindex writes {KEYWORD_SCHEMA!r}",
            fix,
        )
        return
    if recorded_language(folder) != language:
        out.add(
            "keyword",
            folder,
            f"built for language {recorded_language(folder)!r}, keyword.language is {language!r}",
            fix,
        )
        return
    try:
        keyword = KeywordIndex(folder)
        held, listed = keyword.num_docs, keyword.manifest_rows()
    except (VectorIndexError, OSError, ValueError) as exc:
        out.add("keyword", folder, f"cannot be opened ({exc})", fix)
        return
    out.facts["keyword_documents"] = held
    if held != listed:
        out.add("keyword", folder, f"holds {held} documents, its manifest lists {listed}", fix)
        return
    change = keyword.diff(store)
    if not change.empty:
        out.add(
            "keyword",
            folder,
            f"out of step with the store: {len(change.new)} document(s) "
            f"missing, {len(change.changed)} changed, {len(change.gone)} deleted ones "
            "still indexed",
            fix,
        )


# an index that loads and reflects an older data version (a run stopped before publishing):
# updated by its difference from the store (`sync_vector_index`), which rebuilds only when
# the change is too large; other ids at the same data version are damage: rebuilt
_BEHIND = {"index_ids", "index_version"}


def _repair(path: Path, config: Config, problems: list[Problem]) -> dict:
    """Rebuild from the store under the caller's lock: unreachable rows deleted, a FAISS index
    built from the stored vectors and published as a new version (with its snapshot), or,
    when it is only behind the store (`_BEHIND`), updated by what differs, the
    keyword index brought in step. Recorded as a `doctor` run.

    Returns:
        {"encoded": 0, "unreachable", "index", "keyword", "errors"}.
    """
    checks = {p.check for p in problems if p.repairable}
    done: dict = {"encoded": 0, "unreachable": None, "index": None, "keyword": None, "errors": []}
    with Store(path, lock=False) as store, store.runs.recorded_run("doctor") as run:
        # writable: an older schema is upgraded here
        run.summary = done
        try:
            if "unreachable" in checks:
                done["unreachable"] = store.checks.delete_unreachable()
            vector = checks & set(VECTOR_CHECKS)
            if "index_version" in vector and vector <= _BEHIND:  # only behind: update
                done["index"] = sync_vector_index(store, config, [], [])
            elif vector:
                done["index"] = sync_vector_index(store, config, [], [], force=True)
            done["keyword"] = sync_keyword_index(store, config.keyword.language)
        except BertindexError as exc:
            log.error("repair of %s stopped: %s", path, exc)
            done["errors"].append(str(exc))
            run.fail(done["errors"][0])
    return done
