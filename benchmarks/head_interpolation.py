"""Weight-space interpolation between two saved heads of one architecture (WiSE-FT).

Writes `alpha * TO + (1 - alpha) * FROM` for each alpha (every floating-point tensor; the
rest and the config, tokenizer and pooling are TO's) to a temporary directory and scores it
on the validation and test splits with `bertindex eval head`'s scorer. FROM is typically a
`--head-only` head (the pretrained backbone), TO a full fine-tune from it (`--probe-epochs`).
Usage: python benchmarks/head_interpolation.py FROM TO --data ../shared/data/tweeteval/hate
       [--alphas 0.25,0.5,0.75]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("start", type=Path, help="FROM: the head at alpha 0")
    parser.add_argument("end", type=Path, help="TO: the head at alpha 1")
    parser.add_argument(
        "--data", required=True, help="classifier data with validation and test splits"
    )
    parser.add_argument("--alphas", default="0.25,0.5,0.75")
    args = parser.parse_args()

    from safetensors.torch import load_file, save_file

    from indexer.heads.data import read_head_data
    from indexer.heads.evaluate import evaluate_head

    data = read_head_data("classifier", args.data)
    a = load_file(args.start / "model.safetensors")
    b = load_file(args.end / "model.safetensors")
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        raise SystemExit(f"{args.start} and {args.end} do not hold the same tensors")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bertindex-interp-") as tmp:
        for alpha in (float(x) for x in args.alphas.split(",")):
            out = Path(tmp) / f"alpha-{alpha}"
            shutil.copytree(args.end, out)
            mixed = {
                k: (alpha * b[k].float() + (1 - alpha) * a[k].float()).to(b[k].dtype)
                if b[k].is_floating_point()
                else b[k]
                for k in b
            }
            save_file(mixed, out / "model.safetensors")
            row = {
                "alpha": alpha,
                **{
                    s: round(evaluate_head(out, data, s)["macro_f1"], 4)
                    for s in ("validation", "test")
                },
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(json.dumps({"from": str(args.start), "to": str(args.end), "rows": rows}))


if __name__ == "__main__":
    main()
