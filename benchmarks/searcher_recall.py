"""Recall@10 of a scale store's dense search against exact search, in one process: the
searcher answers the same 200 held-out queries `scale.py`'s `serve` phase asks (same index and
config), and `scale.recall` computes the exact top 10 over the store's vectors.

    python benchmarks/searcher_recall.py --folder DIR/n10000000 --encoder DIR/encoder-0-layer
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import scale  # noqa: E402

from indexer.config import load_config  # noqa: E402
from indexer.query.searcher import Searcher  # noqa: E402
from indexer.store import Store  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True, help="a size's folder (n<N>)")
    parser.add_argument("--encoder", type=Path, required=True, help="the 0-layer encoder folder")
    args = parser.parse_args()
    cfg = load_config(str(args.folder / "config.yaml"))
    queries = scale.tweets()[1][:200]
    with Store(cfg.store.path, read_only=True) as store:
        searcher = Searcher(cfg, store)
        served = [[h.id for h in searcher.search(q, k=10, mode="dense")] for q in queries]
    print(scale.recall(args.folder / "store", served, queries, args.encoder))


if __name__ == "__main__":
    main()
