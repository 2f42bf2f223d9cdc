"""Configured roots (`roots.data`, `roots.store` in config.yaml): paths that must stay inside a
folder once `..` and symbolic links are resolved.

Unset roots confine nothing. With `roots.data`, every corpus file bertindex reads for indexing
(`sources:`, `bertindex index PATHS`, inbox files) must resolve inside it; with `roots.store`,
`store.path` (config or `--store`) must. The inbox folder is always the root of its own files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from indexer.errors import InputError
from indexer.ingest.readers import Rejected, expand_paths


def real(path: str | Path) -> Path:
    """The path with `..`, `~` and every symbolic link resolved (missing tails kept as given)."""
    return Path(os.path.realpath(Path(path).expanduser()))


def within(path: str | Path, root: str | Path) -> bool:
    """Whether `path` resolves to `root` or to something inside it."""
    target, base = real(path), real(root)
    return target == base or base in target.parents


def escape_reason(path: str | Path, root: str | Path, what: str, fix: str | None = None) -> str:
    """A message naming the path, where it resolves, the root and the fix."""
    target = real(path)
    how = " through a link" if target != Path(os.path.abspath(Path(path).expanduser())) else ""
    fix = fix or f"move it under {what} or change {what} in config.yaml"
    return f"{path} resolves{how} to {target}, outside {what} {real(root)}; {fix}"


def expand_within(paths: Sequence[str | Path], root: str | Path | None
                  ) -> tuple[list[Path], list[Rejected]]:
    """The corpus files behind `paths` (as `readers.expand_paths`), confined to `root`.

    A path named outright that resolves outside `root` is an error (nothing is read); a file
    found inside a named directory that resolves outside it (a link) is skipped and returned
    as a rejection (row 0: the whole file), so that the rest of the run goes on.

    Returns:
        (files to read, rejected files).
    """
    if root is None:
        return expand_paths(list(paths)), []
    files: list[Path] = []
    refused: list[Rejected] = []
    for raw in paths:
        if not within(raw, root):
            raise InputError(escape_reason(raw, root, "roots.data"))
        for found in expand_paths([raw]):
            if within(found, root):
                files.append(found)
            else:
                refused.append(Rejected(str(found), 0, None,
                                        escape_reason(found, root, "roots.data")))
    return files, refused
