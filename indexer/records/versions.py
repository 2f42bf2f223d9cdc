"""Layout of published index versions: `<store>/index/vN/` (FAISS index, provenance.json and the
manifest of the store snapshot whose Parquet segments lie in `<store>/index/segments/`) and the
`<store>/index/CURRENT` pointer, replaced atomically.

Does not read FAISS or DuckDB files; `indexer.index.vector` and `indexer.store` do.
"""

from __future__ import annotations

import os
from pathlib import Path

from indexer.core.fsio import fsync_dir, fsync_fh

INDEX_DIR = "index"
POINTER = "CURRENT"
MANIFEST_FILE = "snapshot.json"  # a version's store snapshot: its segments, columns and facts
SEGMENTS_DIR = "segments"  # under index/: the segments and one lock/manifest file per version
SNAPSHOT_FILE = "store.duckdb"  # the copied snapshot an earlier bertindex published instead


def index_root(store_dir: str | Path) -> Path:
    return Path(store_dir) / INDEX_DIR


def current_version(store_dir: str | Path) -> str | None:
    """The live version name (`vN`), or None when nothing has been published."""
    try:
        return (index_root(store_dir) / POINTER).read_text().strip() or None
    except FileNotFoundError:
        return None


def version_dir(store_dir: str | Path, version: str) -> Path:
    return index_root(store_dir) / version


def list_versions(store_dir: str | Path) -> list[int]:
    """Numbers of the complete version folders (temporary `.vN.tmp` folders excluded)."""
    root = index_root(store_dir)
    if not root.is_dir():
        return []
    return sorted(
        int(p.name[1:])
        for p in root.iterdir()
        if p.is_dir() and p.name.startswith("v") and p.name[1:].isdigit()
    )


def write_pointer(store_dir: str | Path, version: str) -> None:
    """Point CURRENT at `version` with an atomic rename (readers see old or new, never half)."""
    root = index_root(store_dir)
    tmp = root / f".{POINTER}.tmp"
    with open(tmp, "w") as fh:
        fh.write(version)
        fsync_fh(fh)
    os.replace(tmp, root / POINTER)
    fsync_dir(root)
