"""Keyword index: BM25 over document titles and texts with tantivy, kept in step with the store,
analysed for the corpus's language (`keyword.language`).

Layout under the store directory: `keyword/` (a tantivy index), `keyword/manifest.parquet`
(doc id -> content hash of what the index holds) and `keyword/LANGUAGE` (the analyzer it was
built with; absent: `english`, the only analyzer before the setting). Syncing diffs the store's
documents against the manifest, so it follows adds, changes and deletes whichever way they
reached the store, and rebuilds the whole index when the configured language differs from the
recorded one. Searches analyse the query with the recorded language, whatever the config says.
Does not encode and does not apply metadata filters itself (the caller passes allowed doc ids).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import get_args

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tantivy

from indexer.core.choices import KeywordLanguage
from indexer.errors import ConfigError, VectorIndexError
from indexer.store import DocText, HashDiff, Store

log = logging.getLogger(__name__)

KEYWORD_DIR = "keyword"
MANIFEST_FILE = "manifest.parquet"
SCHEMA_VERSION = "1"  # bump when the tantivy schema or analyzer changes: forces a rebuild
LANGUAGE_FILE = "LANGUAGE"
LANGUAGES = get_args(KeywordLanguage)
DEFAULT_LANGUAGE = "english"  # an index without LANGUAGE was built with it
_WRITE_BATCH = 10_000  # documents fetched from the store per round trip
_QUERY_CLEAN = re.compile(r"[^\w]+", re.UNICODE)
_MAX_TOKEN = 40  # longer tokens are dropped, as tantivy's built-in `en_stem` does


def tokenizer_name(language: str) -> str:
    """The tantivy analyzer name of a `keyword.language`.

    `english` is tantivy's built-in `en_stem` (split on non-alphanumerics, drop tokens over 40
    bytes, lower-case, English Snowball), unchanged so English figures stay as measured; it
    keeps accents (`café` and `cafe` differ). Every other language runs the same steps with
    its own Snowball stemmer and then folds accents to ASCII (`città`, `Straße`, `Häuser`
    match `citta`, `strasse`, `hauser`'s stem): stemming sees the accented word, which the
    stemmers expect, and folding afterwards lets a query typed without accents match.
    `none` (languages without a Snowball stemmer, such as Vietnamese) lower-cases only and
    keeps diacritics, which tell Vietnamese words apart (`ma`, `má`, `mà` are three words).
    """
    if language not in LANGUAGES:
        raise ConfigError(
            f"keyword.language '{language}' is unknown; choose one of {', '.join(LANGUAGES)}"
        )
    return "en_stem" if language == DEFAULT_LANGUAGE else f"bertindex_{language}"


def _analyzer(language: str) -> tantivy.TextAnalyzer:
    """The analyzer `tokenizer_name` describes (for `english`, the steps of the built-in
    `en_stem`, which the index itself uses)."""
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(_MAX_TOKEN))
        .filter(tantivy.Filter.lowercase())
    )
    if language != "none":
        builder = builder.filter(tantivy.Filter.stemmer(language))
    if language not in ("none", DEFAULT_LANGUAGE):
        builder = builder.filter(tantivy.Filter.ascii_fold())
    return builder.build()


def analyze(text: str, language: str) -> list[str]:
    """The terms `language`'s analyzer makes of `text` (what the index stores and a query
    looks up)."""
    tokenizer_name(language)  # refuses an unknown language
    return _analyzer(language).analyze(text)


def recorded_language(folder: Path) -> str:
    """The language a keyword index folder was built with (`english` when not recorded)."""
    path = Path(folder) / LANGUAGE_FILE
    return path.read_text().strip() if path.is_file() else DEFAULT_LANGUAGE


def _schema(language: str) -> tantivy.Schema:
    name = tokenizer_name(language)
    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("doc_id", stored=False, indexed=True, fast=True)
    builder.add_text_field("title", stored=False, tokenizer_name=name)
    builder.add_text_field("body", stored=False, tokenizer_name=name)
    return builder.build()


def query_terms(text: str) -> str:
    """A query string the tantivy parser reads as plain terms (no operators, no syntax).

    Punctuation becomes spaces and everything is lower-cased, so `AND`, `+x`, `"a b"` or
    `field:value` in user text are searched as words.
    """
    return " ".join(_QUERY_CLEAN.sub(" ", text).lower().split())


class KeywordIndex:
    """A tantivy BM25 index of one store's documents (title and text as separate fields).

    A document's score is the sum of its title and body BM25 scores (k1=1.2, b=0.75), which
    on SciFact gives the BEIR paper's multi-field BM25 figure (README).

    Args:
        folder: the `keyword/` directory of a store.
        create: create an empty index when none exists.
        language: with `create`, the analyzer of a new index (`keyword.language`); an existing
            index keeps the language it records (`sync_keyword_index` rebuilds it to change).
    """

    def __init__(self, folder: Path, create: bool = False, language: str = DEFAULT_LANGUAGE):
        self.folder = Path(folder)
        self._version_file = self.folder / "SCHEMA_VERSION"
        if not create and not self.exists(self.folder):
            raise VectorIndexError(
                f"no keyword index in {self.folder}; run `bertindex index` on this store once "
                "to build it from the stored documents (or search with --mode dense)"
            )
        new = not self.exists(self.folder)
        self.language = language if new else recorded_language(self.folder)
        if self.language not in LANGUAGES:
            raise VectorIndexError(
                f"{self.folder / LANGUAGE_FILE} names language "
                f"'{self.language}', which this bertindex does not know "
                f"({', '.join(LANGUAGES)}); delete the folder and re-run "
                "`bertindex index` to rebuild it"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        self.schema = _schema(self.language)
        try:
            self.index = tantivy.Index(self.schema, path=str(self.folder), reuse=True)
        except (OSError, ValueError) as exc:
            raise VectorIndexError(
                f"cannot open keyword index {self.folder} ({exc}); delete the "
                "folder and re-run `bertindex index` to rebuild it"
            ) from None
        if self.language != DEFAULT_LANGUAGE:  # custom analyzers live in the process only
            self.index.register_tokenizer(tokenizer_name(self.language), _analyzer(self.language))
        if new and self.language != DEFAULT_LANGUAGE:
            (self.folder / LANGUAGE_FILE).write_text(self.language)
        if not self._version_file.is_file():
            self._version_file.write_text(SCHEMA_VERSION)
        self._searcher: tantivy.Searcher | None = None

    @staticmethod
    def exists(folder: Path) -> bool:
        folder = Path(folder)
        return (folder / "meta.json").is_file() and (folder / "SCHEMA_VERSION").is_file()

    @classmethod
    def for_store(cls, store_dir: Path, create: bool = False) -> KeywordIndex:
        return cls(Path(store_dir) / KEYWORD_DIR, create=create)

    # -- reads -------------------------------------------------------------------------
    @property
    def searcher(self) -> tantivy.Searcher:
        if self._searcher is None:
            self.index.reload()
            self._searcher = self.index.searcher()
        return self._searcher

    @property
    def num_docs(self) -> int:
        return int(self.searcher.num_docs)

    def search(
        self, text: str, k: int, allowed_doc_ids: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """Top-k (doc id, BM25 score) for a free-text query, best first.

        Args:
            text: the query as the user typed it (syntax characters are ignored).
            k: number of documents.
            allowed_doc_ids: restrict to these doc ids inside the search; None: all.
        Returns:
            Up to k pairs; empty when no term of the query occurs in the index.
        """
        terms = query_terms(text)
        if not terms or k < 1:
            return []
        query = self.index.parse_query(terms, ["title", "body"])
        if allowed_doc_ids is not None:
            if len(allowed_doc_ids) == 0:
                return []
            allowed = tantivy.Query.term_set_query(
                self.schema, "doc_id", [int(d) for d in allowed_doc_ids]
            )
            query = tantivy.Query.boolean_query(
                [
                    (tantivy.Occur.Must, query),
                    (tantivy.Occur.Must, tantivy.Query.const_score_query(allowed, 0.0)),
                ]
            )
        searcher = self.searcher
        hits = searcher.search(query, k, count=False).hits
        if not hits:
            return []
        values = searcher.fast_field_values("doc_id", [address for _, address in hits])
        doc_ids = [d for d in values if d is not None]
        if len(doc_ids) < len(values):
            raise VectorIndexError(
                f"keyword index {self.folder} holds a document without its "
                "doc_id; delete the folder and re-run `bertindex index`"
            )
        return [(int(d), float(score)) for (score, _), d in zip(hits, doc_ids)]

    # -- writes ------------------------------------------------------------------------
    def manifest(self) -> dict[int, str]:
        """doc id -> content hash of the documents the index holds (empty when none)."""
        path = self.folder / MANIFEST_FILE
        if not path.is_file():
            return {}
        table = pq.read_table(path)
        return dict(
            zip(table.column("doc_id").to_pylist(), table.column("content_hash").to_pylist())
        )

    def manifest_rows(self) -> int:
        """Documents the manifest lists (0 when there is none); VectorIndexError when unreadable."""
        path = self.folder / MANIFEST_FILE
        if not path.is_file():
            return 0
        try:
            return pq.ParquetFile(path).metadata.num_rows
        except (OSError, pa.ArrowException) as exc:
            raise VectorIndexError(f"cannot read the keyword manifest {path} ({exc})") from None

    def diff(self, store: Store) -> HashDiff:
        """The store's documents against the manifest: doc ids to add, re-index or remove
        (joined inside DuckDB, so memory does not grow with the number of documents)."""
        return store.reads.diff_hashes(self.folder / MANIFEST_FILE)

    def add_documents(self, docs: Iterable[DocText]) -> None:
        """Add documents and commit, without a manifest: for an index that follows no store
        (the fusion tuning's temporary index of a sample, `indexer.indexing.fusion_tune`).

        Args:
            docs: titles and texts, each with its doc id.
        """
        self._write((), docs)

    def _write(self, deletes: Iterable[int], docs: Iterable[DocText]) -> None:
        """Delete `deletes` (doc ids), add `docs`, commit; roll back on any error."""
        writer = self.index.writer(heap_size=64_000_000, num_threads=1)
        try:
            for doc_id in deletes:
                writer.delete_documents_by_term("doc_id", doc_id)
            for doc in docs:
                writer.add_document(
                    tantivy.Document(doc_id=doc.doc_id, title=doc.title or "", body=doc.text)
                )
            writer.commit()
            writer.wait_merging_threads()
        except BaseException:
            writer.rollback()
            raise
        self._searcher = None

    def _write_manifest(self, store: Store) -> None:
        """The manifest after a sync: every stored document at its stored hash, streamed
        from the store in record batches and renamed into place."""
        tmp = self.folder / f".{MANIFEST_FILE}.tmp"
        reader = store.reads.document_hash_batches()
        with pq.ParquetWriter(tmp, reader.schema) as out:
            for batch in reader:
                out.write_batch(batch)
        os.replace(tmp, self.folder / MANIFEST_FILE)

    def apply(self, store: Store, change: HashDiff) -> None:
        """Delete changed and gone doc ids, (re)write new and changed ones from the store,
        commit, then write the manifest from the store.

        Re-applying the same change is harmless (delete-then-add by doc id). A crash between
        the tantivy commit and the manifest write heals on the next sync: changed texts are
        re-applied, and added or removed documents make the counts disagree, which rebuilds.
        New documents are not deleted first: the manifest does not list them, so the index
        cannot hold them unless its count disagrees with the manifest (a rebuild).
        """
        upsert = np.concatenate([change.new, change.changed])
        docs = (
            doc
            for start in range(0, len(upsert), _WRITE_BATCH)
            for doc in store.reads.documents_text(upsert[start : start + _WRITE_BATCH].tolist())
        )
        self._write(np.concatenate([change.changed, change.gone]).tolist(), docs)
        self._write_manifest(store)


def sync_keyword_index(store: Store, language: str = DEFAULT_LANGUAGE) -> dict:
    """Bring the store's keyword index in step with its documents.

    Compares every stored document's content hash with the index manifest: new and changed
    documents are (re)indexed, documents gone from the store are removed. A missing, damaged or
    outdated index, or one built for another language, is rebuilt from the stored texts.
    Nothing is encoded.

    Args:
        store: an open, writable Store.
        language: `keyword.language`, the analyzer the index must have.
    Returns:
        {"documents", "added", "updated", "removed", "rebuilt"}.
    """
    tokenizer_name(language)  # an unknown language is refused before anything is removed
    folder = Path(store.path) / KEYWORD_DIR
    rebuilt = False
    version_file = folder / "SCHEMA_VERSION"
    if folder.exists() and (
        not KeywordIndex.exists(folder) or version_file.read_text().strip() != SCHEMA_VERSION
    ):
        log.warning("keyword index %s is incomplete or outdated; rebuilding it", folder)
        shutil.rmtree(folder)
        rebuilt = True
    elif folder.exists() and recorded_language(folder) != language:
        log.warning(
            "keyword index %s was built for %s, keyword.language is %s; rebuilding it",
            folder,
            recorded_language(folder),
            language,
        )
        shutil.rmtree(folder)
        rebuilt = True
    try:
        index = KeywordIndex(folder, create=True, language=language)
        listed = index.manifest_rows()
        if index.num_docs != listed:
            raise VectorIndexError(
                f"keyword index holds {index.num_docs} documents, its manifest {listed}"
            )
    except VectorIndexError as exc:
        log.warning("%s; rebuilding the keyword index from the store", exc)
        shutil.rmtree(folder, ignore_errors=True)
        index = KeywordIndex(folder, create=True, language=language)
        rebuilt = True
    change = index.diff(store)
    if not change.empty:
        index.apply(store, change)
    return {
        "documents": change.documents,
        "added": len(change.new),
        "updated": len(change.changed),
        "removed": len(change.gone),
        "rebuilt": rebuilt,
    }
