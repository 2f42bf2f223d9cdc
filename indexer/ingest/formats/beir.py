"""BEIR corpus: `corpus.jsonl(.gz)` of a BEIR data-set folder (one with `qrels/` beside it),
JSON Lines with fixed columns `_id`, `title`, `text`.
"""

from __future__ import annotations

from pathlib import Path

from indexer.ingest.formats.base import Format
from indexer.ingest.formats.jsonl import jsonl_frames

CORPUS_NAMES = ("corpus.jsonl", "corpus.jsonl.gz")


def is_beir_corpus(path: Path) -> bool:
    """Whether `path` is the corpus file of a BEIR folder (a `qrels/` folder beside it)."""
    return path.name.lower() in CORPUS_NAMES and (path.parent / "qrels").is_dir()


def folder_corpus(folder: Path) -> Path | None:
    """The corpus file a BEIR data-set folder stands for (`corpus.jsonl` first), else None."""
    return next((p for p in (folder / n for n in CORPUS_NAMES) if p.is_file()), None)


FORMAT = Format(
    name="beir",
    suffixes=(),  # recognised by name and folder only: `claims`
    frames=jsonl_frames,
    summary="BEIR corpus.jsonl(.gz) with _id, title, text (a qrels/ folder beside it)",
    fields={"id_field": "_id", "text_field": "text", "title_field": "title"},
    claims=is_beir_corpus,
    directory_corpus=folder_corpus,
)
