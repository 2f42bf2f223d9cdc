"""Store: the DuckDB file and the only code that speaks SQL."""
