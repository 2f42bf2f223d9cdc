"""Ingest: read corpus files (a registry of formats) and cut long texts into windows. The indexing
loop over them is `indexer.indexing`."""
