"""Query API and command-line interface over the `indexer` library and the `flows`."""
