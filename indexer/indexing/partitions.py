"""Partitions, the unit of work a cluster worker does: a batch of texts under a stable id (the
file and rows it was read from, or a range of document ids), encoded on the worker into arrays
(`EncodedPartition`), with a record of which worker did how much model work (`WorkTally`).

Does not talk to a cluster (`flows.cluster` submits the partitions) and does not write the
store's tables: the single writer commits each partition's chunks, in order, once. Where the
workers see the store's folder, each writes its partition's vectors there as a file the
writer records (`vectors_to`), so that adding workers is not capped by one writer inserting
every vector.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from indexer.config import Config
from indexer.core.faults import crash_point
from indexer.encode.encoder import load_encoder
from indexer.errors import ConfigError, ModelError
from indexer.indexing.steps import encode_documents
from indexer.records.provenance import WRITE_KEYS, Provenance
from indexer.store import ChunkRows, WorkerFile, WorkerFiles, incoming_probe, write_worker_vectors


def worker_name() -> str:
    """This process as a worker: `host:pid` (a Dask worker without a nanny is that pid)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Work:
    """The model work one partition took on one worker."""

    worker: str
    documents: int
    chars: int  # characters of the partition's texts: the model work, in proportion
    cpu_seconds: float  # this worker process's CPU time for the partition (all its threads)


@dataclass
class EncodedPartition:
    """A partition's chunks as arrays, as a worker sends them back (no object per document).

    `owners` are positions into the partition's texts; the writer maps them to doc ids.
    """

    pid: str
    owners: np.ndarray  # (chunks,) int32
    ordinals: np.ndarray  # (chunks,) int32
    starts: np.ndarray  # (chunks,) int64, character offsets
    ends: np.ndarray  # (chunks,) int64
    n_tokens: np.ndarray  # (chunks,) int32
    vectors: np.ndarray | WorkerFile  # (chunks, dim) float32, or the file the worker wrote
    provenance: dict  # the worker's encoder (`Provenance.to_dict`)
    work: Work

    def chunk_rows(self) -> ChunkRows:
        """The chunks as `ChunkRows` (doc_ids are positions into the partition's texts)."""
        return ChunkRows(
            self.owners.tolist(),
            self.ordinals.tolist(),
            self.starts.tolist(),
            self.ends.tolist(),
            self.n_tokens.tolist(),
            _vectors([self], self.vectors.shape[1]),
        )

    def nbytes(self) -> int:
        """Bytes of the arrays sent back (what dominates the result's size on the wire)."""
        arrays = (self.owners, self.ordinals, self.starts, self.ends, self.n_tokens, self.vectors)
        return sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))

    def check(self, pid: str, expected: Provenance) -> EncodedPartition:
        """This result, after checking that it is partition `pid`'s and that the worker's
        encoder is the writer's on every key a write checks.

        Raises:
            ModelError: another partition's result, or another encoder on the worker.
        """
        if self.pid != pid:
            raise ModelError(f"partition {pid}: the worker sent back partition {self.pid}")
        diffs = Provenance(**self.provenance).mismatches(expected, WRITE_KEYS)
        if diffs:
            raise ModelError(
                f"worker {self.work.worker} encoded partition {pid} with another encoder than "
                f"the writer's (worker != writer: {'; '.join(diffs)}); put the same model "
                "directory at the same path on every worker"
            )
        return self


MIN_TEXTS = 16  # texts per partition, at least (fewer: the task costs more than it does)


