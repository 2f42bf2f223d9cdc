"""`bertindex delete`, `status`, `reindex` and `flows serve|list`: running the flows in
production. Thin layer over `flows` and `indexer`.
"""

from __future__ import annotations

import sys

import click

from indexer.config import ModelConfig
from indexer.config.flows import SourceConfig
from search.cli.common import (
    build_config,
    config_choices,
    config_default,
    config_options,
    handle_errors,
    json_option,
    print_json,
)


@click.command()
@click.option(
    "--id",
    "ids",
    multiple=True,
    required=True,
    metavar="ID",
    help="Document id to delete (repeatable).",
)
@click.option(
    "--collection",
    default=config_default(SourceConfig, "collection"),
    show_default=True,
    help="Collection the ids belong to.",
)
@config_options
@json_option
@handle_errors
def delete(ids, collection, config_path, store_path, as_json):
    """Delete documents from the store and the indexes (a new index version without them).

    Unknown ids are reported, not an error.
    """
    from indexer.indexing.run import run_delete

    cfg = build_config(config_path, store_path)
    summary = run_delete(cfg, collection, list(ids))
    if as_json:
        print_json(summary)
        return
    click.echo(
        f"deleted {len(summary['deleted'])} document(s), {summary['chunks_removed']} "
        f"chunk(s) from {collection}"
    )
    if summary["not_found"]:
        click.echo(f"not found in {collection}: {', '.join(summary['not_found'])}", err=True)


@click.command()
@config_options
@json_option
@handle_errors
def status(config_path, store_path, as_json):
    """Documents, chunks and vectors per collection, index version, annotations, last runs."""
    from indexer.ops.status import store_status

    cfg = build_config(config_path, store_path)
    info = store_status(cfg)
    if as_json:
        print_json(info)
        return
    click.echo(
        f"store {info['store']}"
        + (
            "  (a writer is running; figures as of the last published version)"
            if info["writer_active"]
            else ""
        )
    )
    index = info["index"]
    if index:
        prov = index["provenance"]
        click.echo(
            f"index {index['version']}: {index['ntotal']} vectors, {index['spec']}, "
            f"{prov.get('model_name')} ({prov.get('pooling')}, dim {prov.get('dim')}, "
            f"max_length {prov.get('max_length')})"
        )
    else:
        click.echo("index: none yet")
    click.echo(f"{'collection':<20} {'documents':>10} {'chunks':>10} {'vectors':>10}")
    for c in info["collections"]:
        click.echo(
            f"{c['collection']:<20} {c['documents']:>10} {c['chunks']:>10} {c['vectors']:>10}"
        )
    heads = info["annotations"]
    click.echo("annotations: " + (", ".join(f"{h} {n}" for h, n in heads.items()) or "none"))
    for run in info["runs"]:
        click.echo(f"run {run['run_id']} {run['kind']:<8} {run['started_at']}  {run['status']}")
    enc = info["encoder"]
    click.echo(
        f"encoder here: {enc['dtype']}"
        + (f" ({enc['variant']})" if enc["variant"] else "")
        + f" on {enc['device']}, {enc['cpu_model']} [{enc['isa_class']}]: {enc['reason']}"
    )
    for kind, run in info["last"].items():
        when = f"{run['finished_at'] or run['started_at']} ({run['status']})" if run else "never"
        click.echo(f"last {kind:<8} {when}")


@click.command()
@click.option("--model", "model_name", help="Encoder for the new vectors (overrides model.name).")
@click.option(
    "--pooling",
    type=click.Choice(config_choices(ModelConfig, "pooling")),
    help="Pooling for the new vectors (overrides model.pooling).",
)
@click.option(
    "--batch-size",
    default=2048,
    show_default=True,
    type=click.IntRange(1),
    help="Documents re-encoded and committed per batch.",
)
@config_options
@json_option
@handle_errors
def reindex(model_name, pooling, batch_size, config_path, store_path, as_json):
    """Rebuild the index; with another encoder, re-encode every document into a new store
    generation beside the old one and switch atomically (searches use the old one until then).

    Same encoder: the FAISS index is rebuilt from the stored vectors (compaction, retraining);
    a store that keeps its vectors as rows of store.duckdb (indexed before vector files) is
    first copied into a new generation, nothing encoded, its vectors then kept once, in files.
    """
    from flows.reindex import run_reindex

    cfg = build_config(config_path, store_path)
    cfg = cfg.with_overrides(**{"model.name": model_name, "model.pooling": pooling})
    summary = run_reindex(cfg, batch_size=batch_size)
    if as_json:
        print_json(summary)
    else:
        click.echo(
            f"{summary['mode']}: {summary['documents']} documents, "
            f"{summary['encoded']} encoded; index {summary['index']['version']} "
            f"({summary['index']['ntotal']} vectors)"
        )


@click.group("flows")
def flows_group() -> None:
    """Scheduled flows: serve the deployments from config.yaml `schedules:`, or list them."""


@flows_group.command("list")
@click.option(
    "-n",
    "count",
    default=3,
    show_default=True,
    type=click.IntRange(1, 100),
    help="Next run times to show per deployment.",
)
@config_options
@json_option
@handle_errors
def flows_list(count, config_path, store_path, as_json):
    """The deployments `flows serve` would register, their schedules and next runs."""
    from flows.schedules import plan_deployments

    cfg = build_config(config_path, store_path)
    plans = plan_deployments(cfg, config_path=_config_file(config_path), next_runs=count)
    if as_json:
        for p in plans:
            print_json(p.to_dict())
        return
    if not plans:
        click.echo("no schedules in the config (add a `schedules:` section)", err=True)
    for p in plans:
        state = "skipped: " + p.skipped if p.skipped else ("active" if p.active else "paused")
        click.echo(f"{p.name:<22} {p.flow:<14} {p.trigger:<20} {state}")
        for when in p.next_runs:
            click.echo(f"{'':<22} next {when.isoformat()}")


@flows_group.command("serve")
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Flow runs executing at once (one writer per store: keep 1).",
)
@config_options
@handle_errors
def flows_serve(limit, config_path, store_path):
    """Register the configured schedules as deployments and run them as they come due.

    Runs until interrupted. Uses PREFECT_API_URL when set (a `prefect server start`), else
    starts a local Prefect API with its scheduler for as long as this command runs (its state
    in <store>/flows/prefect.db).
    """
    from pathlib import Path

    from flows.runtime import wait_for_api, warm_up_api

    cfg = build_config(config_path, store_path)
    # the scheduler service creates the runs that come due; its state lives beside the store
    warm_up_api(services=True, database=str(Path(cfg.store.path) / "flows" / "prefect.db"))
    wait_for_api()
    from flows.schedules import build_deployments, serve_deployments

    deployments, skipped = build_deployments(cfg, config_path=_config_file(config_path))
    for name, reason in skipped:
        click.echo(f"schedule {name} skipped: {reason}", err=True)
    if not deployments:
        click.echo("error: nothing to serve; add a `schedules:` section to the config", err=True)
        sys.exit(1)
    serve_deployments(deployments, limit=limit)


def _config_file(config_path: str | None) -> str | None:
    """The config file scheduled runs re-read (absolute: runs start in other directories)."""
    from pathlib import Path

    if config_path is None and Path("config.yaml").is_file():
        config_path = "config.yaml"
    return str(Path(config_path).resolve()) if config_path else None


def register(main: click.Group) -> None:
    """Add this module's commands to the `bertindex` group."""
    for command in (delete, status, reindex, flows_group):
        main.add_command(command)
