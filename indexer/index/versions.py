"""Layout of published index versions: `<store>/index/vN/` (FAISS index, provenance.json and a
read-only snapshot of the store) and the `<store>/index/CURRENT` pointer, replaced atomically.

Does not read FAISS or DuckDB files; `vector_index.py` and `store.py` do.
"""

from __future__ import annotations

import os
from pathlib import Path

INDEX_DIR = "index"
POINTER = "CURRENT"
SNAPSHOT_FILE = "store.duckdb"  # the read-only copy of the store published with a version


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
    return sorted(int(p.name[1:]) for p in root.iterdir()
                  if p.is_dir() and p.name.startswith("v") and p.name[1:].isdigit())


def write_pointer(store_dir: str | Path, version: str) -> None:
    """Point CURRENT at `version` with an atomic rename (readers see old or new, never half)."""
    root = index_root(store_dir)
    tmp = root / f".{POINTER}.tmp"
    with open(tmp, "w") as fh:
        fh.write(version)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, root / POINTER)
    fsync_dir(root)


def fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
