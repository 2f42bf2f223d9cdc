"""The ONNX query encoder's files under a store, and its one error: names shared by the export
(`onnx_export`, torch), the int8 twin (`onnx_int8`) and the runtime (`onnx_runtime`, no torch).

Layout: `<store>/encoders/<weights hash>-<pooling>/` holds `model.onnx` (the transformer in
fp32: token ids in, the output its pooling reads out), `tokenizer.json` and `encoder.json`
(what it was exported from, its sha256); the int8 twin beside it as `model.int8.onnx` with
`int8.json`. Writes and reads no file itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from indexer.core.choices import PoolingMode
from indexer.records.provenance import Provenance

ENCODERS_DIR = "encoders"
MODEL_FILE = "model.onnx"
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
