"""Ingest: read corpus files (a registry of formats), cut long texts into windows, and run the indexing loop."""
