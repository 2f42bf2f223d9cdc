"""Bulk annotation: run trained heads over the store, files or an inbox."""
