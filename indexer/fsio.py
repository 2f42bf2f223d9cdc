"""Durable file writes: fsync a file or a folder (after a rename inside it). The one place that
calls `os.fsync`; does not decide what to write or where.
"""

from __future__ import annotations

import os
from pathlib import Path


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
