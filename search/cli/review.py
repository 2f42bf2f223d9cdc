"""`bertindex review export|import`: the documents a head is least sure about out to a file
for people to label, and their labels back into the store. Thin layer over `indexer.review`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import get_args

import click

from indexer.core.choices import ReviewStrategy
from search.cli.common import (
    build_config,
    config_options,
    handle_errors,
    json_option,
    print_json,
    where_callback,
)

STRATEGY_CHOICES = list(get_args(ReviewStrategy))  # indexer.core.choices


@click.group()
def review() -> None:
    """The review loop: export documents to label, import the labels, retrain with them."""


@review.command("export")
@click.option("--head", required=True, help="The head (its name under `bertindex annotate`).")
@click.option(
    "--strategy",
    type=click.Choice(STRATEGY_CHOICES),
    default="uncertain",
    show_default=True,
    help="uncertain: lowest top-class probability; margin: smallest gap between the "
    "top two; disagree: HEAD and --other give different labels; random.",
)
@click.option(
    "--n",
    "n",
    type=click.IntRange(1, 1_000_000),
    default=200,
    show_default=True,
    help="Documents to export.",
)
@click.option("--collection", help="Only this collection.")
@click.option(
    "--where",
    "where",
    multiple=True,
    metavar="FIELD=VALUE",
    callback=where_callback,
    help="Metadata filter (repeatable; all must match).",
)
@click.option("--other", metavar="HEAD", help="The second head of --strategy disagree.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --strategy random.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A .jsonl or .csv file (by suffix); default: JSONL on stdout.",
)
@config_options
@json_option
@handle_errors
def export_command(
    head, strategy, n, collection, where, other, seed, out, config_path, store_path, as_json
):
    """Write the documents to label next: id, collection, text, the head's label (`predicted`)
    and score, and an empty `label` to fill in. Documents already reviewed for HEAD are left
    out, and near-duplicates (when grouped) come once."""
    from indexer.review.run import export_reviews

    cfg = build_config(config_path, store_path)
    result = export_reviews(
        cfg,
        head,
        out,
        sys.stdout,
        strategy=strategy,
        n=n,
        collection=collection,
        where=where,
        other=other,
        seed=seed,
    )
    if as_json and out is not None:
        print_json(result)
    elif out is not None:
        click.echo(f"exported {result['exported']} documents ({strategy}) to {out}")
    else:
        click.echo(f"exported {result['exported']} documents ({strategy})", err=True)


@review.command("history")
@click.option("--head", required=True, help="The head whose review history to show.")
@config_options
@json_option
@handle_errors
def history_command(head, config_path, store_path, as_json):
    """Every label people stored for HEAD, oldest first: the document, the label, the reviewer,
    who (the name of the token a review page label came with; empty without tokens), when and
    from where (a file name, or `page`). Reads the live store: labels show at once."""
    from indexer.store import Store

    cfg = build_config(config_path, store_path)
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        rows = [r.to_dict() for r in store.reviews.history(head)]
    for r in rows:
        if as_json:
            print_json(r)
        else:
            click.echo(
                f"{r['review_id']}\t{r['collection']}\t{r['id']}\t{r['label']}\t"
                f"{r['reviewer']}\t{r['who'] or '-'}\t{r['reviewed_at']}\t{r['source']}"
            )
    if not rows:
        click.echo(f"no review labels for head '{head}'", err=True)


@review.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--head", required=True, help="The head the labels are for.")
@click.option("--collection", help="Collection of rows that name none.")
@click.option(
    "--reviewer",
    help="Who labelled rows that name nobody (default: $BERTINDEX_REVIEWER, else the login name).",
)
@config_options
@json_option
@handle_errors
def import_command(file, head, collection, reviewer, config_path, store_path, as_json):
    """Store the labels of a review file (JSONL or CSV, e.g. saved from a spreadsheet).

    Every row is checked; a refused row is reported with its line and reason and the rest are
    kept (exit code 0, as `index` treats rejected records). The last row of a duplicated id
    wins (reported). A person's earlier label is kept in
    the history, never overwritten by a model's; search with `--label HEAD=LABEL --human`.
    """
    from indexer.review.run import import_reviews

    cfg = build_config(config_path, store_path)
    summary = import_reviews(cfg, file, head, collection, reviewer).to_dict()
    if as_json:
        print_json(summary)
    else:
        click.echo(
            f"{summary['rows']} rows: {summary['stored']} labels stored "
            f"({summary['changed']} changed a person's earlier label), "
            f"{summary['unchanged']} unchanged, {summary['unlabelled']} without a label, "
            f"{summary['rejected']} rejected"
        )
    for r in summary["rejections"][:20]:
        click.echo(f"rejected {file}:{r['line']} ({r['id']}): {r['reason']}", err=True)
    if summary["rejected"] > 20:
        click.echo(
            f"... and {summary['rejected'] - 20} more rejected rows (all of them: --json)", err=True
        )
    for d in summary["duplicates"][:20]:
        click.echo(f"duplicate id {d['id']} on lines {d['lines']}: line {d['kept']} kept", err=True)
