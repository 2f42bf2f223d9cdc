"""Corpus paths: what files a list of paths stands for, confined to the configured roots
(`roots.data`, `roots.store` in config.yaml) once `..` and symbolic links are resolved.

A file named outright is read whatever its name (`--format`, or its suffix). A directory stands
for one of two things: a data-set folder's corpus (BEIR: `corpus.jsonl(.gz)`), or every file
directly inside it, in name order, where each file whose name ends in a registered suffix
(`indexer.ingest.formats.corpus_suffixes`, `.gz` variants included) is read and every other
file is *reported*: a rejection with row 0 naming the known suffixes, so that nothing is
skipped without a word; under `--strict` such a report fails the run like any rejection.
Not read and not reported: subfolders, and hidden names (starting with `.`) without a known
suffix (`.DS_Store`, `.gitignore`). A directory with no corpus file is an error.

Unset roots confine nothing. With `roots.data`, every corpus file bertindex reads for indexing
(`sources:`, `bertindex index PATHS`, inbox files) must resolve inside it; with `roots.store`,
`store.path` (config or `--store`) must. The inbox folder is always the root of its own files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from indexer.errors import InputError
from indexer.ingest.formats import corpus_format, directory_corpus, unknown_suffix_reason
from indexer.ingest.readers import Rejected


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


def expand_paths(
    paths: Sequence[str | Path], root: str | Path | None = None
) -> tuple[list[Path], list[Rejected]]:
    """The corpus files behind `paths`, confined to `root` (see the module for directories).

    A path named outright that resolves outside `root` is an error (nothing is read); a file
    found inside a named directory that resolves outside it (a link), or whose name ends in
    no registered suffix, is returned as a rejection (row 0: the whole file), so that the rest
    of the run goes on.

    Args:
        paths: files or directories, in reading order.
        root: `roots.data`, or None for no confinement.
    Returns:
        (files to read, rejected files).
    Raises:
        InputError: a path is missing, outside `root`, or a directory without corpus files.
    """
    files: list[Path] = []
    refused: list[Rejected] = []
    for raw in paths:
        if root is not None and not within(raw, root):
            raise InputError(escape_reason(raw, root, "roots.data"))
        path = Path(raw)
        if path.is_dir():
            found, unknown = _directory_files(path)
            refused += unknown
        elif path.is_file():
            found = [path]
        else:
            raise InputError(f"{path}: no such file or directory")
        for file in found:
            if root is None or within(file, root):
                files.append(file)
            else:
                refused.append(
                    Rejected(str(file), 0, None, escape_reason(file, root, "roots.data"))
                )
    return files, refused


def _directory_files(folder: Path) -> tuple[list[Path], list[Rejected]]:
    """(corpus files of `folder`, rejections of its files with an unknown suffix)."""
    corpus = directory_corpus(folder)
    if corpus is not None:
        return [corpus], []
    found, unknown = [], []
    for entry in sorted(folder.iterdir()):
        if not entry.is_file():
            continue
        fmt = corpus_format(entry)
        if fmt is not None and fmt.in_folders:
            found.append(entry)
        elif fmt is not None:
            unknown.append(
                Rejected(
                    str(entry),
                    0,
                    None,
                    f"not read: {fmt.name} files are read only when named on "
                    "their own (a folder's README is not a corpus); name the "
                    "file to read it",
                )
            )
        elif not entry.name.startswith("."):
            unknown.append(Rejected(str(entry), 0, None, f"not read: {unknown_suffix_reason()}"))
    if not found:
        names = ", ".join(p.name for p in (Path(r.source) for r in unknown[:5]))
        raise InputError(
            f"{folder}: directory holds no corpus files"
            + (f" (found {names})" if names else "")
            + f"; {unknown_suffix_reason()}"
        )
    return found, unknown
