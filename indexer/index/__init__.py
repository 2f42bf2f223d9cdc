"""Index: FAISS vector indexes (one spec parser, auto tuning), the keyword index, fusion and versions."""
