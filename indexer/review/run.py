"""The review commands' library side: export to a file, import a file and publish a snapshot
so that searches see the labels. Opens the store itself (one short writer each)."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from indexer.config import Config
from indexer.review.files import read_review_file, review_format, write_review_file
from indexer.review.loop import ImportSummary, import_rows, select_for_review
from indexer.store import Store


def export_reviews(
    config: Config, head: str, out: Path | None, stdout: IO[str] | None = None, **selection
) -> dict:
    """Select documents to label (`loop.select_for_review`) and write them.

    Args:
        config: the configuration (`store.path`).
        head: the head to review.
        out: a .jsonl or .csv file; None writes JSONL to `stdout`.
        selection: strategy, n, collection, where, other, seed.
    Returns:
        {"head", "strategy", "exported", "out"}.
    """
    import json

    if out is not None:
        review_format(out)  # refuse a bad suffix before any work
    # a writer opens the live file: the freshest reviews, and the schema upgraded if needed
    with Store(config.store.path) as store:
        rows = select_for_review(store, head, **selection)
    if out is None:
        if stdout is None:
            raise ValueError("export_reviews() writes to `out` or to `stdout`; give one")
        for row in rows:
            stdout.write(
                json.dumps(
                    {
                        k: row.get(k)
                        for k in (
                            "id",
                            "collection",
                            "head",
                            "predicted",
                            "score",
                            "label",
                            "title",
                            "text",
                        )
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    else:
        write_review_file(out, rows)
    return {
        "head": head,
        "strategy": selection.get("strategy", "uncertain"),
        "exported": len(rows),
        "out": str(out) if out else None,
    }


def import_reviews(
    config: Config,
    path: Path,
    head: str,
    collection: str | None = None,
    reviewer: str | None = None,
) -> ImportSummary:
    """Import a labelled review file into the store and publish a snapshot with the labels;
    recorded as a `review` run.

    Returns:
        The import summary (`loop.ImportSummary`).
    """
    from indexer.indexing.steps import sync_vector_index

    rows = list(read_review_file(path))  # a file that cannot be read at all stops here
    with Store(config.store.path) as store, store.runs.recorded_run("review") as run:
        base = store.data_version()
        summary = import_rows(store, rows, head, Path(path).name, collection, reviewer)
        run.summary = summary.to_dict()
        if summary.stored:
            run.summary["index"] = sync_vector_index(store, config, [], [], base)
    return summary
