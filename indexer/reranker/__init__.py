"""Train a reranker (a pair head) from a BEIR-layout set: mine its pairs from the store's own
hits, train it, and tune its share of the search order on held-out queries."""
