"""A 1 % re-run of a scale store with this tree's code against another tree's, alternated in one
run: what a change to the writer's commit of changed documents buys.

`benchmarks/scale.py` leaves a size's folder with `corpus.jsonl` and `changed/corpus.jsonl`
(1 % of the documents changed). Each round, this tree indexes one of the two files into the
store and the other tree (`--other`, a checkout of the code before, e.g. `git worktree add
DIR <commit>`) the other file, the order swapped every other round so that with an even
number of rounds each code runs as often in both directions (before 2026-12-07 this tree
always took the first file). Each run re-encodes the same 1 % (changed one way, then back),
each as `bertindex index --json` in its own process (`index_ab.index`). Reported: wall, CPU
and the run's busy seconds by stage, per run, with the file it indexed.

    .venv/bin/python benchmarks/changed_rerun_ab.py --folder DIR/n1000000 --other /work/old \\
        --rounds 2 --out benchmarks/results/changed_rerun_ab_1M_intel_s22.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from index_ab import alternate, index  # noqa: E402
from machine import machine  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, required=True, help="a size's folder of scale.py")
    parser.add_argument("--other", type=Path, required=True, help="a checkout of the other code")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--first",
        choices=("corpus", "changed"),
        default="corpus",
        help="the file the first run indexes: the one the store does not hold (scale.py's "
        "first run leaves corpus.jsonl, its 1 %% re-run changed/corpus.jsonl)",
    )
    args = parser.parse_args()
    files = [args.folder / "corpus.jsonl", args.folder / "changed" / "corpus.jsonl"]
    if args.first == "changed":
        files.reverse()
    report: dict = {"command": " ".join(sys.argv), "machine": machine(), "runs": []}
    store, config = args.folder / "store", args.folder / "config.yaml"

    def measure(name: str, round_: int, tree: Path) -> dict:
        # each code re-runs in both directions (`in_turn`), which need not cost the same
        record = {"file": str(files[0].relative_to(args.folder))}
        record |= index(tree, files[0], store, config)
        files.reverse()  # the next run changes the same 1 % back
        return record

    alternate(args, report, measure)


if __name__ == "__main__":
    main()
