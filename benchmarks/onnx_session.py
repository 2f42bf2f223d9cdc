"""Opening the ONNX query encoder: its weights inside `model.onnx` (exports before
`model.onnx.data`) against beside it (ONNX external data, which onnxruntime maps), the same
graph and weights, in fresh processes alternated. Prints, for each layout, the p50 time to
create the session and the anonymous memory and file Pss the session adds to its process
(/proc/self/smaps_rollup), and checks both encode alike.

    python benchmarks/onnx_session.py --export STORE/encoders/HASH-mean/model.onnx \
        [--runs 9] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import machine, write_json

from indexer.encode.onnx_files import DATA_FILE, EXTERNAL_MIN_BYTES, MODEL_FILE

CHILD = """
import json, sys, time, numpy as np, onnxruntime as ort
def mem():
    rows = dict(l.split(":", 1) for l in open("/proc/self/smaps_rollup").read().splitlines()[1:])
    return [int(rows[k].split()[0]) / 1024 for k in ("Anonymous", "Pss_File")]
before = mem()
options = ort.SessionOptions(); options.intra_op_num_threads = 1; options.log_severity_level = 3
start = time.perf_counter()
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
opened = time.perf_counter() - start
ids = np.array([[101, 7592, 2088, 102]], np.int64)
feeds = {i.name: ids if "ids" in i.name else np.ones_like(ids) for i in session.get_inputs()}
out = np.asarray(session.run(None, feeds)[0], np.float64)
after = mem()
print(json.dumps({"open_ms": opened * 1e3, "anon_mb": after[0] - before[0],
                  "file_pss_mb": after[1] - before[1], "sum": float(out.sum())}))
"""


def layouts(export: Path, folder: Path) -> dict[str, Path]:
    """The export in both layouts under `folder`: `inside/model.onnx`, `apart/model.onnx` with
    `apart/model.onnx.data`."""
    import onnx

    model = onnx.load(str(export))  # with its external data, if it has some
    inside, apart = folder / "inside", folder / "apart"
    inside.mkdir(), apart.mkdir()
    onnx.save_model(model, str(inside / MODEL_FILE))
    onnx.save_model(
        model,
        str(apart / MODEL_FILE),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=DATA_FILE,
        size_threshold=EXTERNAL_MIN_BYTES,
    )
    return {"inside": inside / MODEL_FILE, "apart": apart / MODEL_FILE}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, required=True, help="an export's model.onnx")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bertindex-onnx-session-") as tmp:
        files = layouts(args.export, Path(tmp))
        rows: dict[str, list[dict]] = {name: [] for name in files}
        for i in range(args.runs):
            for name in files if i % 2 == 0 else list(files)[::-1]:
                done = subprocess.run(
                    [sys.executable, "-c", CHILD, str(files[name])],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                rows[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
        sizes = {
            name: {p.name: p.stat().st_size for p in path.parent.iterdir()}
            for name, path in files.items()
        }
    result = {
        "command": " ".join(sys.argv),
        "machine": machine(),
        "export": str(args.export),
        "bytes": sizes,
        "same_output": len({r["sum"] for v in rows.values() for r in v}) == 1,
        "layouts": {
            name: {
                k: round(statistics.median(r[k] for r in v), 2)
                for k in ("open_ms", "anon_mb", "file_pss_mb")
            }
            for name, v in rows.items()
        },
    }
    print(json.dumps({k: result[k] for k in ("layouts", "same_output", "bytes")}, indent=1))
    write_json(args.out, result)


if __name__ == "__main__":
    main()
