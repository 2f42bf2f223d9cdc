"""The query engine: search a store (`searcher.Searcher`: dense, keyword or hybrid, fused),
rerank the top hits with a pair head, and the hit record the CLI, the server and the HTTP
client share."""
