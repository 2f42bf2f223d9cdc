"""Near-duplicate waves: documents whose stored vectors are within a cosine threshold of each
other (and whose normalised words overlap enough) grouped by single linkage, from the stored
vectors only (nothing is re-encoded). `text` normalises and compares texts, `neighbours` finds
candidate pairs with FAISS, `groups` joins them and keeps the store's groups current."""
