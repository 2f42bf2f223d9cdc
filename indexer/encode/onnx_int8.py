"""The int8 twin of an ONNX query encoder export (`search.query_encoder: onnx-int8`): derived
from the checked fp32 file with onnxruntime's dynamic quantisation, kept beside it.

Two twins, chosen by the CPU that runs it: 8-bit weights where the CPU has int8 dot-product
instructions (VNNI, AMX), 7-bit weights elsewhere. Without VNNI, onnxruntime's u8s8 kernels
add pairs of products in int16 and saturate with full-range weights (onnxruntime's
`reduce_range` note): on an AVX2-only EPYC the 8-bit twin of the tiny test model fell to a
cosine of 0.73 against fp32. A store shared by both kinds of machine keeps both files.

Does not check the fp32 file (the caller has) nor run the twin (`indexer.encode.onnx_runtime`).
Imports neither torch nor transformers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path

from indexer.core.fsio import file_sha256
from indexer.core.machine import has_vnni
from indexer.encode.onnx_files import Unavailable, int8_files

log = logging.getLogger(__name__)


def int8_twin(model_file: Path, sha256: str, reduce_range: bool | None = None) -> Path:
    """The int8 twin of a checked fp32 export, made on first use and kept beside it.

    onnxruntime's dynamic quantisation: every MatMul with a weight operand gets int8 weights,
    one scale per output channel, and quantises its input per tensor at run time (attention's
    own products, layer norms, GELU and pooling stay fp32). The output is a pure function of
    the fp32 file, so it is made again, never trusted, when its record (`int8.json`) names
    another source sha256 or its own sha256 does not check out.

    Args:
        model_file: the fp32 export, already checked against `sha256`.
        sha256: the fp32 export's sha256, as its index version records it.
        reduce_range: 7-bit weights (None: where this CPU has no VNNI).
    Returns:
        The twin's path (`model.int8.onnx`, or `model.int8-7bit.onnx`, beside `model_file`).
    Raises:
        Unavailable: the twin cannot be written (read-only store folder, quantiser error).
    """
    if reduce_range is None:
        reduce_range = not has_vnni()
    folder = model_file.parent
    names = int8_files(reduce_range)
    target, info_file = folder / names[0], folder / names[1]
    with contextlib.suppress(OSError, ValueError, KeyError):
        info = json.loads(info_file.read_text())
        if info["source_sha256"] == sha256 and file_sha256(target) == info["sha256"]:
            return target
    tmp = folder / f".{names[0]}.tmp-{os.getpid()}-{threading.get_ident()}"
    root = logging.getLogger()
    level = root.level
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        root.setLevel(logging.ERROR)  # the quantiser's advice to pre-process, on the root logger
        quantize_dynamic(
            model_file,
            tmp,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=reduce_range,
        )
        info = {
            "source_sha256": sha256,
            "sha256": file_sha256(tmp),
            "scheme": "onnxruntime quantize_dynamic: int8 MatMul weights per output "
            "channel, inputs per tensor",
            "weight_bits": 7 if reduce_range else 8,
        }
        tmp.with_suffix(".json").write_text(json.dumps(info, indent=2))
        os.replace(tmp, target)  # the same bytes whoever wins a race: deterministic
        os.replace(tmp.with_suffix(".json"), info_file)
    except Exception as exc:  # noqa: BLE001 - onnx/onnxruntime/OS errors alike
        raise Unavailable(
            f"cannot make the int8 twin of {model_file} in {folder} "
            f"({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    finally:
        root.setLevel(level)
        for leftover in (tmp, tmp.with_suffix(".json")):
            leftover.unlink(missing_ok=True)
    log.info("made the int8 query encoder %s", target)
    return target
