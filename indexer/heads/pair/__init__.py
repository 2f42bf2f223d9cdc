"""The sentence-pair head type (`head_type`, a cross-encoder), its bi-encoder baseline and
blend (`baseline`, `blend`, `bi_encoder`), the config keys it keeps (`keys`, read without
numeric libraries) and the scorer search reranking loads (`scorer`)."""
