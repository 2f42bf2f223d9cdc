"""The `bertindex` command line: one module per command group."""
