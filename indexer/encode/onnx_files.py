"""The ONNX query encoder's files under a store, and its one error: names shared by the export
(`onnx_export`, torch), the int8 twin (`onnx_int8`) and the runtime (`onnx_runtime`, no torch).

Layout: `<store>/encoders/<weights hash>-<pooling>/` holds `model.onnx` (the transformer in
fp32: token ids in, the output its pooling reads out) with its large weights in `model.onnx.data`
(ONNX external data; an export made before that holds them in `model.onnx`), `tokenizer.json`
and `encoder.json` (what it was exported from, its sha256); the int8 twin beside it as
`model.int8.onnx` with `int8.json`. Writes and reads no file's content itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from indexer.core.choices import PoolingMode
from indexer.records.provenance import Provenance

ENCODERS_DIR = "encoders"
MODEL_FILE = "model.onnx"
# the export's weights of at least EXTERNAL_MIN_BYTES each, beside the graph: onnxruntime maps
# the file instead of parsing the weights out of the protobuf and copying them (a session in
# ~10 ms instead of ~55-130 for the 47 MB of the 10M store's 0-layer export, AMD EPYC), and
# every server process reads the same cached pages
DATA_FILE = "model.onnx.data"
EXTERNAL_MIN_BYTES = 1 << 16
TOKENIZER_FILE = "tokenizer.json"
INFO_FILE = "encoder.json"
# the int8 twins (`indexer.encode.onnx_int8`): full 8-bit weights for CPUs with int8 dot-product
# instructions (VNNI, AMX), 7-bit weights for the others, each with its record
INT8_FILE = "model.int8.onnx"
INT8_INFO_FILE = "int8.json"
INT8_7BIT_FILE = "model.int8-7bit.onnx"
INT8_7BIT_INFO_FILE = "int8-7bit.json"


def int8_files(reduce_range: bool) -> tuple[str, str]:
    """(twin file, record file) names of the int8 twin with 7-bit (`reduce_range`) or 8-bit
    weights."""
    return (INT8_7BIT_FILE, INT8_7BIT_INFO_FILE) if reduce_range else (INT8_FILE, INT8_INFO_FILE)


# what the exported graph returns (`encoder.json` "output"): the last layer's token states
# (batch, tokens, hidden), the pooler output (batch, hidden), or the last four layers' token
# states concatenated (batch, tokens, 4 * hidden)
OutputKind = Literal["states", "pooler", "last4"]

# what an export is given, in this order: (batch, tokens) int64 each. The exporter drops an
# input the graph never reads (a 0-layer model never reads the mask): a run feeds only the
# inputs its graph declares (`OnnxEncoder.feed_names`)
GRAPH_INPUTS = ("input_ids", "attention_mask")


class Unavailable(Exception):
    """The ONNX query encoder cannot be used; the message says why."""


def export_parts(model_file: Path, with_data: bool | None = None) -> list[Path]:
    """The files an export's sha256 covers, in order: the graph, then its weights file.

    Args:
        model_file: the export's `model.onnx`.
        with_data: whether the export has a weights file (None: whether one is there).
    """
    data = model_file.with_name(DATA_FILE)
    if with_data is None:
        with_data = data.is_file()
    return [model_file, data] if with_data else [model_file]


def encoder_dir(store_dir: str | Path, provenance: Provenance) -> Path:
    """The folder of the export made for `provenance`'s weights and pooling.

    Args:
        store_dir: the store directory.
        provenance: the encoder's (or the stored vectors') provenance.
    Returns:
        `<store>/encoders/<weights hash>-<pooling>`.
    """
    return Path(store_dir) / ENCODERS_DIR / f"{provenance.weights_hash}-{provenance.pooling}"


def output_kind(pooling: PoolingMode) -> OutputKind:
    """The output an export for `pooling` returns: what that pooling reads.

    Args:
        pooling: the `model.pooling` mode.
    Returns:
        `pooler` and `last4` for those modes; `states` for `mean` and `cls`.
    """
    if pooling == "pooler":
        return "pooler"
    if pooling == "last4":
        return "last4"
    return "states"
