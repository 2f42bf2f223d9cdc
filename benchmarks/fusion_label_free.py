"""Label-free hybrid fusion rules, validated leaving one collection out: every parameter a rule
has is chosen on the other collections' judged queries, never on the set it is scored on; the
self-tuned rule (`indexer.indexing.fusion_tune`, the `search.dense_weight: auto` default) needs
no labels at all and is run with several seeds of its pseudo-query draw.

Reuses `store-<folder name>` under `--store-root` when present (any collection name; nothing is
re-encoded), else indexes the folder there; caches each split's dense and keyword rankings
(`rankings-<name>-<depth>.pkl`, as `fusion_robust.py`). Writes one JSON report and prints a
markdown table of nDCG@10 per set.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fusion_label_free.py \
        ../shared/data/scifact ../shared/data/msmarco-subset --store-root /tmp/fusion-work
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fusion_robust import adaptive, score
from fusion_robust import rankings as robust_rankings
from machine import write_json

from indexer.config import Config
from indexer.encode.encoder import load_encoder
from indexer.index import fusion
from indexer.indexing.fusion_tune import measure_dense_weight
from indexer.store import Store

GRID = [round(0.05 * i, 2) for i in range(2, 19)]  # fixed weights a LOCO fold may choose
PRIORS = (0.4, 0.5, 0.6, 0.7)  # the per-query rules' prior dense share


def open_config(folder: Path, store_root: Path, depth: int) -> Config:
    return Config().with_overrides(
        **{
            "store.path": str(store_root / f"store-{folder.name}"),
            "search.candidates": depth,
            "search.tune_queries": 0,
        }
    )


def rankings(folder: Path, store_root: Path, depth: int) -> dict:
    """`fusion_robust.rankings` with this benchmark's config (no tuning while indexing)."""
    return robust_rankings(folder, store_root, depth, open_config(folder, store_root, depth))


def _head(ranked, top: int = 10) -> float:
    """How far a ranking's head stands out: (s1 - s10) / (s1 - s_last), 0..1 (scale-free)."""
    scores = [s for _, s in ranked]
    if len(scores) <= top or scores[0] == scores[-1]:
        return 0.0
    return (scores[0] - scores[top - 1]) / (scores[0] - scores[-1])


def head_gap(dr, kr, prior: float = 0.5):
    """Per-query weights: each side's prior times its head's gap (`_head`)."""
    hd, hk = prior * _head(dr), (1 - prior) * _head(kr)
    w = hd / (hd + hk) if hd + hk > 0 else prior
    return fusion.weighted([dr, kr], [w, 1 - w])


def families() -> dict[str, dict[str, object]]:
    """rule family -> {parameter: fuse(dense, keyword)}; one entry: no parameter to choose."""
    return {
        "dense": {"-": lambda dr, kr: dr},
        "keyword": {"-": lambda dr, kr: kr},
        "fixed 0.6 (default before)": {"0.6": lambda dr, kr: fusion.weighted([dr, kr], [0.6, 0.4])},
        "fixed, LOCO-chosen": {
            str(w): (lambda dr, kr, w=w: fusion.weighted([dr, kr], [w, 1 - w])) for w in GRID
        },
        "rrf k60": {"-": lambda dr, kr: fusion.rrf([dr, kr], k=60)},
        "adaptive z, prior 0.5": {"0.5": lambda dr, kr: adaptive(dr, kr, 0.5)},
        "adaptive z, LOCO prior": {
            str(p): (lambda dr, kr, p=p: adaptive(dr, kr, p)) for p in PRIORS
        },
        "head gap, LOCO prior": {str(p): (lambda dr, kr, p=p: head_gap(dr, kr, p)) for p in PRIORS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+")
    parser.add_argument("--store-root", type=Path, default=Path("/tmp/bertindex-fusion"))
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--seeds", default="0,1,2", help="seeds of the self-tuned rule's draw")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks/results/fusion_label_free.json"
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    sets = {f.name: rankings(f, args.store_root, args.depth) for f in args.folders}
    # the split each set is scored on (test), and the judged queries a fold may tune on
    scored = {name: splits["test"] for name, splits in sets.items()}
    tuning = {name: splits.get("train", splits["test"]) for name, splits in sets.items()}

    # self-tuned: the weight each store picks for itself on pseudo-queries (no labels)
    self_tuned = {}
    for folder in args.folders:
        cfg = open_config(folder, args.store_root, args.depth).with_overrides(
            **{"search.tune_queries": 400}
        )
        encoder = load_encoder(cfg.model)
        with Store(cfg.store.path, read_only=True) as store:
            runs = {}
            for seed in seeds:
                runs[seed] = measure_dense_weight(store, cfg, encoder, seed).to_dict()
            runs["uncut"] = measure_dense_weight(store, cfg, encoder, seeds[0], cut=False).to_dict()
        self_tuned[folder.name] = runs
        print(
            folder.name,
            "self-tuned",
            {k: v["dense_weight"] for k, v in runs.items()},
            file=sys.stderr,
        )

    report: dict = {
        "scored_split": "test",
        "tuning_split_of_other_sets": "train, else test",
        "depth": args.depth,
        "self_tuned": self_tuned,
        "sets": {},
    }
    rules = families()
    for held in sets:
        side = scored[held]
        others = [n for n in sets if n != held]
        row = {}
        for family, params in rules.items():
            if len(params) == 1:
                ((param, fuse),) = params.items()
            else:  # chosen on the other collections' judged queries only
                param = max(
                    params,
                    key=lambda p: sum(score(tuning[o], params[p])["ndcg@10"] for o in others),
                )
                fuse = params[param]
            row[family] = {"param": param, **score(side, fuse)}
        for seed in seeds:
            w = self_tuned[held][seed]["dense_weight"]
            row[f"self-tuned, seed {seed}"] = {
                "param": str(w),
                **score(side, lambda dr, kr, w=w: fusion.weighted([dr, kr], [w, 1 - w])),
            }
        w = self_tuned[held]["uncut"]["dense_weight"]
        row["self-tuned, sentence not cut"] = {
            "param": str(w),
            **score(side, lambda dr, kr, w=w: fusion.weighted([dr, kr], [w, 1 - w])),
        }
        better = max(row["dense"]["ndcg@10"], row["keyword"]["ndcg@10"])
        for result in row.values():
            result["vs_better_half"] = round(result["ndcg@10"] - better, 4)
        report["sets"][f"{held}:test"] = {"queries": len(side[0]), "rules": row}

    write_json(args.out, report)
    names = list(next(iter(report["sets"].values()))["rules"])
    print("| rule | " + " | ".join(report["sets"]) + " |")
    print("|---|" + "---:|" * len(report["sets"]))
    for name in names:
        cells = []
        for result in (s["rules"][name] for s in report["sets"].values()):
            param = "" if result["param"] == "-" else f" (w/p {result['param']})"
            cells.append(f"{result['ndcg@10']:.4f} ({result['vs_better_half']:+.3f}){param}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
