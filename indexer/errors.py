"""Typed exceptions for bertindex. Only the CLI turns them into exit codes."""


class BertindexError(Exception):
    """Base class: a runtime problem the user can fix (exit code 1)."""


class ConfigError(BertindexError):
    """The configuration file or an override is invalid."""


class InputError(BertindexError):
    """An input file, field mapping or record cannot be used."""


class ModelError(BertindexError):
    """The encoder model cannot be found or loaded."""


class ProvenanceMismatch(BertindexError):
    """Stored vectors or an index were made by a different encoder set-up than the configured
    one."""


class StoreError(BertindexError):
    """The store is missing, damaged, locked or written by a newer schema."""


class StoreBusy(StoreError):
    """Another process holds the store's writer lock (the message names it: pid, command)."""


class VectorIndexError(BertindexError):
    """A FAISS index file is missing, damaged or inconsistent with the store."""


class RemoteError(BertindexError):
    """A `bertindex serve` server cannot be reached or answered with an error."""


def repair_hint(store_dir: object) -> str:
    """The fix for a damaged or out-of-step index: rebuilt from the stored vectors and texts,
    nothing re-encoded."""
    return f"`bertindex doctor --repair --store {store_dir}`"
