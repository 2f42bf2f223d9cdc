"""`bertindex annotate`: run trained heads over the store, over files (`--out`), or over an
inbox folder; plus the `--label` / `--entity` parsing that `search` uses. Thin layer over
`flows.annotate`.
"""

from __future__ import annotations

import sys

import click

from indexer.query.filters import parse_entities, parse_labels
from search.cli.common import (
    build_config,
    config_options,
    handle_errors,
    json_option,
    parsed_option,
    print_json,
    show_progress,
)

label_callback = parsed_option(parse_labels)
entity_callback = parsed_option(parse_entities)


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True))
@click.option(
    "--heads",
    "head_args",
    multiple=True,
    required=True,
    metavar="[NAME=]DIR",
    help="A head directory written by `bertindex train` (repeatable); named after "
    "its folder unless NAME= is given.",
)
@click.option(
    "--collection",
    help="Store and inbox modes: the collection (store: default all; inbox: default 'default').",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="With PATHS: write each record with its labels and entities to this "
    ".jsonl or .parquet file, in input order; the store is not touched.",
)
@click.option(
    "--inbox",
    type=click.Path(file_okay=False),
    help="Index and annotate each new JSONL/CSV/Parquet file in this folder once.",
)
@config_options
@json_option
@handle_errors
def annotate(paths, head_args, collection, out, inbox, config_path, store_path, as_json):
    """Label documents with trained heads (classifiers, NER) in bulk.

    Without PATHS: every stored document that misses a head at its current version (a second
    run does nothing; a retrained head re-annotates). Labels feed `search --label/--entity`.
    """
    if paths and inbox:
        raise click.UsageError("give PATHS or --inbox, not both")
    if paths and not out:
        raise click.UsageError("PATHS need --out FILE.jsonl|parquet (no PATHS: the store)")
    if out and not paths:
        raise click.UsageError("--out needs input PATHS")
    from flows.runtime import wait_for_api, warm_up_api

    cfg = build_config(config_path, store_path)
    warm_up_api()
    wait_for_api()
    from flows.annotate import annotate_flow

    summary = annotate_flow(
        list(head_args), cfg, collection, list(paths) or None, out, inbox, show_progress()
    )
    if as_json:
        print_json(summary)
    else:
        heads = ", ".join(f"{k}@{v}" for k, v in summary["heads"].items())
        click.echo(
            f"annotated {summary.get('annotated', 0)} documents with {heads} "
            f"({summary.get('docs_per_second')} docs/s, {summary['dtype']})"
        )
        if "files" in summary:
            for f in summary["files"]:
                click.echo(f"{f['status']:>8}  {f['path']}")
            if summary.get("separate_pass_reason"):
                click.echo(
                    f"index and heads ran separate passes: {summary['separate_pass_reason']}",
                    err=True,
                )
    for r in summary.get("rejections", [])[:10]:
        click.echo(f"rejected {r['source']}:{r['row']} ({r['id']}): {r['reason']}", err=True)
    sys.stdout.flush()
