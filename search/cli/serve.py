"""`bertindex serve`: a long-lived HTTP server (JSON API and search page) that keeps the
model and indexes loaded.

Thin layer over `search.workers` (processes) and `search.server` (the app); binds 127.0.0.1
unless told otherwise. A non-loopback `--host` on a store without tokens is refused (exit 2)
before anything loads, and on a store with tokens needs https (`--tls-cert/--tls-key`) or an
explicit `--insecure-http` (bearer tokens in clear text; warned). On a store with tokens
`serve` mints a session token (scope review, kept in memory, never stored) and gives the page's
address with it in the URL fragment to the terminal only: printed when stderr is a terminal,
else written to a file only its owner can read (SESSION_FILE in the store, removed when
`serve` stops), whose path is printed. Never through `logging` (journald, CI logs keep it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from pathlib import Path

import click

from search.body_limit import MAX_BODY_BYTES
from search.cli.common import build_config, config_options, handle_errors
from search.client import DEFAULT_PORT
from search.workers import DEFAULT_THREADS, MAX_AUTO_WORKERS, ServeSettings
from search.workers import serve as serve_processes

SESSION_FILE = "serve-session.url"  # in the store: the session address when stderr is no terminal


def _workers(ctx, param, value: str) -> int | str:
    if value == "auto":
        return value
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise click.BadParameter(f"{value!r}: give a number of processes (1 or more) or auto")


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; anything but loopback needs a store with tokens "
    "(`bertindex token create`) and --tls-cert/--tls-key (or --insecure-http).",
)
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="TCP port.",
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="Serve https with this certificate (PEM, the chain after it); needs --tls-key.",
)
@click.option(
    "--tls-key",
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="The private key (PEM) of --tls-cert.",
)
@click.option(
    "--insecure-http",
    is_flag=True,
    help="Allow plain http off loopback on a store with tokens: anyone on the path "
    "can read the tokens sent. Warned.",
)
@click.option(
    "--max-request-bytes",
    default=MAX_BODY_BYTES,
    show_default=True,
    type=click.IntRange(256),
    help="Larger request bodies are refused (413).",
)
@click.option(
    "--threads",
    default=DEFAULT_THREADS,
    show_default=True,
    type=click.IntRange(1),
    help="CPU threads one query may use (torch, FAISS, DuckDB); queries run side by side. "
    "An IVF scan also takes the cores idle when it starts (index.scan_threads).",
)
@click.option(
    "--workers",
    default="auto",
    show_default=True,
    callback=_workers,
    help="Server processes, each with its own copy of the model and indexes: a "
    f"number, or auto (one per core, at most {MAX_AUTO_WORKERS}, while the "
    "copies fit in half the available memory).",
)
@click.option(
    "--heads",
    "head_args",
    multiple=True,
    metavar="[NAME=]DIR",
    help="A head written by `bertindex train` to serve (repeatable): a classifier answers "
    "POST /predict, a NER tagger POST /annotate, as `bertindex annotate --heads` runs "
    "them. Named after its folder unless NAME= is given.",
)
@config_options
@handle_errors
def serve(
    host,
    port,
    tls_cert,
    tls_key,
    insecure_http,
    max_request_bytes,
    threads,
    workers,
    head_args,
    config_path,
    store_path,
):
    """Serve searches over HTTP(S) with the model kept loaded: a search page at /, and
    POST /search, POST /facets, GET /health; with --heads, POST /predict (classifiers) and
    POST /annotate (NER taggers).

    Open http://HOST:PORT/ in a browser, or query it with
    `bertindex search QUERY --server http://HOST:PORT` (https:// with --tls-cert).
    """
    from indexer.store import hash_token, new_token
    from search.access import current_tokens

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together: give both, or neither")
    tls = (tls_cert, tls_key) if tls_cert else None
    if config_path is None and Path("config.yaml").is_file():
        config_path = "config.yaml"  # as every command reads it, then fixed for the workers
    cfg = build_config(config_path, store_path)
    tokens = current_tokens(cfg.store.path)
    _check_bind(host, bool(tokens), tls is not None, insecure_http)
    session = new_token() if tokens else None
    store = Path(cfg.store.path).resolve()
    settings = ServeSettings(
        str(Path(config_path).resolve()) if config_path else None,
        str(store),
        threads,
        max_request_bytes,
        host,
        session and hash_token(session),
        undo_key=secrets.token_hex(32),
        heads=_heads(head_args),
    )
    scheme = "https" if tls else "http"
    # a wildcard bind is no address to open: the page address names one the Host check takes
    # (loopback here; from another machine, this machine's name or address, which it also takes)
    shown = "127.0.0.1" if host in WILDCARDS else host
    where = None
    if session is not None and not sys.stderr.isatty():
        where = _write_private(store / SESSION_FILE, f"{scheme}://{shown}:{port}/#token={session}")

    def announce(line: str) -> None:
        click.echo(line, err=True)
        if where is not None:
            click.echo(
                f"tokens required; this session's page address (its token, scope "
                f"review) is in {where}, readable by you only until serve stops",
                err=True,
            )
        elif session is not None:  # as notebook servers do: the pages keep it for the tab
            click.echo(
                f"tokens required; open {scheme}://{shown}:{port}/#token={session} (this "
                "session's token, scope review; or paste one from `bertindex token "
                "create`)",
                err=True,
            )

    try:
        serve_processes(settings, host, port, workers, announce, tls)
    finally:
        if where is not None:
            where.unlink(missing_ok=True)


WILDCARDS = ("0.0.0.0", "::", "[::]")


def _heads(args: tuple[str, ...]) -> tuple[str, ...]:
    """`--heads` as `NAME=DIR` with absolute paths, for every server process; a DIR that is
    no directory is refused (exit 2) naming the head. What is in it is checked when the heads
    load, before listening."""
    if not args:
        return ()
    from indexer.annotate.annotator import parse_head_arg

    out = []
    for arg in args:
        name, path = parse_head_arg(arg)
        if not path.is_dir():
            raise click.BadParameter(
                f"head '{name}': {path} is no directory; give NAME=DIR with a head folder "
                "written by `bertindex train` (its --out)",
                param_hint="--heads",
            )
        out.append(f"{name}={path.resolve()}")
    return tuple(out)


def _check_bind(host: str, tokens: bool, tls: bool, insecure_http: bool) -> None:
    """Refuse (exit 2, one line) an open bind nobody should make: off loopback, a store without
    tokens (anyone could read it and write labels), or tokens over plain http without
    --insecure-http (they would cross the network in clear text); warn when it is asked for."""
    from search.access import is_loopback

    if is_loopback(host.strip("[]")):
        return
    if not tokens:
        click.echo(
            f"error: --host {host} would let anyone who can reach it read this store and "
            "write its review labels: create a token first (`bertindex token create "
            "--scope read --name NAME`), or bind 127.0.0.1",
            err=True,
        )
        sys.exit(2)
    if tls:
        return
    if not insecure_http:
        click.echo(
            f"error: --host {host} over plain http sends every token in clear text: give "
            "--tls-cert FILE --tls-key FILE, or --insecure-http to accept that",
            err=True,
        )
        sys.exit(2)
    click.echo(
        f"warning: serving tokens over plain http on {host} (--insecure-http): anyone on "
        "the network path can read them",
        err=True,
    )


def _write_private(path: Path, text: str) -> Path:
    """Write `text` to `path`, readable and writable by this user only (0600, also when the
    file was left by an earlier run); returns the path."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a file left behind may have other modes or owners: start anew
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text + "\n")
    return path
