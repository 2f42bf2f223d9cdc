"""`bertindex token create|list|revoke`: the access tokens `bertindex serve` accepts, kept in
the store as SHA-256 hashes (`indexer.store.tokens`). Thin layer over the store; does not
check requests (`search.access`).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import get_args

import click

from indexer.core.choices import TokenScope
from search.cli.common import build_config, config_options, handle_errors, json_option, print_json

SCOPE_CHOICES = list(get_args(TokenScope))  # indexer.core.choices
DURATION = re.compile(r"(\d+)([hdw])")  # --expires 12h, 30d, 2w
DURATION_UNITS = {"h": "hours", "d": "days", "w": "weeks"}


def _expires(ctx, param, value: str | None) -> datetime | None:
    """`--expires`: a duration from now (`30d`, `12h`, `2w`) or an ISO 8601 date or time (a
    date alone: its start, 00:00 UTC; no offset: UTC), as naive UTC."""
    from indexer.core.timeutil import parse_utc, utc_now

    if value is None:
        return None
    match = DURATION.fullmatch(value.strip())
    if match:
        return utc_now() + timedelta(**{DURATION_UNITS[match[2]]: int(match[1])})
    try:
        return parse_utc(value.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: give a duration (12h, 30d, 2w) or an ISO date "
            "(2027-01-31, 2027-01-31T18:00Z)"
        ) from None


@click.group("token")
def token() -> None:
    """Access tokens for `bertindex serve`: once a store has one, every request needs one."""


@token.command("create")
@click.option(
    "--name",
    required=True,
    help="Who or what holds it (letters, digits, _ . @ -); review labels record it.",
)
@click.option(
    "--scope",
    type=click.Choice(SCOPE_CHOICES),
    default="read",
    show_default=True,
    help="read: search, facets, embeddings, review queues; review: also store review "
    "labels; metrics: GET /metrics only; admin: everything.",
)
@click.option(
    "--expires",
    callback=_expires,
    metavar="WHEN",
    help="Refused after this: a duration from now (12h, 30d, 2w) or an ISO date or "
    "time in UTC (2027-01-31: its start). Default: never.",
)
@config_options
@json_option
@handle_errors
def create_command(name, scope, expires, config_path, store_path, as_json):
    """Create a token and print it once on stdout; only its hash is stored. Send it as
    `Authorization: Bearer TOKEN`, to `bertindex search --server URL` in $BERTINDEX_TOKEN or
    a file (--token-file), or open https://HOST:PORT/#token=TOKEN."""
    from indexer.store import Store

    cfg = build_config(config_path, store_path)
    with Store(cfg.store.path) as store:
        secret = store.tokens.create(name, scope, expires)
    if as_json:
        print_json(
            {
                "name": name,
                "scope": scope,
                "token": secret,
                "expires": expires and expires.isoformat(timespec="seconds") + "Z",
            }
        )
    else:
        click.echo(secret)
        click.echo(
            f"token {name!r} ({scope}) created: it is shown only now; running servers "
            "accept it within a second",
            err=True,
        )


@token.command("list")
@config_options
@json_option
@handle_errors
def list_command(config_path, store_path, as_json):
    """Name, scope, creation, last use and expiry of each token (never the token or its
    hash)."""
    from indexer.store import Store

    cfg = build_config(config_path, store_path)
    with Store(cfg.store.path) as store:
        rows = [t.to_dict() for t in store.tokens.stored()]
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo(
            "no tokens: `bertindex serve` on loopback needs none "
            "(create one with `bertindex token create --name NAME`)",
            err=True,
        )
    for r in rows:
        click.echo(
            f"{r['name']}\t{r['scope']}\tcreated {r['created']}\t"
            f"last used {r['last_used'] or 'never'}\texpires {r['expires'] or 'never'}"
        )


@token.command("revoke")
@click.argument("name")
@config_options
@handle_errors
def revoke_command(name, config_path, store_path):
    """Delete the token NAME; running servers refuse it within a second (while another
    process writes the store, once it has finished)."""
    from indexer.store import Store

    cfg = build_config(config_path, store_path)
    with Store(cfg.store.path) as store:
        store.tokens.revoke(name)
    click.echo(f"token {name!r} revoked", err=True)
