"""Trends report at scale: `--docs` generated annotated comment-stream documents (a year of
times, 1 % without a readable one; five sources; one classifier head whose negative share
drifts; 0-3 entities a document from Zipf-distributed names, one of them rising; 1 % of the
documents in planted near-duplicate waves) written through the store's own methods, then the
JSON report timed: in process (`build_report` + one JSON line per bucket) and as the command
(`bertindex report --json`, a fresh process, imports included). `--html PNG` also renders the
HTML page and takes a screenshot of it in headless chromium (the docs' picture).

    python benchmarks/report_scale.py --docs 1000000 --out benchmarks/results/report_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from machine import write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SOURCES = ["web", "app", "forum", "email", "partner"]
WORDS = [
    "refund",
    "delivery",
    "late",
    "broken",
    "great",
    "love",
    "hate",
    "price",
    "support",
    "order",
    "account",
    "login",
    "password",
    "update",
    "crash",
    "slow",
    "fast",
    "thanks",
    "terrible",
    "awesome",
    "never",
    "again",
    "always",
]
BATCH = 50_000


def names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


def generate(store_dir: Path, docs: int, seed: int = 0) -> None:
    from indexer.ingest.readers import Record
    from indexer.records.annotations import Annotation, Entity, Label
    from indexer.store import ChunkRows, Store, content_hash

    rng = np.random.default_rng(seed)
    prng = random.Random(seed)
    start = datetime(2025, 1, 1)
    vocab = {"ORG": names("Org", 400), "PER": names("Person", 400), "LOC": names("Place", 200)}
    zipf = {
        t: (1 / np.arange(1, len(v) + 1)) / (1 / np.arange(1, len(v) + 1)).sum()
        for t, v in vocab.items()
    }
    with Store(store_dir) as store:
        for s in range(0, docs, BATCH):
            n = min(BATCH, docs - s)
            doc_ids = store.documents.next_ids("doc_ids", n)
            seconds = rng.integers(0, 365 * 86400, n)
            records, notes = [], []
            for j in range(n):
                when = start + timedelta(seconds=int(seconds[j]))
                r = rng.random()
                if r < 0.005:
                    meta_time = "not a date"
                elif r < 0.01:
                    meta_time = None
                elif r < 0.5:
                    meta_time = when.isoformat() + "Z"
                else:
                    meta_time = int(when.timestamp())
                meta = {"source": SOURCES[int(rng.integers(0, 5))]}
                if meta_time is not None:
                    meta["posted_at"] = meta_time
                text = " ".join(prng.choices(WORDS, k=8))
                records.append(Record(f"d{s + j}", text, None, meta, "gen", s + j + 1))
                day = seconds[j] / 86400
                p_neg = 0.2 + 0.3 * day / 365  # the negative share drifts up over the year
                lab = rng.choice(
                    ["negative", "neutral", "positive"], p=[p_neg, (1 - p_neg) / 2, (1 - p_neg) / 2]
                )
                ents = []
                for _ in range(int(rng.integers(0, 4))):
                    t = ("ORG", "PER", "LOC")[int(rng.integers(0, 3))]
                    name = vocab[t][int(rng.choice(len(vocab[t]), p=zipf[t]))]
                    if t == "ORG" and rng.random() < day / 365 * 0.1:
                        name = "Rising Corp"
                    ents.append(Entity(t, 0, len(name), name, 0.9, "ner"))
                notes.append(
                    Annotation(
                        labels=[Label(str(lab), float(rng.uniform(0.4, 1.0)), "sentiment")],
                        entities=ents,
                    )
                )
            rows = [(d, rec, content_hash(rec)) for d, rec in zip(doc_ids, records)]
            empty = ChunkRows([], [], [], [], [], np.zeros((0, 4), np.float32))
            store.documents.write_batch("stream", rows, [], [], empty, [], "gen")
            store.annotations.write(
                [(d, rec.text, h) for d, rec, h in rows], notes, {"sentiment": "v1", "ner": "v1"}
            )
            print(f"generated {s + n} documents", file=sys.stderr, flush=True)
        members = rng.permutation(np.arange(1, docs + 1))[: docs // 100]  # 1 % in waves
        wave, group = [], []
        at = 0
        while at < len(members):
            piece = members[at : at + int(rng.integers(5, 51))]
            wave.extend(int(d) for d in piece)
            group.extend([int(piece.min())] * len(piece))
            at += len(piece)
        store.dedup.write(
            "stream",
            wave,
            group,
            {},
            full=True,
            state={
                "threshold": 0.9,
                "min_jaccard": 0.5,
                "min_size": 3,
                "neighbours": 32,
                "summary": {"planted": len(wave)},
            },
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--work", type=Path, help="keep the store here (reused when present)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--html", type=Path, help="also write the HTML page and a PNG screenshot of it to this path"
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from machine import machine

    from indexer.config import Config
    from indexer.ops.status import open_latest
    from indexer.report.trends import build_report

    work = args.work or Path(tempfile.mkdtemp(prefix="bertindex-report-"))
    store_dir = work / f"store-{args.docs}"
    gen_s = None
    if not (store_dir / "store.duckdb").is_file():
        t = time.perf_counter()
        generate(store_dir, args.docs)
        gen_s = round(time.perf_counter() - t, 1)
    cfg = Config().with_overrides(**{"store.path": str(store_dir)})
    in_process = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        store, _ = open_latest(store_dir)
        with store:
            report = build_report(store, cfg, by="week", time_field="posted_at")
        lines = [json.dumps(b, default=str) for b in report["buckets"]]
        in_process.append(round(time.perf_counter() - t, 3))
    by_source = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        store, _ = open_latest(store_dir)
        with store:
            build_report(store, cfg, by="source")
        by_source.append(round(time.perf_counter() - t, 3))
    command = []
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for _ in range(args.repeats):
        t = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "search.cli.main",
                "report",
                "--json",
                "--store",
                str(store_dir),
                "--time-field",
                "posted_at",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        command.append(round(time.perf_counter() - t, 3))
        assert len(done.stdout.splitlines()) == len(lines)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import search.cli.main"], cwd=ROOT, env=env, check=True)
    import_s = round(time.perf_counter() - t, 3)
    out = {
        "docs": args.docs,
        "generate_s": gen_s,
        "buckets": len(lines),
        "unknown": report["buckets"][-1]["documents"],
        "json_in_process_s": in_process,
        "by_source_in_process_s": by_source,
        "json_command_s": command,
        "cli_import_s": import_s,
        **machine(),
    }
    if args.html:
        from browser import console_errors, headless_chromium, screenshot

        from indexer.report.html import render_html

        t = time.perf_counter()
        store, _ = open_latest(store_dir)
        with store:  # months read better on a page than 53 weeks
            monthly = build_report(store, cfg, by="month", time_field="posted_at")
        page = work / "report.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(render_html(monthly), encoding="utf-8")
        out["html_s"] = round(time.perf_counter() - t, 3)
        out["html_mb"] = round(page.stat().st_size / 2**20, 2)
        with headless_chromium(width=1100, height=2600) as driver:
            driver.get(page.resolve().as_uri())
            time.sleep(2)
            out["console_errors"] = console_errors(driver)
            screenshot(driver, args.html)
    print(json.dumps(out, indent=1))
    write_json(args.out, out)


if __name__ == "__main__":
    main()
