"""Index: the FAISS vector index (`vector`: one spec parser, build, add, remove, search; `auto`
picks and tunes a spec for the store's size; `shards` builds an IVF index in parts and merges
them), the BM25 keyword index (`keyword`), rank fusion (`fusion`) and best-chunk ranking
(`best_chunk`). Where published versions live is `indexer.records.versions`; the store's vectors are
the truth, every index here is a cache rebuilt from them."""
