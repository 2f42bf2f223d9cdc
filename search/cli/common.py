"""Options, config loading, output and error handling shared by every `bertindex` command.

Exit codes: 0 success (no hits included), 1 runtime error, 2 usage error.
Data goes to stdout; logs and progress to stderr.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import typing
from collections.abc import Callable
from pathlib import Path

import click
from pydantic import BaseModel

from indexer.config import Config, LongDocumentsConfig, ModelConfig, load_config
from indexer.errors import BertindexError
from search.client import CA_CERT_ENV, TOKEN_ENV

log = logging.getLogger("bertindex")


def config_choices(model: type[BaseModel], field: str) -> list[str]:
    """The values a `Literal` field of a config model allows, in its order: a CLI choice
    derived from the config, so each enumeration is written once (in `indexer.config` or the
    module it takes the `Literal` from).

    Args:
        model: a config model, e.g. `ModelConfig`.
        field: one of its fields, e.g. `pooling`.
    Returns:
        The allowed strings (None, for an optional field, left out).
    Raises:
        TypeError: the field is not a `Literal` (or an optional one): nothing to choose from.
    """
    values: list[str] = []
    pending = [model.model_fields[field].annotation]
    while pending:
        kind = pending.pop(0)
        kind = getattr(kind, "__value__", kind)  # a `type X = Literal[...]` alias
        if typing.get_origin(kind) is typing.Literal:
            values.extend(v for v in typing.get_args(kind) if v not in values)
        else:
            pending.extend(typing.get_args(kind))  # a union: Literal[...] | None
    if not values:
        raise TypeError(
            f"{model.__name__}.{field} is not a Literal field; "
            "config_choices needs one (indexer/config/)"
        )
    return values


def config_default(model: type[BaseModel], field: str):
    """The default of a config model's field, for a CLI option that defaults to the config.

    Args:
        model: a config model, e.g. `SourceConfig`.
        field: one of its fields, e.g. `batch_size`.
    Returns:
        The field's default value.
    Raises:
        TypeError: the field is required (no default to show).
    """
    info = model.model_fields[field]
    if info.is_required():
        raise TypeError(f"{model.__name__}.{field} has no default (indexer/config/)")
    return info.get_default(call_default_factory=True)


def config_range(model: type[BaseModel], field: str) -> click.IntRange:
    """The bounds a config model's integer field declares (`ge`, `le`), as a Click range.

    Args:
        model: a config model, e.g. `ModelConfig`.
        field: one of its integer fields, e.g. `max_length`.
    Returns:
        A `click.IntRange` with the field's bounds (None where it declares none).
    """
    bounds = {}
    for rule in model.model_fields[field].metadata:
        for key in ("ge", "le"):
            if getattr(rule, key, None) is not None:
                bounds[key] = getattr(rule, key)
    return click.IntRange(bounds.get("ge"), bounds.get("le"))


def config_options(func: Callable) -> Callable:
    """--config PATH and --store DIR."""
    func = click.option(
        "--store",
        "store_path",
        type=click.Path(file_okay=False),
        help="Store directory (overrides store.path).",
    )(func)
    func = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        envvar="BERTINDEX_CONFIG",
        help="YAML config file (default: ./config.yaml when present, else built-in defaults).",
    )(func)
    return func


def _token_on_argv(ctx, param, value):
    if value is not None:  # argv shows in `ps` and shell history: refuse, name the ways that don't
        raise click.BadParameter(
            f"a token on the command line shows in `ps`: put it in "
            f"${TOKEN_ENV} or a file given with --token-file"
        )


def client_options(func: Callable) -> Callable:
    """What a command that asks a server (`--server URL`) is given: the token, from
    $BERTINDEX_TOKEN or `--token-file` (never argv: `--token` is refused), and `--ca-cert`
    for an https server with a private CA. The command receives `token` and `ca_cert`."""

    @functools.wraps(func)
    def wrapper(*args, token_file, token_argv, **kwargs):
        token = os.environ.get(TOKEN_ENV) or None
        if token_file is not None:
            token = Path(token_file).read_text(encoding="utf-8").strip() or None
        return func(*args, token=token, **kwargs)

    wrapper = click.option(
        "--token", "token_argv", hidden=True, expose_value=True, callback=_token_on_argv
    )(wrapper)
    wrapper = click.option(
        "--token-file",
        type=click.Path(exists=True, dir_okay=False),
        metavar="FILE",
        help=f"With --server: a file holding the access token (default: ${TOKEN_ENV}).",
    )(wrapper)
    return click.option(
        "--ca-cert",
        type=click.Path(exists=True, dir_okay=False),
        envvar=CA_CERT_ENV,
        metavar="FILE",
        help="With an https --server: verify its certificate against this CA "
        f"file (PEM) instead of the system's (default: ${CA_CERT_ENV}).",
    )(wrapper)


def encode_options(func: Callable) -> Callable:
    """--max-length N and --long-documents chunk|truncate, for commands that encode."""
    func = click.option(
        "--long-documents",
        type=click.Choice(config_choices(LongDocumentsConfig, "mode")),
        help="Texts longer than max length: overlapping windows (chunk) or cut (truncate).",
    )(func)
    max_length = config_range(ModelConfig, "max_length")
    func = click.option(
        "--max-length", type=max_length, help=f"Tokens per window (at most {max_length.max})."
    )(func)
    return func


def json_option(func: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")(func)


def build_config(
    config_path: str | None,
    store_path: str | None = None,
    max_length: int | None = None,
    long_documents: str | None = None,
) -> Config:
    """Load the config file and apply command-line overrides."""
    if config_path is None and Path("config.yaml").is_file():
        config_path = "config.yaml"
    cfg = load_config(config_path)
    return cfg.with_overrides(
        **{
            "store.path": store_path,
            "model.max_length": max_length,
            "long_documents.mode": long_documents,
        }
    )


def parsed_option(parse: Callable) -> Callable:
    """A Click callback running `parse` on an option's values; its InputError becomes a usage
    error (exit 2) naming the option."""

    def callback(ctx, param, values):
        try:
            return parse(values)
        except BertindexError as exc:
            raise click.BadParameter(str(exc)) from None

    return callback


def where_callback(ctx, param, values):
    """`--where FIELD=VALUE` values parsed into filters (indexer.query.filters.parse_where)."""
    from indexer.query.filters import parse_where

    return parsed_option(parse_where)(ctx, param, values)


def handle_errors(func: Callable) -> Callable:
    """Turn bertindex errors into a one-line message on stderr and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        setup_logging()
        try:
            return func(*args, **kwargs)
        except BertindexError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)

    return wrapper


def setup_logging() -> None:
    level = os.environ.get("BERTINDEX_LOG", "WARNING").upper()
    logging.basicConfig(
        level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    # transformers reads these when (if) it is imported: a search that encodes with the ONNX
    # export never imports it (importing it here cost most of a cold search's second)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()


def print_json(obj: object) -> None:
    click.echo(json.dumps(obj, ensure_ascii=False, default=str))


def show_progress() -> str:
    """The progress mode (`indexer.core.progress.progress_mode`): a bar when stderr is a terminal,
    plain lines a log can read when it is not; BERTINDEX_PROGRESS=0|1|lines overrides."""
    from indexer.core.progress import progress_mode

    return progress_mode(sys.stderr)
