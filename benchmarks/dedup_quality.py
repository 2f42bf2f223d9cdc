"""Near-duplicate quality on real tweets: the TweetEval tweets (../shared/data/tweeteval, every
split that has text, ~41k) plus realistic copies of a seeded sample of them (retweet prefix
`RT @user:`, URLs changed or added, hashtags added or dropped, case, punctuation, one or two
word edits, emoji), all encoded once with the packaged all-MiniLM-L6-v2.

Sources are tweets with no other original within cosine 0.8, so that the known copies are the
whole truth for them. The families (a source and its copies) are split in two seeded halves:
the threshold and the word-overlap check are chosen on half A (highest recall at pair
precision >= 0.97), then `bertindex dedup`'s own code (`run_dedup` on a store holding every
tweet and copy) groups everything and pair precision / recall are reported on half B. Pairs
count within a group: a pair of one family is true, a family member paired with anything else
is false; recall is over all pairs of each family.

Also: how many near-duplicate groups the original tweets already contain (real waves), with
examples. Vectors are cached in --cache (the encoding is the slow part).

    python benchmarks/dedup_quality.py --sources 4000 --out benchmarks/results/dedup_quality.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from machine import write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
DATA = ROOT.parent / "shared" / "data" / "tweeteval"

EMOJI = ["😂", "🔥", "👍", "🙏", "😡", "❤️", "💯", "👀", "😭", "🇺🇸", "✅", "🚨"]
FLOOR = 0.5  # lowest cosine swept
FILES = [
    (task, split)
    for task in ("hate", "offensive", "sentiment")
    for split in ("train", "val", "test")
]


def load_tweets(limit: int | None) -> tuple[list[str], list[str]]:
    """(ids, texts) of every TweetEval tweet with text, in file order."""
    ids, texts = [], []
    for task, split in FILES:
        path = DATA / task / f"{split}_text.txt"
        if not path.is_file():
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            ids.append(f"{task}-{split}-{i}")
            texts.append(line.strip())
    if limit:
        ids, texts = ids[:limit], texts[:limit]
    return ids, texts


class Copier:
    """Realistic copies of a tweet, from pools drawn from the corpus itself."""

    def __init__(self, texts: list[str], seed: int = 0):
        self.rng = random.Random(seed)
        words = Counter(w for t in texts for w in re.findall(r"[a-z']{2,}", t.lower()))
        self.words = [w for w, _ in words.most_common(3000)]
        tags = Counter(h for t in texts for h in re.findall(r"#\w+", t))
        self.tags = [h for h, _ in tags.most_common(300)] or ["#news"]

    def _edit_words(self, text: str) -> str:
        words = text.split()
        plain = [i for i, w in enumerate(words) if not re.match(r"[@#]|http", w)]
        for _ in range(self.rng.choice((1, 2))):
            kind = self.rng.choice(("replace", "delete", "insert"))
            if kind == "insert" or len(plain) < 3:
                words.insert(self.rng.randrange(len(words) + 1), self.rng.choice(self.words))
            else:
                i = self.rng.choice(plain)
                if i >= len(words):
                    continue
                if kind == "replace":
                    words[i] = self.rng.choice(self.words)
                else:
                    del words[i]
            plain = [i for i, w in enumerate(words) if not re.match(r"[@#]|http", w)]
        return " ".join(words)

    def copy(self, text: str) -> tuple[str, list[str]]:
        """One copy and the edits made."""
        rng = self.rng
        ops = [
            op
            for op, p in (
                ("edit", 0.6),
                ("case", 0.3),
                ("punct", 0.4),
                ("tags", 0.4),
                ("url", 0.5),
                ("emoji", 0.4),
                ("rt", 0.5),
            )
            if rng.random() < p
        ]
        if not ops:
            ops = [rng.choice(("edit", "case", "punct", "tags", "url", "emoji", "rt"))]
        out = text
        if "edit" in ops:
            out = self._edit_words(out)
        if "case" in ops:
            out = rng.choice((str.lower, str.upper, str.capitalize))(out)
        if "punct" in ops:
            out = rng.choice(
                (
                    lambda s: re.sub(r"[.!?,;:]+", "", s),
                    lambda s: s + "!!!",
                    lambda s: s.replace(".", "!") + "...",
                )
            )(out)
        if "tags" in ops:
            if "#" in out and rng.random() < 0.5:
                out = re.sub(r"#\w+", "", out, count=1)
            else:
                out = out + " " + " ".join(rng.sample(self.tags, k=min(2, rng.choice((1, 2)))))
        if "url" in ops:
            out = re.sub(r"https?://\S+", "", out)
            token = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=10))
            out = out + f" https://t.co/{token}"
        if "emoji" in ops:
            e = "".join(rng.choices(EMOJI, k=rng.choice((1, 2, 3))))
            out = (e + " " + out) if rng.random() < 0.3 else (out + " " + e)
        if "rt" in ops:
            out = "RT @user: " + out
        return " ".join(out.split()), ops


def encode(texts: list[str], cache: Path, part: int = 4000) -> tuple[np.ndarray, object]:
    """Vectors of `texts`, encoded `part` at a time, each part cached (a killed run resumes)."""
    from indexer.config import Config
    from indexer.encode.encoder import load_encoder

    cfg = Config().with_overrides(**{"model.max_length": 128, "long_documents.stride": 16})
    encoder = load_encoder(cfg.model)
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for s in range(0, len(texts), part):
        chunk = texts[s : s + part]
        key = hashlib.sha256("\n".join(chunk).encode()).hexdigest()[:16]
        path = cache / f"tweets-{key}.npy"
        if not path.is_file():
            t = time.perf_counter()
            np.save(path, encoder.encode_texts(chunk).astype(np.float32))
            print(
                f"encoded {s + len(chunk)}/{len(texts)} ({time.perf_counter() - t:.0f}s, load "
                f"{os.getloadavg()[0]:.1f})",
                file=sys.stderr,
                flush=True,
            )
        out.append(np.load(path))
    return np.concatenate(out), encoder.provenance


def batches_of(vectors: np.ndarray, size: int = 65536):
    def gen():
        for s in range(0, len(vectors), size):
            ids = np.arange(s, min(s + size, len(vectors)), dtype=np.int64)
            yield ids, ids, vectors[s : s + size]

    return gen


def pair_scores(groups: np.ndarray, family: np.ndarray, half: np.ndarray, which: int) -> dict:
    """Pair precision and recall for the families of one half.

    Args:
        groups: group label per document.
        family: family id per document (-1: not in a family).
        half: half (0/1) per family id.
        which: the half scored.
    """
    in_h = (family >= 0) & (half[np.maximum(family, 0)] == which)
    fam_sizes = Counter(family[in_h].tolist())
    truth = sum(s * (s - 1) // 2 for s in fam_sizes.values())
    predicted = tp = 0
    members: dict[int, list[int]] = {}
    for i in np.nonzero(in_h)[0].tolist():
        members.setdefault(int(groups[i]), []).append(i)
    sizes = Counter(groups.tolist())
    for g, ms in members.items():
        m = len(ms)
        predicted += m * (m - 1) // 2 + m * (sizes[g] - m)
        tp += sum(c * (c - 1) // 2 for c in Counter(family[ms].tolist()).values())
    return {
        "precision": round(tp / predicted, 4) if predicted else 1.0,
        "recall": round(tp / truth, 4) if truth else 1.0,
        "true_pairs": truth,
        "predicted_pairs": predicted,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="originals used (default: all)")
    ap.add_argument("--sources", type=int, default=4000, help="tweets given copies")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--goal-precision", type=float, default=0.97)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "bertindex-dedup")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    from indexer.dedup.groups import UnionFind, group_all, run_dedup
    from indexer.dedup.neighbours import Pairs, all_pairs
    from indexer.dedup.text import MIN_SHARED_WORDS, jaccard, word_set

    ids, texts = load_tweets(args.limit)
    n0 = len(texts)
    orig_vectors, provenance = encode(texts, args.cache)
    # sources: tweets with no other original within cosine 0.8 and at least 3 words
    loose = all_pairs(
        batches_of(orig_vectors), n0, orig_vectors.shape[1], 0.8, 8, (np.arange(n0), np.arange(n0))
    )
    crowded = set(loose.a.tolist()) | set(loose.b.tolist())
    rng = random.Random(args.seed)
    eligible = [i for i in range(n0) if i not in crowded and len(word_set(texts[i])) >= 3]
    sources = rng.sample(eligible, min(args.sources, len(eligible)))
    copier = Copier(texts, args.seed)
    copy_texts, copy_of, copy_ops = [], [], Counter()
    for f, s in enumerate(sources):
        for _ in range(rng.randint(1, 4)):
            text, ops = copier.copy(texts[s])
            copy_texts.append(text)
            copy_of.append(f)
            copy_ops.update(ops)
    copy_vectors, _ = encode(copy_texts, args.cache)
    all_texts = texts + copy_texts
    vectors = np.concatenate([orig_vectors, copy_vectors])
    n = len(all_texts)
    family = np.full(n, -1, np.int64)
    family[sources] = np.arange(len(sources))
    family[n0:] = copy_of
    half = np.array([rng.random() < 0.5 for _ in sources], dtype=np.int64)

    # -- the sweep on half A: candidate pairs once at the loosest threshold -----------------
    t = time.perf_counter()
    cand = all_pairs(
        batches_of(vectors), n, vectors.shape[1], FLOOR, 32, (np.arange(n), np.arange(n))
    )
    words = [word_set(x) for x in all_texts]
    jac = np.array([jaccard(words[a], words[b]) for a, b in zip(cand.a, cand.b)])
    shared = np.array([len(words[a] & words[b]) for a, b in zip(cand.a, cand.b)])
    equal = np.array([words[a] == words[b] for a, b in zip(cand.a, cand.b)])
    sweep_s = time.perf_counter() - t
    grid = []
    docs = np.arange(n)
    for threshold in np.round(np.arange(FLOOR, 0.97, 0.02), 2):
        for min_j in (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7):
            text_ok = equal | ((jac >= min_j) & (shared >= MIN_SHARED_WORDS))
            keep = (cand.score >= threshold) & (text_ok if min_j > 0 else True)
            groups = group_all(docs, Pairs(cand.a[keep], cand.b[keep], cand.score[keep], n))
            grid.append(
                {
                    "threshold": float(threshold),
                    "min_jaccard": min_j,
                    **pair_scores(groups, family, half, 0),
                }
            )
    ok = [g for g in grid if g["precision"] >= args.goal_precision]
    best = max(ok or grid, key=lambda g: (g["recall"], g["precision"], g["threshold"]))
    text_off = max(
        (g for g in ok if g["min_jaccard"] == 0.0),
        default=None,
        key=lambda g: (g["recall"], g["threshold"]),
    )

    # -- the product on everything, scored on half B ---------------------------------------
    from indexer.config import Config
    from indexer.ingest.readers import Record
    from indexer.store import ChunkRows, Store, content_hash

    work = Path(tempfile.mkdtemp(prefix="bertindex-dedupq-"))
    cfg = Config().with_overrides(**{"store.path": str(work / "store"), "index.spec": "Flat"})
    with Store(work / "store") as store:
        store.vectors.set_provenance(provenance)
        for s in range(0, n, 8192):
            part = range(s, min(n, s + 8192))
            doc_ids = store.documents.next_ids("doc_ids", len(part))
            recs = [
                Record(ids[i] if i < n0 else f"copy-{i - n0}", all_texts[i], None, {}, "q", i)
                for i in part
            ]
            rows = [(d, r, content_hash(r)) for d, r in zip(doc_ids, recs)]
            k = len(part)
            store.documents.write_batch(
                "tweets",
                rows,
                [],
                [],
                ChunkRows(doc_ids, [0] * k, [0] * k, [1] * k, [1] * k, vectors[s : s + k]),
                [],
                "bench",
            )
        first_doc = doc_ids[-1] - n + 1
    t = time.perf_counter()
    summary = run_dedup(cfg, "tweets", best["threshold"], 2, best["min_jaccard"], publish=False)
    product_s = time.perf_counter() - t
    with Store(work / "store", read_only=True, snapshot=False) as store:
        got = store.dedup.groups_of(range(first_doc, first_doc + n))
    groups = np.array([got[first_doc + i] for i in range(n)], dtype=np.int64)
    held_out = pair_scores(groups, family, half, 1)
    chosen_on_a = pair_scores(groups, family, half, 0)

    # -- real waves among the originals ----------------------------------------------------
    uf = UnionFind()
    for i in range(n0):
        uf.find(int(groups[i]))
    per_group = Counter(groups[:n0].tolist())
    waves = {g: c for g, c in per_group.items() if c >= 2}
    examples = []
    for g, c in sorted(waves.items(), key=lambda x: -x[1])[:6]:
        members = [i for i in np.nonzero(groups[:n0] == g)[0].tolist()][:3]
        examples.append({"size": c, "texts": [texts[i][:140] for i in members]})
    from machine import machine

    report = {
        "originals": n0,
        "sources": len(sources),
        "copies": len(copy_texts),
        "copy_edits": dict(copy_ops),
        "half_a_families": int((half == 0).sum()),
        "half_b_families": int((half == 1).sum()),
        "chosen": {"threshold": best["threshold"], "min_jaccard": best["min_jaccard"]},
        "half_a_at_choice": chosen_on_a,
        "half_b": held_out,
        "best_without_text_check_on_a": text_off,
        "product_run": summary,
        "product_seconds": round(product_s, 1),
        "sweep_candidates_seconds": round(sweep_s, 1),
        "real_waves": {
            "groups_2plus": len(waves),
            "groups_3plus": sum(c >= 3 for c in waves.values()),
            "tweets_in_waves": int(sum(waves.values())),
            "examples": examples,
        },
        "grid": grid,
        **machine(),
    }
    print(
        json.dumps(
            {k: v for k, v in report.items() if k != "grid"},
            indent=1,
            ensure_ascii=False,
            default=str,
        )
    )
    write_json(args.out, report, ensure_ascii=False, default=str)
    import shutil

    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
