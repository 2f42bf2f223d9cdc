"""BM25 engines on a BEIR set: nDCG@10 against the BEIR paper's BM25 and per-query latency.

Runs each engine that is importable: tantivy (the one bertindex uses), bm25s (+ PyStemmer),
DuckDB full-text search (the `duckdb-ext-fts` wheel, built for duckdb 1.4.4 only; extensions
are never downloaded). The others are measurement-only: `pip install bm25s PyStemmer
duckdb-ext-fts` in a scratch venv.

    .venv/bin/python benchmarks/keyword_engines.py ../shared/data/scifact
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from indexer.evaluation.beir import load_beir_queries
from indexer.evaluation.metrics import retrieval_scores
from indexer.index.keyword import query_terms


def tantivy_runs(docs, fields):
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_integer_field("pos", stored=False, indexed=True, fast=True)
    sb.add_text_field("title", stored=False, tokenizer_name="en_stem")
    sb.add_text_field("body", stored=False, tokenizer_name="en_stem")
    ix = tantivy.Index(sb.build())
    t = time.perf_counter()
    w = ix.writer(heap_size=100_000_000, num_threads=1)
    for i, d in enumerate(docs):
        if fields == "multi":
            w.add_document(tantivy.Document(pos=i, title=d.get("title") or "", body=d["text"]))
        else:
            w.add_document(tantivy.Document(pos=i, body=(d.get("title") or "") + " " + d["text"]))
    w.commit()
    ix.reload()
    build = time.perf_counter() - t
    searcher = ix.searcher()
    names = ["title", "body"] if fields == "multi" else ["body"]

    def search(text):
        hits = searcher.search(ix.parse_query(query_terms(text), names), 100).hits
        return searcher.fast_field_values("pos", [a for _, a in hits])

    return build, search


def bm25s_runs(docs, k1=1.2, b=0.75):
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    t = time.perf_counter()
    tokens = bm25s.tokenize(
        [(d.get("title") or "") + " " + d["text"] for d in docs],
        stopwords="en",
        stemmer=stemmer,
        show_progress=False,
    )
    retriever = bm25s.BM25(k1=k1, b=b)
    retriever.index(tokens, show_progress=False)
    build = time.perf_counter() - t

    def search(text):
        q = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False)
        return retriever.retrieve(q, k=100, show_progress=False, n_threads=1)[0][0]

    return build, search


def duckdb_runs(docs):
    import duckdb
    import duckdb_ext

    ext = next(Path(duckdb_ext.__path__[0]).rglob("fts.duckdb_extension"), None)
    if ext is None:
        raise ImportError("duckdb-ext-fts is not installed")
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{ext}'")
    con.execute("CREATE TABLE d (pos INTEGER, body VARCHAR)")
    con.executemany(
        "INSERT INTO d VALUES (?, ?)",
        [(i, (d.get("title") or "") + " " + d["text"]) for i, d in enumerate(docs)],
    )
    t = time.perf_counter()
    con.execute(
        "PRAGMA create_fts_index('d', 'pos', 'body', stemmer='english', stopwords='english')"
    )
    build = time.perf_counter() - t

    def search(text):
        return [
            r[0]
            for r in con.execute(
                "SELECT pos, fts_main_d.match_bm25(pos, ?) s FROM d WHERE s IS NOT NULL "
                "ORDER BY s DESC LIMIT 100",
                [text],
            ).fetchall()
        ]

    return build, search


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT.parent / "shared/data/scifact")
    with gzip.open(folder / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        docs = [json.loads(line) for line in fh]
    ids = [str(d["_id"]) for d in docs]
    queries, qrels = load_beir_queries(folder, "test")
    engines = {
        "tantivy en_stem, title+text fields (bertindex)": lambda: tantivy_runs(docs, "multi"),
        "tantivy en_stem, one field": lambda: tantivy_runs(docs, "flat"),
        "bm25s k1=1.2 b=0.75 stem+stopwords": lambda: bm25s_runs(docs),
        "bm25s k1=1.5 b=0.75 stem+stopwords": lambda: bm25s_runs(docs, k1=1.5),
        "duckdb fts porter+stopwords": lambda: duckdb_runs(docs),
    }
    for name, make in engines.items():
        try:
            build, search = make()
        except ImportError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        run, times = {}, []
        for qid, text in queries.items():
            t = time.perf_counter()
            found = search(text)
            times.append(time.perf_counter() - t)
            run[qid] = [ids[int(p)] for p in found]
        scores = retrieval_scores(run, {q: qrels[q] for q in queries})
        print(
            f"{name}: nDCG@10 {scores['ndcg@10']:.4f} recall@100 {scores['recall@100']:.4f} "
            f"build {build:.2f}s query p50 {1000 * np.median(times):.2f} ms"
        )


if __name__ == "__main__":
    main()
