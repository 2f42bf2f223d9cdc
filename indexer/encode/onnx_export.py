"""The ONNX export of the encoder: made once per store and model when an index version is
written, so searches can encode queries without torch (`indexer.encode.onnx_runtime`).

Each index version's provenance.json names the file and its sha256 (`query_encoder`); a
search checks both before it uses the file (`OnnxEncoder.open`). Needs torch, imported in the
functions that export; does not run the export.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import warnings
from pathlib import Path

from indexer.config import Config
from indexer.core.fsio import file_sha256, files_sha256, fsync_dir, fsync_file
from indexer.encode.model_facts import forward_inputs, load_transformer
from indexer.encode.onnx_files import (
    DATA_FILE,
    EXTERNAL_MIN_BYTES,
    GRAPH_INPUTS,
    INFO_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    OutputKind,
    Unavailable,
    encoder_dir,
    export_parts,
    output_kind,
)
from indexer.encode.onnx_int8 import int8_twin
from indexer.records.provenance import EXPORT_KEYS, Provenance, weight_stats

log = logging.getLogger(__name__)

OPSET = 17


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

            model, _ = load_transformer(
                encoder.model_dir, AutoModel, dtype=torch.float32, attn_implementation="eager"
            )
            model.eval()
        kind = output_kind(encoder.config.pooling)
        # eval: the exporter puts the module back in the mode it found it in, dropout included
        wrapper = _export_wrapper(model, kind).eval()
        ids = torch.tensor([[encoder.cls_id, encoder.pad_id, encoder.pad_id, encoder.sep_id]] * 2)
        mask = torch.ones_like(ids)
        mask[1, 2:] = 0
        axes = {
            **{name: {0: "batch", 1: "tokens"} for name in GRAPH_INPUTS},
            "output": {0: "batch"} if kind == "pooler" else {0: "batch", 1: "tokens"},
        }
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer notes on shapes; the test checks padding
            torch.onnx.export(
                wrapper,
                (ids, mask),
                str(tmp / MODEL_FILE),
                input_names=list(GRAPH_INPUTS),
                output_names=["output"],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
            )
        _weights_apart(tmp / MODEL_FILE)
        encoder.tokenizer.backend_tokenizer.save(str(tmp / TOKENIZER_FILE))
        info = _export_info(encoder, tmp, kind)
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=2))
        for path in (*export_parts(tmp / MODEL_FILE), tmp / TOKENIZER_FILE, tmp / INFO_FILE):
            fsync_file(path)
        fsync_dir(tmp)
        shutil.rmtree(folder, ignore_errors=True)  # an export that failed its check
        os.replace(tmp, folder)
        fsync_dir(folder.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("exported the query encoder to %s", folder / MODEL_FILE)
    return _record(Path(store_dir), folder, info)


def _weights_apart(model_file: Path) -> None:
    """Rewrite an export with its weights of at least `EXTERNAL_MIN_BYTES` in `DATA_FILE`
    beside it (ONNX external data, one file), which onnxruntime maps when it opens the
    graph; a graph without such weights stays one file. The weights file gets the graph's
    permissions (onnx writes it readable by its owner only; a server may run as another user)."""
    import onnx

    model = onnx.load(str(model_file))
    onnx.save_model(
        model,
        str(model_file),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=DATA_FILE,
        size_threshold=EXTERNAL_MIN_BYTES,
    )
    data = model_file.with_name(DATA_FILE)
    if data.is_file():
        data.chmod(model_file.stat().st_mode & 0o777)


def _export_info(encoder, tmp: Path, kind: str) -> dict:
    """What `info.json` says of an export in `tmp`: the encoder it came from, its special
    tokens and length, the files' sha256, and the weights' stats a search trusts it by."""
    import torch

    return {
        "provenance": {
            k: getattr(encoder.provenance, k)
            for k in ("model_name", "weights_hash", "pooling", "dim")
        },
        "output": kind,
        # the usable length (`model_facts.usable_length`), not the raw position count
        "max_positions": encoder.length.limit,
        "cls_id": encoder.cls_id,
        "sep_id": encoder.sep_id,
        "pad_id": encoder.pad_id,
        "padding_side": encoder.specials.padding_side,
        "sha256": files_sha256(export_parts(tmp / MODEL_FILE)),  # graph and weights
        "tokenizer_sha256": file_sha256(tmp / TOKENIZER_FILE),
        # the weights it came from: a search trusts the hash while these are unchanged
        "weights": {"dir": str(encoder.model_dir), "files": weight_stats(encoder.model_dir)},
        "opset": OPSET,
        "torch": torch.__version__,
    }


def _record(store_dir: Path, folder: Path, info: dict) -> dict:
    graph, *data = export_parts(folder / MODEL_FILE)
    st = graph.stat()
    record = {
        "path": str(graph.relative_to(store_dir)),
        "sha256": info["sha256"],
        "tokenizer_sha256": info["tokenizer_sha256"],
        # a search hashes the files again only when these changed (hashing costs 0.1 s)
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
    }
    if data:  # the weights file: [size, mtime_ns]
        weights = data[0].stat()
        record["data"] = [weights.st_size, weights.st_mtime_ns]
    return record


def _valid_record(store_dir: Path, folder: Path) -> dict | None:
    """The record of an earlier, intact export in `folder`; None when there is none."""
    try:
        info = json.loads((folder / INFO_FILE).read_text())
        if (
            files_sha256(export_parts(folder / MODEL_FILE)) != info["sha256"]
            or file_sha256(folder / TOKENIZER_FILE) != info["tokenizer_sha256"]
        ):
            return None
    except (OSError, ValueError, KeyError):
        return None
    return _record(store_dir, folder, info)


def _wrapper_class():
    import torch

    class ExportWrapper(torch.nn.Module):
        """The transformer with the one output its pooling reads (`OutputKind`)."""

        def __init__(self, model, kind: OutputKind):
            super().__init__()
            self.model, self.kind = model, kind

        def forward(self, input_ids, attention_mask):
            out = self.model(
                **forward_inputs(self.model, input_ids, attention_mask),
                output_hidden_states=self.kind == "last4",
            )
            if self.kind == "pooler":
                return out.pooler_output  # (batch, hidden)
            if self.kind == "last4":
                return torch.cat(out.hidden_states[-4:], dim=-1)  # (batch, tokens, 4 * hidden)
            return out.last_hidden_state  # (batch, tokens, hidden)

    return ExportWrapper


def _export_wrapper(model, kind: OutputKind):
    return _wrapper_class()(model, kind)


def export_for_index(
    store_dir: str | Path, config: Config, provenance: Provenance, encoder=None
) -> dict | None:
    """The ONNX export an index version records: reused when intact, else made now.

    None (and a warning) when `search.query_encoder` is `torch`, the configured model is not
    the one the vectors were made with, or the export fails: searches then use torch. With
    `onnx-int8`, the int8 twin is derived now too, so the first query does not wait for it.

    Args:
        store_dir: the store directory.
        config: the configuration (`search.query_encoder`, `model`).
        provenance: the stored vectors' provenance.
        encoder: the loaded Encoder, if any (else loaded when an export must be made).
    Returns:
        The export's record (as `export_encoder`), or None.
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
                log.warning(
                    "no ONNX query encoder exported: the configured model is not the "
                    "stored vectors' (%s)",
                    "; ".join(diffs),
                )
                return None
            record = export_encoder(encoder, store_dir)
    except Exception as exc:  # noqa: BLE001 - an optional artefact: indexing goes on
        log.warning(
            "ONNX export of the query encoder failed (%s: %s); searches will load torch",
            type(exc).__name__,
            str(exc)[:200],
        )
        return None
    if config.search.query_encoder == "onnx-int8":
        try:
            int8_twin(Path(store_dir) / record["path"], record["sha256"])
        except Unavailable as exc:  # the first search says it again, and fails
            log.warning("%s", exc)
    return record
