"""The full grouping's candidate pairs two ways on one stored collection: streamed (the word
check applied query batch by query batch, as `bertindex dedup` runs) and the old way (every
candidate of the collection held, rescored, then word-checked), at the defaults (cosine 0.5,
32 neighbours, word check 0.6). Prints pairs, seconds and peak RSS of each (in one process:
the streamed run first, so the second figure is the peak of both) and whether pairs, cosines
and groups are identical.

    python benchmarks/dedup_stream_check.py STORE [--collection gen] [--old]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from indexer.dedup.groups import group_all, text_filter
    from indexer.dedup.neighbours import all_pairs
    from indexer.dedup.text import WordSets
    from indexer.store import Store

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--collection", default="gen")
    ap.add_argument("--old", action="store_true", help="also the old way, and compare")
    args = ap.parse_args()
    coll = args.collection

    def peak() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024

    with Store(args.store) as store:
        doc_ids, chunk_ids = store.dedup.first_chunks(coll)
        order = np.argsort(chunk_ids)
        chunk_doc = (chunk_ids[order], doc_ids[order])
        dim = store.vectors.provenance().dim
        t = time.perf_counter()
        words = WordSets(store.dedup.iter_texts(coll))
        t_words = time.perf_counter() - t
        new = all_pairs(
            lambda: store.dedup.iter_first_vectors(coll),
            len(doc_ids),
            dim,
            0.5,
            32,
            chunk_doc,
            accept=partial(words.same, min_jaccard=0.6),
        )
        print(
            "streamed",
            len(new.a),
            "pairs; words",
            round(t_words, 1),
            "s; total",
            round(time.perf_counter() - t, 1),
            "s; peak",
            peak(),
            "MB",
            flush=True,
        )
        if args.old:
            t = time.perf_counter()
            old = text_filter(
                store,
                all_pairs(
                    lambda: store.dedup.iter_first_vectors(coll),
                    len(doc_ids),
                    dim,
                    0.5,
                    32,
                    chunk_doc,
                ),
                0.6,
            )
            print(
                "old",
                len(old.a),
                "pairs;",
                round(time.perf_counter() - t, 1),
                "s; peak",
                peak(),
                "MB",
            )
            same = (
                np.array_equal(old.a, new.a)
                and np.array_equal(old.b, new.b)
                and np.array_equal(old.score, new.score)
            )
            print(
                "identical pairs and scores:",
                same,
                "groups identical:",
                np.array_equal(group_all(doc_ids, old), group_all(doc_ids, new)),
            )


if __name__ == "__main__":
    main()
