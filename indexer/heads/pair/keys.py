"""The keys a pair head keeps in its config.json beside the transformers fields: its blend with
a bi-encoder (written by `heads.pair.head_type`, read by `heads.pair.blend`) and a reranker's share
of the order (written by `reranker.weight.tune_rerank_weight`, read by `query.rerank`).

Names only, no imports: the CLI reads them on the thin client's path (`search --server`), which
loads no numeric library.
"""

BLEND_KEY = "bertindex_cosine_blend"  # config.json: {"weight": w, "encoder": path or name}
# config.json of a reranker (`train rerank`): its share of the order against the first stage,
# mixed by `indexer.query.rerank`; absent: the head alone
RERANK_WEIGHT_KEY = "bertindex_rerank_weight"
