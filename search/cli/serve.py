"""`bertindex serve`: a long-lived HTTP server (JSON API and search page) that keeps the
model and indexes loaded.

Thin layer over `search.server`; binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import click

from search.cli.common import build_config, config_options, handle_errors


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but localhost exposes the store to the network.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(1, 65535),
              help="TCP port.")
@click.option("--max-request-bytes", default=16_384, show_default=True,
              type=click.IntRange(256), help="Larger request bodies are refused (413).")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(1),
              help="CPU threads one query may use (torch, FAISS, DuckDB); queries run side by side.")
@config_options
@handle_errors
def serve(host, port, max_request_bytes, threads, config_path, store_path):
    """Serve searches over HTTP with the model kept loaded: a search page at /, and
    POST /search, POST /facets, GET /health.

    Open http://HOST:PORT/ in a browser, or query it with
    `bertindex search QUERY --server http://HOST:PORT`.
    """
    import faiss
    import torch
    import uvicorn

    from indexer.store import Store
    from search.query import Searcher
    from search.server import create_app

    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(f"warning: binding {host}: anyone who can reach it can query this store",
                   err=True)
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    cfg = build_config(config_path, store_path)
    with Store(cfg.store.path, read_only=True) as store:
        store.set_threads(threads)
        app = create_app(Searcher(cfg, store), max_request_bytes, threads)
        click.echo(f"serving {cfg.store.path} on http://{host}:{port}", err=True)
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
