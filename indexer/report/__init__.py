"""The trends report over what a store already holds (labels, entities, near-duplicate groups):
`trends` computes it as plain data (one object per bucket), `html` draws it as one
self-contained page. Nothing is encoded."""
