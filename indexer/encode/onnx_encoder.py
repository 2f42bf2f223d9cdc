"""The encoder as an ONNX file: exported once per store and model when an index version is
written, and run with onnxruntime + `tokenizers` to encode queries without torch.

Layout: `<store>/encoders/<weights hash>-<pooling>/` holds `model.onnx` (the transformer in
fp32: token states in, token states (or the pooler output) out), `tokenizer.json` and
`encoder.json` (what it was exported from, its sha256). Each index version's provenance.json
names the file and its sha256 (`query_encoder`); a search checks both before it uses the file.
Pooling and normalisation run in numpy, as `indexer.encode.pooling` does them in torch.
`search.query_encoder: onnx-int8` runs an int8 twin of that file instead (`int8_twin`:
derived from the checked fp32 file, kept beside it as `model.int8.onnx` with `int8.json`).

`export_encoder` needs torch (imported there); `OnnxEncoder` and `load_query_encoder` import
neither torch nor transformers unless they fall back to the torch encoder.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from indexer.config import Config, ModelConfig, resolve_model_path
from indexer.errors import ModelError
from indexer.fsio import fsync_dir, fsync_file
from indexer.provenance import (
    EXPORT_KEYS,
    QUERY_KEYS,
    Provenance,
    file_sha256,
    weight_stats,
    weights_hash,
)

log = logging.getLogger(__name__)

ENCODERS_DIR = "encoders"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
INFO_FILE = "encoder.json"
INT8_FILE = "model.int8.onnx"
INT8_INFO_FILE = "int8.json"
OPSET = 17
QUERY_BATCH = 64  # queries per onnxruntime call


class Unavailable(Exception):
    """The ONNX query encoder cannot be used; the message says why."""


def encoder_dir(store_dir: str | Path, provenance: Provenance) -> Path:
    return Path(store_dir) / ENCODERS_DIR / f"{provenance.weights_hash}-{provenance.pooling}"


def _output_kind(pooling: str) -> str:
    return {"pooler": "pooler", "last4": "last4"}.get(pooling, "states")


# -- export (torch) ---------------------------------------------------------------------------
def export_encoder(encoder, store_dir: str | Path) -> dict:
    """Export `encoder`'s model (fp32, whatever dtype it runs in) under the store, once.

    Args:
        encoder: an `indexer.encode.encoder.Encoder`.
        store_dir: the store directory.
    Returns:
        The record an index version keeps: {"path" (relative to the store), "sha256",
        "tokenizer_sha256"}.
    """
    import torch

    folder = encoder_dir(store_dir, encoder.provenance)
    existing = _valid_record(Path(store_dir), folder)
    if existing is not None:
        return existing
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        model = encoder.model
        if encoder.dtype != torch.float32 or encoder.device.type != "cpu":
            from transformers import AutoModel

            model = AutoModel.from_pretrained(encoder.model_dir, dtype=torch.float32,
                                              attn_implementation="eager").eval()
        kind = _output_kind(encoder.config.pooling)
        # eval: the exporter puts the module back in the mode it found it in, dropout included
        wrapper = _export_wrapper(model, kind).eval()
        ids = torch.tensor([[encoder.cls_id, encoder.pad_id, encoder.pad_id, encoder.sep_id]] * 2)
        mask = torch.ones_like(ids)
        mask[1, 2:] = 0
        axes = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
                "output": {0: "batch"} if kind == "pooler" else {0: "batch", 1: "tokens"}}
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer notes on shapes; the test checks padding
            torch.onnx.export(wrapper, (ids, mask), str(tmp / MODEL_FILE),
                              input_names=["input_ids", "attention_mask"],
                              output_names=["output"], dynamic_axes=axes, opset_version=OPSET,
                              dynamo=False)
        encoder.tokenizer.backend_tokenizer.save(str(tmp / TOKENIZER_FILE))
        info = {
            "provenance": {k: getattr(encoder.provenance, k)
                           for k in ("model_name", "weights_hash", "pooling", "dim")},
            "output": kind,
            "max_positions": int(getattr(model.config, "max_position_embeddings", 512)),
            "cls_id": encoder.cls_id, "sep_id": encoder.sep_id, "pad_id": encoder.pad_id,
            "sha256": file_sha256(tmp / MODEL_FILE),
            "tokenizer_sha256": file_sha256(tmp / TOKENIZER_FILE),
            # the weights it came from: a search trusts the hash while these are unchanged
            "weights": {"dir": str(encoder.model_dir), "files": weight_stats(encoder.model_dir)},
            "opset": OPSET, "torch": torch.__version__,
        }
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=2))
        for name in (MODEL_FILE, TOKENIZER_FILE, INFO_FILE):
            fsync_file(tmp / name)
        fsync_dir(tmp)
        shutil.rmtree(folder, ignore_errors=True)  # an export that failed its check
        os.replace(tmp, folder)
        fsync_dir(folder.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("exported the query encoder to %s", folder / MODEL_FILE)
    return _record(Path(store_dir), folder, info)


def _record(store_dir: Path, folder: Path, info: dict) -> dict:
    st = (folder / MODEL_FILE).stat()
    return {"path": str((folder / MODEL_FILE).relative_to(store_dir)), "sha256": info["sha256"],
            "tokenizer_sha256": info["tokenizer_sha256"],
            # a search hashes the file again only when these changed (hashing costs 0.1 s)
            "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _valid_record(store_dir: Path, folder: Path) -> dict | None:
    """The record of an earlier, intact export in `folder`; None when there is none."""
    try:
        info = json.loads((folder / INFO_FILE).read_text())
        if (file_sha256(folder / MODEL_FILE) != info["sha256"]
                or file_sha256(folder / TOKENIZER_FILE) != info["tokenizer_sha256"]):
            return None
    except (OSError, ValueError, KeyError):
        return None
    return _record(store_dir, folder, info)


def _wrapper_class():
    import torch

    class ExportWrapper(torch.nn.Module):
        """The transformer with the one output its pooling reads."""

        def __init__(self, model, kind: str):
            super().__init__()
            self.model, self.kind = model, kind

        def forward(self, input_ids, attention_mask):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=torch.zeros_like(input_ids),
                             output_hidden_states=self.kind == "last4")
            if self.kind == "pooler":
                return out.pooler_output
            if self.kind == "last4":
                return torch.cat(out.hidden_states[-4:], dim=-1)
            return out.last_hidden_state

    return ExportWrapper


def _export_wrapper(model, kind: str):
    return _wrapper_class()(model, kind)


def export_for_index(store_dir: str | Path, config: Config, provenance: Provenance,
                     encoder=None) -> dict | None:
    """The ONNX export an index version records: reused when intact, else made now.

    None (and a warning) when `search.query_encoder` is `torch`, the configured model is not
    the one the vectors were made with, or the export fails: searches then use torch. With
    `onnx-int8`, the int8 twin is derived now too, so the first query does not wait for it.

    Args:
        provenance: the stored vectors' provenance.
        encoder: the loaded Encoder, if any (else loaded when an export must be made).
    """
    if config.search.query_encoder == "torch":
        return None
    try:
        record = _valid_record(Path(store_dir), encoder_dir(store_dir, provenance))
        if record is None:
            if encoder is None:
                from indexer.encode.encoder import load_encoder

                encoder = load_encoder(config.model)
            diffs = encoder.provenance.mismatches(provenance, EXPORT_KEYS)
            if diffs:
                log.warning("no ONNX query encoder exported: the configured model is not the "
                            "stored vectors' (%s)", "; ".join(diffs))
                return None
            record = export_encoder(encoder, store_dir)
    except Exception as exc:  # noqa: BLE001 - an optional artefact: indexing goes on
        log.warning("ONNX export of the query encoder failed (%s: %s); searches will load "
                    "torch", type(exc).__name__, str(exc)[:200])
        return None
    if config.search.query_encoder == "onnx-int8":
        try:
            int8_twin(Path(store_dir) / record["path"], record["sha256"])
        except Unavailable as exc:  # the first search says it again, and fails
            log.warning("%s", exc)
    return record


def int8_twin(model_file: Path, sha256: str) -> Path:
    """The int8 twin of a checked fp32 export, made on first use and kept beside it.

    onnxruntime's dynamic quantisation: every MatMul with a weight operand gets int8 weights,
    one scale per output channel, and quantises its input per tensor at run time (attention's
    own products, layer norms, GELU and pooling stay fp32). The output is a pure function of
    the fp32 file, so it is made again, never trusted, when its record (`int8.json`) names
    another source sha256 or its own sha256 does not check out.

    Args:
        model_file: the fp32 export, already checked against `sha256`.
    Raises:
        Unavailable: the twin cannot be written (read-only store folder, quantiser error).
    """
    folder = model_file.parent
    target, info_file = folder / INT8_FILE, folder / INT8_INFO_FILE
    with contextlib.suppress(OSError, ValueError, KeyError):
        info = json.loads(info_file.read_text())
        if info["source_sha256"] == sha256 and file_sha256(target) == info["sha256"]:
            return target
    tmp = folder / f".{INT8_FILE}.tmp-{os.getpid()}-{threading.get_ident()}"
    root = logging.getLogger()
    level = root.level
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        root.setLevel(logging.ERROR)  # the quantiser's advice to pre-process, on the root logger
        quantize_dynamic(model_file, tmp, weight_type=QuantType.QInt8, per_channel=True)
        info = {"source_sha256": sha256, "sha256": file_sha256(tmp),
                "scheme": "onnxruntime quantize_dynamic: int8 MatMul weights per output "
                          "channel, inputs per tensor"}
        tmp.with_suffix(".json").write_text(json.dumps(info, indent=2))
        os.replace(tmp, target)  # the same bytes whoever wins a race: deterministic
        os.replace(tmp.with_suffix(".json"), info_file)
    except Exception as exc:  # noqa: BLE001 - onnx/onnxruntime/OS errors alike
        raise Unavailable(f"cannot make the int8 twin of {model_file} in {folder} "
                          f"({type(exc).__name__}: {str(exc)[:200]})") from None
    finally:
        root.setLevel(level)
        for leftover in (tmp, tmp.with_suffix(".json")):
            leftover.unlink(missing_ok=True)
    log.info("made the int8 query encoder %s", target)
    return target


# -- runtime (no torch) -----------------------------------------------------------------------
class OnnxEncoder:
    """Encodes texts with an exported model: `tokenizers` + onnxruntime + numpy pooling.

    Matches `Encoder.encode_texts` / `encode_queries` (fp32 torch) within float rounding; the
    int8 twin (`int8=True` in `open`) only approximately (docs/guides/fast-queries.md).
    """

    def __init__(self, folder: Path, info: dict, config: ModelConfig, model_file: Path,
                 provenance: Provenance, threads: int | None = None):
        from tokenizers import Tokenizer

        self.folder, self.info, self.config = folder, info, config
        self.provenance = provenance
        self.dim = provenance.dim
        self.cls_id, self.sep_id, self.pad_id = info["cls_id"], info["sep_id"], info["pad_id"]
        self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.model_file = model_file
        self.session = self._session(threads or min(4, os.cpu_count() or 1))
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
        return ort.InferenceSession(str(self.model_file), options,
                                    providers=["CPUExecutionProvider"])

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
    def open(cls, store_dir: str | Path, record: dict | None, config: ModelConfig,
             stored: Provenance | None, int8: bool = False) -> OnnxEncoder:
        """The export an index version names, checked against it and the stored vectors.

        Args:
            int8: run the export's int8 twin (`int8_twin`, made now if missing) on one thread
                per call: a SciFact query took 3.1 ms on one thread, 3.5 ms on two, against
                5.3 ms for fp32 on two (docs/benchmarks.md).

        Raises:
            Unavailable: no export, a file missing or changed, or an export of other weights.
        """
        if not record:
            raise Unavailable("the index version names no ONNX query encoder")
        store_dir = Path(store_dir)
        model_file = store_dir / str(record.get("path", ""))
        folder = model_file.parent
        if folder.parent.resolve() != (store_dir / ENCODERS_DIR).resolve():
            raise Unavailable(f"the index version names {model_file}, outside "
                              f"{store_dir / ENCODERS_DIR}")
        try:
            info = json.loads((folder / INFO_FILE).read_text())
            st = model_file.stat()
            if ([st.st_size, st.st_mtime_ns] != [record.get("size"), record.get("mtime_ns")]
                    and file_sha256(model_file) != record.get("sha256")):
                raise Unavailable(f"{model_file} differs from the sha256 its index version "
                                  "records")
            if file_sha256(folder / TOKENIZER_FILE) != record.get("tokenizer_sha256"):
                raise Unavailable(f"{folder / TOKENIZER_FILE} differs from the sha256 its "
                                  "index version records")
        except (OSError, ValueError, KeyError) as exc:
            raise Unavailable(f"{folder}: {type(exc).__name__}: {exc}") from None
        exported = info["provenance"]
        if stored is not None:
            diffs = [f"{k}: {exported[k]!r} != {getattr(stored, k)!r}" for k in EXPORT_KEYS
                     if exported[k] != getattr(stored, k)]
            if diffs:
                raise Unavailable(f"{model_file} was exported from another encoder than the "
                                  f"stored vectors' (export != store: {'; '.join(diffs)})")
        if config.max_length > info["max_positions"]:
            raise ModelError(f"model.max_length {config.max_length} exceeds the model's "
                             f"{info['max_positions']} positions")
        provenance = Provenance(
            model_name=exported["model_name"],
            weights_hash=_configured_weights_hash(config, info),
            pooling=config.pooling, normalize=config.normalize, max_length=config.max_length,
            dim=exported["dim"],
            dtype="int8" if int8 else "fp32", document_prompt=config.document_prompt,
            query_prompt=config.query_prompt,
        )
        if int8:
            model_file = int8_twin(model_file, record["sha256"])
        try:
            return cls(folder, info, config, model_file, provenance, 1 if int8 else None)
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own errors: fall back
            raise Unavailable(f"onnxruntime cannot load {model_file}: {str(exc)[:200]}") from None

    # -- encoding ---------------------------------------------------------------------------
    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """One vector per text, truncated to `max_length` tokens, as `Encoder.encode_texts`."""
        room = self.config.max_length - 2
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        seqs = [[self.cls_id, *e.ids[:room], self.sep_id] for e in encodings]
        out = np.zeros((len(seqs), self.dim), dtype=np.float32)
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
        for start in range(0, len(order), QUERY_BATCH):
            rows = order[start:start + QUERY_BATCH]
            width = len(seqs[rows[0]])
            ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                ids[r, :len(seqs[i])] = seqs[i]
                mask[r, :len(seqs[i])] = 1
            with self._pick_session() as session:
                (states,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
            out[rows] = self._pool(states.astype(np.float32), mask)
        return out

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """`model.query_prompt` + query, encoded as `encode_texts`."""
        prompt = self.config.query_prompt
        return self.encode_texts([prompt + q for q in queries] if prompt else queries)

    def _pool(self, states: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """numpy twin of `indexer.encode.pooling.pool` + `l2_normalize`."""
        if self.info["output"] == "pooler":
            vectors = states
        elif self.config.pooling == "cls":
            vectors = states[:, 0]
        else:  # mean, and last4 (the last four layers concatenated, then averaged)
            m = mask[:, :, None].astype(np.float32)
            vectors = (states * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
        if self.config.normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
        return vectors.astype(np.float32)


def _configured_weights_hash(config: ModelConfig, info: dict) -> str:
    """The configured model's weights hash: the export's when the configured directory is
    the one it was exported from with the same weight files (size, mtime), else hashed now."""
    model_dir = resolve_model_path(config.name)
    recorded = info.get("weights") or {}
    if (str(model_dir) == recorded.get("dir")
            and weight_stats(model_dir) == recorded.get("files")):
        return info["provenance"]["weights_hash"]
    return weights_hash(model_dir)


def load_query_encoder(config: Config, store, index):
    """The encoder a search uses for its queries (`search.query_encoder`).

    `auto`: the ONNX export the index version names when it checks out, else the torch
    encoder with one line on stderr saying why; `onnx`: the export or an error; `onnx-int8`:
    the export's int8 twin or an error; `torch`: the torch encoder. Either way the configured model must be the stored vectors' (else
    ProvenanceMismatch, as before).

    Args:
        store: the open Store.
        index: the loaded VectorIndex (None: no index yet).
    """
    mode = config.search.query_encoder
    if mode != "torch":
        try:
            if index is None:
                raise Unavailable(f"the store {store.path} has no index version yet")
            encoder = OnnxEncoder.open(store.path, index.query_encoder, config.model,
                                       store.provenance(), int8=mode == "onnx-int8")
        except Unavailable as exc:
            fix = (f"index into --store {store.path} again to export it (unchanged documents "
                   "are skipped)")
            if mode != "auto":
                raise ModelError(f"search.query_encoder is {mode} but {exc}; {fix}, or set "
                                 "search.query_encoder to auto") from None
            log.warning("%s: encoding the query with torch (slower start); %s", exc, fix)
        else:
            store.check_provenance(encoder.provenance, QUERY_KEYS)
            return encoder
    from indexer.encode.encoder import load_encoder

    encoder = load_encoder(config.model)
    store.check_provenance(encoder.provenance, QUERY_KEYS)
    return encoder