def split(n: int, slots: int, min_texts: int = MIN_TEXTS) -> list[tuple[int, int]]:
    """Cut a batch of `n` texts into partitions, two per worker thread when `n` allows, so
    that a batch (one read batch, one commit) is spread over every worker: a batch sent
    whole goes to one worker, however many there are.

    Args:
        n: texts in the batch.
        slots: worker threads in the cluster.
        min_texts: texts per partition, at least.
    Returns:
        (start, end) ranges covering 0..n in order; [] when n is 0.
    """
    parts = max(1, min(2 * max(1, slots), n // max(1, min_texts)))
    size = -(-n // parts) if n else 0
    return [(start, min(n, start + size)) for start in range(0, n, size)] if n else []


def join(parts: list[EncodedPartition], starts: list[int], dim: int) -> ChunkRows:
    """One batch's chunks from its partitions (in order; `starts`: each partition's first
    text in the batch), doc_ids as positions into the batch's texts.

    Args:
        parts: the partitions' results, in batch order.
        starts: the position of each partition's first text in the batch.
        dim: the vectors' width (for a batch without chunks).
    Returns:
        ChunkRows of the whole batch.
    """
    if not parts:
        return ChunkRows([], [], [], [], [], np.zeros((0, dim), np.float32))
    owners = np.concatenate([p.owners.astype(np.int64) + s for p, s in zip(parts, starts)])
    ordinals, chunk_starts, ends, n_tokens = (
        np.concatenate([getattr(p, name) for p in parts]).tolist()
        for name in ("ordinals", "starts", "ends", "n_tokens")
    )
    return ChunkRows(owners.tolist(), ordinals, chunk_starts, ends, n_tokens, _vectors(parts, dim))


def _vectors(parts: list[EncodedPartition], dim: int) -> np.ndarray | WorkerFiles:
    """The batch's vectors: the workers' files when they wrote them (the writer records
    them), else the arrays they sent, in order."""
    files = [p.vectors for p in parts if isinstance(p.vectors, WorkerFile)]
    if files and len(files) == len(parts):
        return WorkerFiles(tuple(files), dim)
    return np.concatenate(
        [np.load(v.path) if isinstance(v, WorkerFile) else v for v in (p.vectors for p in parts)]
    )


def encode_partition(
    pid: str, texts: list[str], config: Config, vectors_to: str | None = None
) -> EncodedPartition:
    """Window and encode one partition's texts on this process (a cluster worker): a pure
    function of its inputs, so a partition lost with a worker re-runs elsewhere to the same
    arrays. The encoder is loaded once per process (`load_encoder`).

    Args:
        pid: the partition's stable id (e.g. `docs.jsonl rows 1-2048`).
        texts: the texts to encode, in the writer's order.
        config: the configuration (`model`, `long_documents`).
        vectors_to: the store's folder, as this worker sees it: the vectors are written
            there as a file (`indexer.store.write_worker_vectors`) which the writer records,
            and only the chunks' positions go back. None: the vectors go back.
    Returns:
        The EncodedPartition.
    """
    cpu = time.process_time()
    encoder = load_encoder(config.model)
    owners, chunks = encode_documents(encoder, texts, config)
    vectors: np.ndarray | WorkerFile = np.ascontiguousarray(chunks.vectors, dtype=np.float32)
    if vectors_to is not None and len(vectors):
        vectors = write_worker_vectors(vectors_to, pid, np.asarray(vectors))
    crash_point("partition.before_return")
    return EncodedPartition(
        pid,
        np.asarray(owners, np.int32),
        np.asarray(chunks.ordinals, np.int32),
        np.asarray(chunks.starts, np.int64),
        np.asarray(chunks.ends, np.int64),
        np.asarray(chunks.n_tokens, np.int32),
        vectors,
        encoder.provenance.to_dict(),
        Work(worker_name(), len(texts), sum(len(t) for t in texts), time.process_time() - cpu),
    )


def sees_file(path: str, token: str) -> bool:
    """On a worker: whether the file at `path` holds `token` (`vectors_folder`'s probe)."""
    try:
        return Path(path).read_text() == token
    except OSError:
        return False


def vectors_folder(store_dir: str | Path, mode: str, ask: Callable) -> str | None:
    """Where the workers write their partitions' vectors (`encode_partition`'s `vectors_to`),
    by `dask.vectors`: the store's folder when every worker sees it at the writer's path
    ('auto' finds out with a probe file, 'files' requires it), None to send them back
    ('send', or 'auto' when a worker does not see it).

    Args:
        store_dir: the store's folder on the writer.
        mode: `dask.vectors`.
        ask: runs `sees_file(path, token)` on every worker and returns {worker: answer}
            (`distributed.Client.run`).
    Raises:
        ConfigError: 'files', and a worker does not see the folder (named, with the fix).
    """
    if mode == "send":
        return None
    probe, token = incoming_probe(store_dir)
    try:
        answers = ask(sees_file, str(probe), token)
    finally:
        probe.unlink(missing_ok=True)
    blind = sorted(worker for worker, sees in answers.items() if not sees)
    if not blind and answers:
        return str(Path(store_dir).resolve())
    if mode == "files":
        raise ConfigError(
            f"dask.vectors: files, but worker {blind[0] if blind else '(none)'} does not see "
            f"the store's folder {Path(store_dir).resolve()}; mount it at the same path on "
            "every worker, or set dask.vectors: send"
        )
    return None


def load_on_worker(config: Config) -> dict:
    """Load the configured encoder on this process (a worker, before its first partition, so
    that loading is not charged to one partition) and return its provenance.

    Args:
        config: the configuration (`model`).
    Returns:
        `Provenance.to_dict()` of the loaded encoder.
    """
    return load_encoder(config.model).provenance.to_dict()


def check_workers(loaded: dict[str, dict], expected: Provenance) -> None:
    """Raise ModelError naming the first worker whose encoder differs from the writer's.

    Args:
        loaded: worker address -> its encoder's provenance (`load_on_worker`).
        expected: the writer's encoder provenance.
    """
    for worker, provenance in sorted(loaded.items()):
        diffs = Provenance(**provenance).mismatches(expected, WRITE_KEYS)
        if diffs:
            raise ModelError(
                f"worker {worker} loaded another encoder than the writer's (worker != writer: "
                f"{'; '.join(diffs)}); put the same model directory at the same path on every "
                "worker"
            )


@dataclass
class WorkTally:
    """Model work per worker over a run: partitions, documents, characters, CPU seconds."""

    workers: dict[str, dict] = field(default_factory=dict)
    sent_bytes: int = 0  # texts sent to the workers (UTF-8)
    received_bytes: int = 0  # arrays sent back

    def add(self, work: Work, sent: int = 0, received: int = 0) -> None:
        row = self.workers.setdefault(
            work.worker, {"partitions": 0, "documents": 0, "chars": 0, "cpu_seconds": 0.0}
        )
        row["partitions"] += 1
        row["documents"] += work.documents
        row["chars"] += work.chars
        row["cpu_seconds"] += work.cpu_seconds
        self.sent_bytes += sent
        self.received_bytes += received

    def summary(self) -> dict:
        """{"workers": {name: counts + `share` of the characters}, "bytes_per_document":
        {"sent", "received"}}."""
        chars = sum(r["chars"] for r in self.workers.values()) or 1
        docs = sum(r["documents"] for r in self.workers.values())
        return {
            "workers": {
                name: r
                | {"cpu_seconds": round(r["cpu_seconds"], 3), "share": round(r["chars"] / chars, 4)}
                for name, r in sorted(self.workers.items())
            },
            "bytes_per_document": {
                "sent": round(self.sent_bytes / docs, 1) if docs else 0.0,
                "received": round(self.received_bytes / docs, 1) if docs else 0.0,
            },
        }


def text_bytes(texts: list[str]) -> int:
    """UTF-8 bytes of the texts a partition sends."""
    return sum(len(t.encode("utf-8")) for t in texts)
