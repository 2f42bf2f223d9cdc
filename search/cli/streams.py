"""`bertindex report` (label, entity and wave trends as JSON or one offline HTML page) and
`bertindex dedup` (near-duplicate waves from the stored vectors). Thin layer over
`indexer.report` and `indexer.dedup`."""

from __future__ import annotations

from pathlib import Path

import click

from indexer.config.flows import SourceConfig
from search.cli.common import (
    build_config,
    config_default,
    config_options,
    handle_errors,
    json_option,
    print_json,
)


@click.command()
@click.option("--collection", help="One collection (default: all).")
@click.option(
    "--heads",
    "heads",
    multiple=True,
    metavar="HEAD",
    help="Only these heads' labels (repeatable; default: every head).",
)
@click.option(
    "--by",
    default="week",
    show_default=True,
    metavar="day|week|month|FIELD",
    help="Bucket by the time field's day, week or month, or by a metadata field's "
    "values (e.g. source, language).",
)
@click.option(
    "--time-field",
    metavar="FIELD",
    help="Metadata field holding each document's time, ISO 8601 or epoch seconds/ms "
    "(default: fields.time).",
)
@click.option("--since", metavar="DATE", help="Time buckets only: documents from DATE on.")
@click.option("--until", metavar="DATE", help="Time buckets only: documents before DATE.")
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False),
    help="Also write the report as one self-contained HTML page with plots.",
)
@config_options
@json_option
@handle_errors
def report(
    collection, heads, by, time_field, since, until, html_file, config_path, store_path, as_json
):
    """Trends over what the store holds: per bucket the documents, each head's label counts,
    shares and mean score, top entities with their change, rising entities and the largest
    near-duplicate waves. Documents without a readable time go to the `unknown` bucket.

    --json prints one object per bucket. Nothing is encoded.
    """
    from indexer.ops.status import open_latest
    from indexer.report.trends import build_report

    cfg = build_config(config_path, store_path)
    store, _ = open_latest(Path(cfg.store.path))
    with store:
        data = build_report(
            store, cfg, collection, list(heads) or None, by, time_field, since, until
        )
    if html_file:
        from indexer.report.html import render_html

        Path(html_file).write_text(render_html(data), encoding="utf-8")
        click.echo(f"wrote {html_file}", err=True)
    if as_json:
        for b in data["buckets"]:
            print_json(b)
        return
    click.echo(f"{data['documents']} documents by {by}")
    for b in data["buckets"]:
        heads_text = "; ".join(
            f"{h}: " + ", ".join(f"{lab} {v['share']:.0%}" for lab, v in info["labels"].items())
            for h, info in b["heads"].items()
        )
        click.echo(f"{b['bucket']:<12} {b['documents']:>8}  {heads_text}")
        if b["rising"]:
            click.echo(
                f"{'':<12} rising: "
                + ", ".join(
                    f"{r['text']} ({r['type']}, {r['share_change']:+.1%})" for r in b["rising"][:5]
                )
            )
        for w in b["waves"]:
            text = " ".join((w["representative"] or "").split())[:70]
            click.echo(f"{'':<12} wave x{w['in_bucket']} (group {w['size']}): {text}")


@click.command()
@click.option(
    "--collection",
    default=config_default(SourceConfig, "collection"),
    show_default=True,
    help="Collection to group.",
)
@click.option(
    "--threshold",
    type=float,
    help="Cosine of two stored vectors at and above which they may be copies, in "
    "(0, 1] (default: dedup.threshold).",
)
@click.option("--min-size", type=int, help="Smallest group listed (default: dedup.min_size).")
@click.option(
    "--min-jaccard",
    type=float,
    help="Word overlap also needed, 0 = off (default: dedup.min_jaccard).",
)
@click.option("--rebuild", is_flag=True, help="Regroup the whole collection.")
@click.option(
    "--limit", default=20, show_default=True, type=click.IntRange(1), help="Groups listed."
)
@config_options
@json_option
@handle_errors
def dedup(
    collection, threshold, min_size, min_jaccard, rebuild, limit, config_path, store_path, as_json
):
    """Group near-identical documents (copy-paste and bot waves) from the stored vectors.

    The groups are stored (a group id per document); the next run places only the documents
    added or changed since. Lists the largest groups: size, first and last time seen, a
    representative text, member ids and their labels. --json: one line with the run summary,
    then one object per group.
    """
    from indexer.dedup.groups import run_dedup
    from indexer.store import Store

    cfg = build_config(config_path, store_path)
    summary = run_dedup(cfg, collection, threshold, min_size, min_jaccard, rebuild=rebuild)
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        groups = store.dedup.groups(
            collection, min_size=summary["min_size"], limit=limit, time_field=cfg.fields.time
        )
    if as_json:
        print_json({"summary": summary})
        for g in groups:
            print_json(g)
        return
    click.echo(
        f"{summary['mode']} ({summary['reason']}): {summary['searched']} vectors "
        f"searched, {summary['pairs']} pairs; {summary['groups']} groups of "
        f"{summary['min_size']}+ holding {summary['grouped_documents']} of "
        f"{summary['documents']} documents"
    )
    for g in groups:
        text = " ".join((g["representative"] or "").split())[:80]
        click.echo(
            f"group {g['group_id']:>8}  x{g['size']:<5} {g['first_seen']} .. "
            f"{g['last_seen']}  {text}"
        )
