"""`bertindex` command line: the group, `index` and `search`; every other command group lives
in its own module of `search.cli`, added here. Thin layer over `indexer` and `flows`.

Exit codes: 0 success (no hits included), 1 runtime error, 2 usage error.
`search --server URL` only asks a server (`search.client`): it loads no model, index or store.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import click

from indexer.config import SearchConfig
from indexer.config.flows import FieldsConfig, SourceConfig
from indexer.ingest.formats import format_names
from search.cli.annotate import entity_callback, label_callback
from search.cli.common import (
    build_config,
    client_options,
    config_choices,
    config_default,
    config_options,
    encode_options,
    handle_errors,
    json_option,
    print_json,
    show_progress,
    where_callback,
)
from search.client import DEFAULT_URL, remote_search


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="bertindex")
def main() -> None:
    """bertindex: batch BERT embeddings, FAISS + DuckDB, semantic search."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option(
    "--collection",
    default=config_default(SourceConfig, "collection"),
    show_default=True,
    help="Collection name; document ids are unique within it.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(format_names()),
    default=config_default(SourceConfig, "format"),
    show_default=True,
    help="Input format (auto: by file name).",
)
@click.option("--id-field", help="Column holding the document id (default: id or _id).")
@click.option(
    "--text-field",
    default=config_default(FieldsConfig, "text"),
    show_default=True,
    help="Column holding the text.",
)
@click.option(
    "--title-field",
    default=config_default(FieldsConfig, "title"),
    show_default=True,
    help="Column holding the title (encoded before the text).",
)
@click.option(
    "--batch-size",
    default=config_default(SourceConfig, "batch_size"),
    show_default=True,
    type=click.IntRange(1),
    help="Documents read and committed per batch.",
)
@click.option(
    "--on-missing",
    type=click.Choice(config_choices(SourceConfig, "on_missing")),
    default=config_default(SourceConfig, "on_missing"),
    show_default=True,
    help="Documents of the collection that the files no longer hold: keep or delete.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="A batch with any rejected record stores none of its documents (only the "
    "rejections); exit code 1. Clean batches are stored.",
)
@click.option(
    "--vectors",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Precomputed vectors (.parquet: id, vector columns, `model` metadata; .npz: ids, "
    "vectors, model) stored for the documents they name instead of encoding them.",
)
@config_options
@encode_options
@json_option
@handle_errors
def index(
    paths,
    collection,
    fmt,
    id_field,
    text_field,
    title_field,
    batch_size,
    on_missing,
    strict,
    vectors,
    config_path,
    store_path,
    max_length,
    long_documents,
    as_json,
):
    """Read, encode and index corpus files (JSONL, CSV, TSV, Parquet, BEIR) into the store.

    Unchanged documents are skipped; changed ones are re-encoded and replaced. A killed run
    loses nothing committed: run it again. Exit code 1 when a batch failed after retries, or
    with --strict when a batch held a rejected record.
    """
    from flows.runtime import wait_for_api, warm_up_api

    cfg = build_config(config_path, store_path, max_length, long_documents)
    warm_up_api()  # Prefect's local API starts while the model loads
    from indexer.encode.encoder import load_encoder
    from indexer.ingest.readers import FieldMap

    load_encoder(cfg.model)
    wait_for_api()
    from flows.index_corpus import flow_for

    fields = FieldMap(id_field=id_field, text_field=text_field, title_field=title_field or None)
    summary = flow_for(cfg)(
        [str(p) for p in paths],
        cfg,
        collection,
        fmt,
        fields,
        batch_size,
        show_progress(),
        on_missing,
        strict=strict,
        vectors=str(vectors) if vectors else None,
    )
    if as_json:
        print_json(summary)
    else:
        click.echo(
            f"read {summary['read']}, encoded {summary['encoded']}, "
            f"unchanged {summary['skipped_unchanged']}"
            + (
                f" ({summary['unchanged_files']} unchanged files not read again)"
                if summary.get("unchanged_files")
                else ""
            )
            + f", rejected {summary['rejected']}"
            + (f", imported {summary['vectors']['imported']} vectors" if vectors else "")
            + "; "
            f"index {summary['index']['ntotal']} vectors in {cfg.store.path}"
        )
        if summary.get("stages"):
            click.echo(stage_line(summary["stages"]))
        short = summary["index"].get("recall_short")
        if short:
            click.echo(
                f"warning: the index reaches recall@10 {short['recall@10']} at "
                f"{short['param']}={short['value']}, below index.target_recall "
                f"{short['target']}: raise index.memory_budget_mb or choose index.spec",
                err=True,
            )
        for r in summary["rejections"][:10]:
            click.echo(f"rejected {r['source']}:{r['row']} ({r['id']}): {r['reason']}", err=True)
    errors = index_errors(summary)
    for line in errors:
        click.echo(line, err=True)
    if errors:
        sys.exit(1)


def stage_line(stages: dict) -> str:
    """Where an index run's time went: `wall` and each stage's busy seconds, the longest first
    (stages overlap on their threads, so they may add up to more than the wall)."""
    busy = sorted(((s, name) for name, s in stages.items() if name != "wall"), reverse=True)
    parts = ", ".join(f"{name} {seconds:.1f}" for seconds, name in busy)
    return f"seconds: wall {stages['wall']:.1f}; busy: {parts}"


def index_errors(summary: dict) -> list[str]:
    """The error lines an index run summary calls for (exit code 1 when there are any):
    batches that failed after retries, and batches `--strict` refused."""
    lines = []
    failed = summary.get("failed_batches") or []
    for f in failed[:10]:
        lines.append(f"error: batch {f['batch']} failed: {f['error']}")
    if failed:
        lines.append(
            f"error: {len(failed)} batch(es) failed after retries; the others are "
            "stored. Run the same command again to retry them."
        )
    refused = summary.get("refused_batches") or []
    for r in refused[:10]:
        lines.append(
            f"error: --strict: batch {r['batch']} not stored: {r['rejected']} "
            f"rejected record(s), e.g. {r['first_reason']}"
        )
    if refused:
        lines.append(
            f"error: --strict: {len(refused)} batch(es) held rejected records and "
            f"stored none of their {sum(r['records'] for r in refused)} good "
            "record(s) (the rejections are in the `rejected` table); clean batches "
            "are stored. Fix the rows and run the same command again."
        )
    return lines


@main.command()
@click.argument("query")
@click.option(
    "-k",
    "k",
    default=10,
    show_default=True,
    type=click.IntRange(1, 10000),
    help="Number of documents to return.",
)
@click.option("--collection", help="Search one collection only.")
@click.option(
    "--where",
    "where",
    multiple=True,
    metavar="FIELD=VALUE",
    callback=where_callback,
    help="Metadata filter (repeatable; all must match), applied inside the search.",
)
@click.option(
    "--mode",
    type=click.Choice(config_choices(SearchConfig, "mode")),
    help="Dense vectors, BM25 keywords, or both fused (default: search.mode, "
    f"{config_default(SearchConfig, 'mode')}).",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="HEAD=LABEL",
    callback=label_callback,
    help="Only documents labelled so (repeatable; all must match): a person's label "
    "(`bertindex review import`) where there is one, else the model's "
    "(`bertindex annotate`).",
)
@click.option(
    "--human",
    is_flag=True,
    help="--label matches labels people gave (review import, the review page) only.",
)
@click.option(
    "--entity",
    "entities",
    multiple=True,
    metavar="TYPE[=TEXT]",
    callback=entity_callback,
    help="Only documents with an entity of TYPE (and TEXT, any case) (repeatable).",
)
@click.option(
    "--unique",
    is_flag=True,
    help="Collapse each near-duplicate group (`bertindex dedup`) to its best-ranked "
    "member, shown with the group's size.",
)
@click.option(
    "--rerank",
    metavar="HEAD",
    help="Reorder the top --rerank-depth hits with a pair head (`bertindex train "
    "rerank`), scoring the query with each hit's best window; `none`: no "
    "reranking (default: search.rerank, none unless set).",
)
@click.option(
    "--rerank-depth",
    type=click.IntRange(1, 1000),
    metavar="N",
    help="Hits --rerank reorders; those below keep their order (default: "
    f"search.rerank_depth, {config_default(SearchConfig, 'rerank_depth')}).",
)
@click.option(
    "--server",
    metavar="URL",
    help=f"Ask a running `bertindex serve` (e.g. {DEFAULT_URL}) instead of "
    "loading the model and index here.",
)
@client_options
@config_options
@encode_options
@json_option
@handle_errors
def search(
    query,
    k,
    collection,
    where,
    mode,
    labels,
    entities,
    human,
    unique,
    rerank,
    rerank_depth,
    server,
    token,
    ca_cert,
    config_path,
    store_path,
    max_length,
    long_documents,
    as_json,
):
    """Search: the k documents that best match QUERY (hybrid of dense and BM25 by default)."""
    if server and (rerank or rerank_depth):
        raise click.UsageError(
            "--rerank with --server: the server reranks with its own "
            'search.rerank (POST /search {"rerank": true})'
        )
    if unique and rerank and rerank != "none":
        raise click.UsageError("--rerank and --unique do not combine yet; use one")
    if server and (human or unique):
        raise click.UsageError("--human and --unique are not supported with --server yet")
    if human and not labels:
        raise click.UsageError("--human qualifies --label HEAD=LABEL; give one")
    annotations = {}
    sizes: dict = {}
    if server:
        hits = remote_search(
            server,
            query,
            k,
            collection,
            where,
            mode,
            labels=labels,
            entities=entities,
            token=token,
            ca_cert=ca_cert,
        )
    else:
        from indexer.query.searcher import Searcher
        from indexer.store import Store

        cfg = build_config(config_path, store_path, max_length, long_documents)
        with Store(cfg.store.path, read_only=True) as store:
            searcher = Searcher(cfg, store)
            if unique:
                hits, sizes = searcher.search_unique(
                    query, k, collection, where, mode, labels=labels, entities=entities, human=human
                )
            else:
                hits = searcher.search(
                    query,
                    k,
                    collection,
                    where,
                    mode,
                    labels=labels,
                    entities=entities,
                    human=human,
                    rerank=False if rerank == "none" else rerank,
                    rerank_depth=rerank_depth,
                )
            if as_json:
                annotations = store.annotations.by_document([(h.collection, h.id) for h in hits])
    global _exit_at_once
    _exit_at_once = not server  # the store is closed: nothing left to tear down (`run`)
    if as_json:
        for h in hits:
            print_json(
                h.to_dict()
                | ({"group_size": sizes.get((h.collection, h.id), 1)} if unique else {})
                | annotations.get((h.collection, h.id), {})
            )
        return
    if not hits:
        click.echo("no hits", err=True)
        return
    _print_table(hits, sizes if unique else None)


def _side(value) -> str:
    return f"{value:6.3f}" if value is not None else f"{'-':>6}"


def _print_table(hits, sizes: dict | None = None) -> None:
    id_width = min(max(len(h.id) for h in hits), 40)
    both = any(h.dense is not None for h in hits) and any(h.keyword is not None for h in hits)
    sides = f"  {'dense':>6}  {'bm25':>6}" if both else ""  # hybrid: why each ranks there
    click.echo(f"{'rank':>4}  {'score':>6}{sides}  {'id':<{id_width}}  title / snippet")
    for h in hits:
        snippet = " ".join(h.text[h.chunk_start : h.chunk_end].split())
        if h.chunk_start > 0:  # a later window: mark the cut
            snippet = "… " + snippet
        title = (h.title or "").strip()
        line = f"{title} | {snippet}" if title else snippet
        if sizes is not None:
            line = f"[x{sizes.get((h.collection, h.id), 1)}] {line}"
        sides = f"  {_side(h.dense)}  {_side(h.keyword)}" if both else ""
        click.echo(
            f"{h.rank:>4}  {h.score:6.3f}{sides}  {h.id[:id_width]:<{id_width}}  "
            f"{textwrap.shorten(line, 90, placeholder=' …')}"
        )


def _register_commands() -> None:
    """Commands that live in their own modules. Imported at start, with no fallback: a module
    that fails to import stops `bertindex` with its error rather than removing its commands."""
    from search.cli.evaluate import eval_group

    main.add_command(eval_group)  # eval beir|sts, and eval head below
    from search.cli.serve import serve

    main.add_command(serve)
    from search.cli.flows import register as register_flow_commands

    register_flow_commands(main)  # delete, status, reindex, flows serve|list
    from search.cli.annotate import annotate

    main.add_command(annotate)
    from search.cli.doctor import doctor

    main.add_command(doctor)
    from search.cli.review import review

    main.add_command(review)
    from search.cli.tokens import token

    main.add_command(token)
    from search.cli.streams import dedup, report

    main.add_command(report)
    main.add_command(dedup)
    from search.cli.heads import eval_head, train

    main.add_command(train)
    from search.cli.adapt import adapt

    main.add_command(adapt)
    eval_group.add_command(eval_head, name="head")


_register_commands()

# Set by a local `search` once its answer is written: `run` then ends the process at once.
_exit_at_once = False


def run() -> None:
    """The `bertindex` console script: `main`; after a local `search` has written its
    answer, the process ends without tearing the interpreter down (unmapping the index and
    freeing every module's objects took ~0.1 s of a ~0.9 s one-off search at 10M documents,
    AMD EPYC, 2026-12-06). The store is closed by then and the output flushed here; every
    other command, `CliRunner` and library callers exit as usual."""
    try:
        main()
    except SystemExit as exc:
        if not _exit_at_once or not isinstance(exc.code, int | None):
            raise
        import logging
        import os

        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(exc.code or 0)


if __name__ == "__main__":
    run()
