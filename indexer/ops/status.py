"""What a store holds: documents, chunks and vectors per collection, the published index version
and its provenance, annotation counts per head, and the last runs with their outcome.

Reads only; while a writer holds the store it reports the last published snapshot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from indexer.config import Config
from indexer.errors import StoreError
from indexer.records.versions import current_version, version_dir
from indexer.store import Store

LAST_OF = ("index", "dedup", "report")  # `status` says when each last ran


def open_latest(path: Path) -> tuple[Store, bool]:
    """The store read-only at its latest state: the live file, or the published snapshot while
    a writer holds it.

    Returns:
        (the open Store, whether a writer is running).
    """
    try:
        return Store(path, read_only=True, snapshot=False), False
    except StoreError as exc:
        if not (path / "store.duckdb").is_file() or "cannot open" not in str(exc):
            raise
        return Store(path, read_only=True), True  # locked by the writer


def store_status(config: Config, runs: int = 5) -> dict:
    """Status of the configured store.

    Returns:
        {"store", "writer_active", "data_version", "collections": [{collection, documents,
        chunks, vectors}], "index": {version, spec, ntotal, data_version, provenance} | None,
        "annotations": {head: n}, "runs": [{run_id, kind, started_at, finished_at, status,
        ...counts}], "last": {kind: the last run of that kind (index, dedup, report)
        or None}, "encoder": the path `model.dtype` takes on this machine and why
        (`indexer.encode.policy.describe_path`)}.
    """
    path = Path(config.store.path)
    store, writer_active = open_latest(path)
    with store:
        info: dict[str, Any] = {
            "store": str(path),
            "writer_active": writer_active,
            "data_version": store.data_version(),
            "collections": store.counts.collections(),
            "index": _index_info(path),
            "annotations": store.counts.annotations(),
            "runs": store.runs.last(runs),
            "last": {kind: store.runs.last_of(kind) for kind in LAST_OF},
        }
    from indexer.encode.policy import describe_path

    info["encoder"] = describe_path(config.model)
    for run in info["runs"]:
        if run["status"] == "running" and not writer_active:
            run["status"] = "interrupted"  # nobody holds the store: that run was killed
        if isinstance(run.get("failed_batches"), list):
            run["failed_batches"] = len(run["failed_batches"])
    return info


def _index_info(store_dir: Path) -> dict | None:
    version = current_version(store_dir)
    if version is None:
        return None
    info_file = version_dir(store_dir, version) / "provenance.json"
    try:
        info = json.loads(info_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {
            "version": version,
            "spec": None,
            "ntotal": None,
            "data_version": None,
            "provenance": {},
        }
    return {
        "version": version,
        "spec": info.get("spec"),
        "ntotal": info.get("ntotal"),
        "data_version": info.get("data_version"),
        "provenance": info.get("provenance", {}),
    }
