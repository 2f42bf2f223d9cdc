"""`bertindex serve`: a long-lived HTTP server (JSON API and search page) that keeps the
model and indexes loaded.

Thin layer over `search.workers` (processes) and `search.server` (the app); binds 127.0.0.1
unless told otherwise. A non-loopback `--host` on a store without tokens is refused (exit 2)
before anything loads; on a store with tokens `serve` mints a session token (scope review,
kept in memory, never stored) and prints the page's address with it in the URL fragment.
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import click

from search.body_limit import MAX_BODY_BYTES
from search.cli.common import build_config, config_options, handle_errors
from search.client import DEFAULT_PORT
from search.workers import DEFAULT_THREADS, MAX_AUTO_WORKERS, ServeSettings
from search.workers import serve as serve_processes


def _workers(ctx, param, value: str) -> int | str:
    if value == "auto":
        return value
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise click.BadParameter(f"{value!r}: give a number of processes (1 or more) or auto")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback needs a store with tokens "
                   "(`bertindex token create`).")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535),
              help="TCP port.")
@click.option("--max-request-bytes", default=MAX_BODY_BYTES, show_default=True,
              type=click.IntRange(256), help="Larger request bodies are refused (413).")
@click.option("--threads", default=DEFAULT_THREADS, show_default=True, type=click.IntRange(1),
              help="CPU threads one query may use (torch, FAISS, DuckDB); queries run side by "
                   "side.")
@click.option("--workers", default="auto", show_default=True, callback=_workers,
              help="Server processes, each with its own copy of the model and indexes: a "
                   f"number, or auto (one per core, at most {MAX_AUTO_WORKERS}, while the "
                   "copies fit in half the available memory).")
@config_options
@handle_errors
def serve(host, port, max_request_bytes, threads, workers, config_path, store_path):
    """Serve searches over HTTP with the model kept loaded: a search page at /, and
    POST /search, POST /facets, GET /health.

    Open http://HOST:PORT/ in a browser, or query it with
    `bertindex search QUERY --server http://HOST:PORT`.
    """
    from indexer.store import hash_token, new_token
    from search.access import current_tokens, is_loopback

    if config_path is None and Path("config.yaml").is_file():
        config_path = "config.yaml"  # as every command reads it, then fixed for the workers
    cfg = build_config(config_path, store_path)
    tokens = current_tokens(cfg.store.path)
    if not tokens and not is_loopback(host.strip("[]")):
        click.echo(f"error: --host {host} would let anyone who can reach it read this store and "
                   "write its review labels: create a token first (`bertindex token create "
                   "--scope read --name NAME`), or bind 127.0.0.1", err=True)
        sys.exit(2)
    session = new_token() if tokens else None
    settings = ServeSettings(str(Path(config_path).resolve()) if config_path else None,
                             str(Path(cfg.store.path).resolve()), threads, max_request_bytes,
                             host, session and hash_token(session),
                             undo_key=secrets.token_hex(32))

    def announce(line: str) -> None:
        click.echo(line, err=True)
        if session is not None:  # as notebook servers do: the pages keep it for the tab
            click.echo(f"tokens required; open http://{host}:{port}/#token={session} (this "
                       "session's token, scope review; or paste one from `bertindex token "
                       "create`)", err=True)

    serve_processes(settings, host, port, workers, announce)
