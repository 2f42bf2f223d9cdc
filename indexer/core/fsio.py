"""File plumbing: durable writes (fsync a file, or a folder after a rename inside it) and a
file's SHA-256. The one place that calls `os.fsync` and that reads a file to hash it; does not
decide what to write or where.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

HASH_BLOCK = 1 << 22  # bytes read at a time while hashing: a model file is never read whole


def feed_file(digest, path: str | Path) -> None:
    """Add a file's bytes to a running hash (several files hashed as one).

    Args:
        digest: a `hashlib` object.
        path: the file.
    """
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(HASH_BLOCK), b""):
            digest.update(block)


def file_sha256(path: str | Path) -> str:
    """The full SHA-256 hex digest of one file.

    Args:
        path: the file.
    """
    return files_sha256([path])


def files_sha256(paths: Sequence[str | Path]) -> str:
    """The SHA-256 hex digest of files' bytes one after the other (of one file: its own).

    Args:
        paths: the files, in the order hashed.
    """
    digest = hashlib.sha256()
    for path in paths:
        feed_file(digest, path)
    return digest.hexdigest()


def fsync_file(path: str | Path) -> None:
    """Flush a written file's bytes to disk.

    Args:
        path: a file already written and closed (or flushed).
    """
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def fsync_fh(fh) -> None:
    """Flush an open, written file object to disk (its Python buffer first)."""
    fh.flush()
    os.fsync(fh.fileno())


def fsync_dir(path: str | Path) -> None:
    """Make a rename inside `path` durable (no-op where directories cannot be opened).

    Args:
        path: the folder the rename happened in.
    """
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
