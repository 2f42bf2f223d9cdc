"""`bertindex doctor`: check a store against its indexes and repair them from the store.
Thin layer over `indexer.ops.doctor`.
"""

from __future__ import annotations

import sys

import click

from search.cli.common import build_config, config_options, handle_errors, json_option, print_json


@click.command()
@click.option(
    "--repair",
    is_flag=True,
    help="Rebuild what is out of step from the store: the FAISS index from the "
    "stored vectors (a new index version; one only behind the store is updated by "
    "the difference), the keyword index from the stored texts. Nothing is encoded; "
    "the model is not needed.",
)
@config_options
@json_option
@handle_errors
def doctor(repair, config_path, store_path, as_json):
    """Check the store against its indexes: ids, counts, provenance, data version, snapshot,
    CURRENT pointer, keyword index.

    Exit code 1 when a problem was found and not repaired. Holds the store's writer lock, so
    it refuses to run while an index run writes.
    """
    from indexer.ops.doctor import run_doctor

    cfg = build_config(config_path, store_path)
    report = run_doctor(cfg, repair=repair)
    if as_json:
        print_json(report)
    else:
        _print_report(report)
    if report["remaining"]:
        sys.exit(1)


def _print_report(report: dict) -> None:
    from indexer.ops.doctor import Problem

    facts = report["facts"]
    index = facts.get("index") or {}
    click.echo(
        f"store {report['store']}: {facts.get('documents')} documents, "
        f"{facts.get('chunks')} chunks, {facts.get('vectors')} vectors; index "
        f"{index.get('version', 'none')} ({index.get('ntotal', 0)} vectors); keyword "
        f"index {facts.get('keyword_documents')} documents"
    )
    for p in report["problems"]:
        click.echo(f"problem [{p['check']}] {Problem(**p).line()}", err=True)
    done = report["repair"]
    if done is not None:
        if done["unreachable"]:
            click.echo(
                f"repaired: deleted {done['unreachable']['chunks']} unreachable chunk(s), "
                f"{done['unreachable']['vectors']} vector(s)"
            )
        if done["index"] and done["index"]["version"]:
            click.echo(
                f"repaired: index {done['index']['version']} rebuilt from "
                f"{done['index']['ntotal']} stored vectors ({done['index']['spec']}), "
                f"{done['encoded']} encoded"
            )
        keyword = done["keyword"] or {}
        if (
            keyword.get("rebuilt")
            or keyword.get("added")
            or keyword.get("updated")
            or keyword.get("removed")
        ):
            click.echo(
                f"repaired: keyword index {keyword['documents']} documents "
                f"({'rebuilt' if keyword['rebuilt'] else 'brought in step'})"
            )
        for error in done["errors"]:
            click.echo(f"error: repair stopped: {error}", err=True)
    for p in report["remaining"] if done is not None else []:
        click.echo(f"remaining [{p['check']}] {Problem(**p).line()}", err=True)
    if not report["remaining"]:
        click.echo("ok: the store and its indexes agree")
    elif done is None and any(p["repairable"] for p in report["remaining"]):
        click.echo("run `bertindex doctor --repair` to rebuild them from the store", err=True)
