"""Records two packages share, below both: what produced a vector (provenance), labels and
annotations, index versions and specs, the sentence-transformers layout."""
