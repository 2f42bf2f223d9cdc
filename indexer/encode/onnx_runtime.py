"""The ONNX query encoder at run time: `tokenizers` + onnxruntime + numpy pooling, no torch.

Opens the export an index version names (`indexer.encode.onnx_export`), checks it against the
version's record and the stored vectors, and encodes texts and queries. Does not export,
and does not choose between it and the torch encoder (`indexer.encode.query_encoder`).
Imports neither torch nor transformers.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from indexer.config import ModelConfig, resolve_model_path
from indexer.core.fsio import file_sha256, files_sha256
from indexer.encode.onnx_files import (
    ENCODERS_DIR,
    GRAPH_INPUTS,
    INFO_FILE,
    TOKENIZER_FILE,
    Unavailable,
    export_parts,
)
from indexer.encode.onnx_int8 import int8_twin
from indexer.encode.onnx_pooling import pool_output
from indexer.errors import ModelError
from indexer.records.provenance import EXPORT_KEYS, Provenance, weight_stats, weights_hash

QUERY_BATCH = 64  # queries per onnxruntime call


def _checked_info(model_file: Path, record: dict, stored: Provenance | None) -> dict:
    """The export's info file, once its files match the sha256 the index version records and
    its provenance matches the stored vectors' (`stored` None: not checked).

    Raises:
        Unavailable: a file missing, unreadable or changed, or an export of other weights.
    """
    folder = model_file.parent
    try:
        info = json.loads((folder / INFO_FILE).read_text())
        # the graph, and its weights file when the version records one (a missing one fails)
        parts = export_parts(model_file, "data" in record)
        stats = [[st.st_size, st.st_mtime_ns] for st in map(Path.stat, parts)]
        recorded = [[record.get("size"), record.get("mtime_ns")], record.get("data")]
        if stats != recorded[: len(parts)] and files_sha256(parts) != record.get("sha256"):
            names = " and ".join(p.name for p in parts) + (" differ" if parts[1:] else " differs")
            raise Unavailable(f"{folder}: {names} from the sha256 its index version records")
        if file_sha256(folder / TOKENIZER_FILE) != record.get("tokenizer_sha256"):
            raise Unavailable(
                f"{folder / TOKENIZER_FILE} differs from the sha256 its index version records"
            )
    except (OSError, ValueError, KeyError) as exc:
        raise Unavailable(f"{folder}: {type(exc).__name__}: {exc}") from None
    exported = info["provenance"]
    if stored is not None:
        diffs = [
            f"{k}: {exported[k]!r} != {getattr(stored, k)!r}"
            for k in EXPORT_KEYS
            if exported[k] != getattr(stored, k)
        ]
        if diffs:
            raise Unavailable(
                f"{model_file} was exported from another encoder than the "
                f"stored vectors' (export != store: {'; '.join(diffs)})"
            )
    return info


class OnnxEncoder:
    """Encodes texts with an exported model: `tokenizers` + onnxruntime + numpy pooling.

    Matches `Encoder.encode_texts` / `encode_queries` (fp32 torch) within float rounding; the
    int8 twin (`int8=True` in `open`) only approximately (docs/guides/fast-queries.md).
    """

    def __init__(
        self,
        folder: Path,
        info: dict,
        config: ModelConfig,
        model_file: Path,
        provenance: Provenance,
        threads: int | None = None,
    ):
        from tokenizers import Tokenizer

        self.folder, self.info, self.config = folder, info, config
        self.provenance = provenance
        self.dim = provenance.dim
        self.cls_id, self.sep_id, self.pad_id = info["cls_id"], info["sep_id"], info["pad_id"]
        self.left_pad = info.get("padding_side", "right") == "left"  # older exports: right
        self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.model_file = model_file
        self.session = self._session(threads or min(4, os.cpu_count() or 1))
        self.feed_names = _feed_names(self.session, model_file)
        # the one-thread session, made when calls first overlap (the session itself when it
        # has one thread: onnxruntime runs overlapping calls of one session side by side)
        self._single = self.session if threads == 1 else None
        self._lock = threading.Lock()
        self._running = 0

    def _session(self, threads: int):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        # no spinning: the pool's threads sleep between operators (spinning took 4.1 ms off a
        # 5.6 ms query alone, but burned 28 ms of CPU a served query against 17, and the
        # sequential p50 did not improve: the client and the server's other threads share
        # the same 2 cores; benchmarks/serve_latency.py, 2026-12-01)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        return ort.InferenceSession(
            str(self.model_file), options, providers=["CPUExecutionProvider"]
        )

    def release(self) -> None:
        """Free the sessions (the weights); this encoder cannot encode afterwards. For a
        process that loaded it only to look (`serve`'s supervisor, whose app's routes outlive
        it in FastAPI's caches)."""
        self.session = self._single = None

    @contextlib.contextmanager
    def _pick_session(self):
        """The session for this call: alone, the multi-thread one (5.6 ms a SciFact query on
        2 cores against 6.9 ms on one thread); when calls overlap (a server under load), a
        one-thread session, so parallel queries each keep a core instead of every query's
        operators being split across a pool whose threads the other queries need."""
        with self._lock:
            self._running += 1
            alone = self._running == 1
            if not alone and self._single is None:
                self._single = self._session(1)
        try:
            yield self.session if alone else self._single
        finally:
            with self._lock:
                self._running -= 1

    @classmethod
    def open(
        cls,
        store_dir: str | Path,
        record: dict | None,
        config: ModelConfig,
        stored: Provenance | None,
        int8: bool = False,
    ) -> OnnxEncoder:
        """The export an index version names, checked against it and the stored vectors.

        Args:
            store_dir: the store directory.
            record: the index version's `query_encoder` record (`export_encoder`'s).
            config: the `model` section (pooling, normalisation, prompts, max length).
            stored: the stored vectors' provenance (None: not checked).
            int8: run the export's int8 twin (`int8_twin`, made now if missing) on one thread
                per call: a SciFact query took 3.1 ms on one thread, 3.5 ms on two, against
                5.3 ms for fp32 on two (docs/benchmarks.md).
        Returns:
            The OnnxEncoder, with the provenance of the configured model and its dtype.
        Raises:
            Unavailable: no export, a file missing or changed, or an export of other weights.
            ModelError: `model.max_length` exceeds the exported model's positions.
        """
        if not record:
            raise Unavailable("the index version names no ONNX query encoder")
        store_dir = Path(store_dir)
        model_file = store_dir / str(record.get("path", ""))
        folder = model_file.parent
        if folder.parent.resolve() != (store_dir / ENCODERS_DIR).resolve():
            raise Unavailable(
                f"the index version names {model_file}, outside {store_dir / ENCODERS_DIR}"
            )
        info = _checked_info(model_file, record, stored)
        exported = info["provenance"]
        if config.max_length > info["max_positions"]:
            raise ModelError(
                f"model.max_length {config.max_length} exceeds the usable length "
                f"of the exported model: {info['max_positions']} tokens; set "
                f"model.max_length to at most {info['max_positions']}"
            )
        provenance = Provenance(
            model_name=exported["model_name"],
            weights_hash=_configured_weights_hash(config, info),
            pooling=config.pooling,
            normalize=config.normalize,
            max_length=config.max_length,
            dim=exported["dim"],
            dtype="int8" if int8 else "fp32",
            document_prompt=config.document_prompt,
            query_prompt=config.query_prompt,
            attention="onnx",
        )
        if int8:
            model_file = int8_twin(model_file, record["sha256"])
        try:
            return cls(folder, info, config, model_file, provenance, 1 if int8 else None)
        except Unavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own errors: fall back
            raise Unavailable(f"onnxruntime cannot load {model_file}: {str(exc)[:200]}") from None

    # -- encoding ---------------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids without special tokens, no truncation (as `Encoder.tokenize`)."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def wrap(self, ids: Sequence[int]) -> list[int]:
        """The tokenizer's framing around ids: [CLS] ids [SEP], <s> ids </s>, …"""
        return [self.cls_id, *ids, self.sep_id]

    @functools.cached_property
    def document_prefix(self) -> list[int]:
        """The document prompt's tokens, put after [CLS] in every window (as the torch
        `Encoder.document_prefix`); made on first use, a search never needs them."""
        prompt = self.config.document_prompt
        return self.tokenize([prompt])[0] if prompt else []

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """One vector per text, truncated to `max_length` tokens, as `Encoder.encode_texts`."""
        room = self.config.max_length - 2
        return self.encode_ids([self.wrap(ids[:room]) for ids in self.tokenize(texts)])

    def encode_ids(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        """Encode token id sequences that carry their special tokens (as `Encoder.encode_ids`),
        longest first in batches of `QUERY_BATCH`; (len(seqs), dim) float32 in input order."""
        out = np.zeros((len(seqs), self.dim), dtype=np.float32)
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
        for start in range(0, len(order), QUERY_BATCH):
            rows = order[start : start + QUERY_BATCH]
            width = len(seqs[rows[0]])
            ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                span = (
                    slice(width - len(seqs[i]), width) if self.left_pad else slice(0, len(seqs[i]))
                )
                ids[r, span] = seqs[i]
                mask[r, span] = 1
            given = {"input_ids": ids, "attention_mask": mask}
            with self._pick_session() as session:
                (states,) = session.run(None, {name: given[name] for name in self.feed_names})
            out[rows] = pool_output(
                states, mask, self.info["output"], self.config.pooling, self.config.normalize
            )
        return out

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """`model.query_prompt` + query, encoded as `encode_texts`."""
        prompt = self.config.query_prompt
        return self.encode_texts([prompt + q for q in queries] if prompt else queries)


def _feed_names(session, model_file: Path) -> tuple[str, ...]:
    """The inputs `session`'s graph declares, all of which a query can feed (GRAPH_INPUTS).

    A graph may declare fewer: the exporter drops an input the computation never reads (a
    0-layer model's `attention_mask`), so leaving it out changes no output; the pooling
    still reads the mask outside the graph.

    Raises:
        Unavailable: the graph declares an input a query cannot feed, or no `input_ids`.
    """
    declared = tuple(i.name for i in session.get_inputs())
    if "input_ids" not in declared or not set(declared) <= set(GRAPH_INPUTS):
        raise Unavailable(
            f"{model_file} declares the inputs {list(declared)}, but a query feeds input_ids "
            f"and at most {list(GRAPH_INPUTS[1:])}; delete {model_file.parent} and index "
            "again to export it anew"
        )
    return declared


def _configured_weights_hash(config: ModelConfig, info: dict) -> str:
    """The configured model's weights hash: the export's when the configured directory is
    the one it was exported from with the same weight files (size, mtime), else hashed now."""
    model_dir = resolve_model_path(config.name)
    recorded = info.get("weights") or {}
    if str(model_dir) == recorded.get("dir") and weight_stats(model_dir) == recorded.get("files"):
        return info["provenance"]["weights_hash"]
    return weights_hash(model_dir)
