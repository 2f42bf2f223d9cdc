"""The unlabelled text `bertindex adapt` trains on, as token sequences.

Texts come from corpus files (every format the indexer reads, through its readers: bad rows
are reported by file and row and the rest are read) or from a collection of the store (each
document's title and text, as the indexer encodes them, in document-id order). Each text is
tokenised once without special tokens and cut into windows that fit `max_length` with the
model's own special tokens around them, so no token of a long document is lost. A held-out
slice of whole documents (seeded) scores each epoch; it is never trained on.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from indexer.core.progress import ProgressArg, write_line
from indexer.errors import InputError

log = logging.getLogger(__name__)

TOKENIZE_BATCH = 2048  # texts per tokenizer call
MAX_HELD_OUT = 2000  # held-out sequences at most (scoring them each epoch must stay cheap)


@dataclass
class Sequences:
    """Token sequences with the model's special tokens, and what may be chosen for masking."""

    ids: list[np.ndarray] = field(default_factory=list)  # int32 per sequence
    words: list[np.ndarray] = field(
        default_factory=list
    )  # word number per position, -1 on specials
    candidates: list[np.ndarray] = field(default_factory=list)  # bool: not a special token

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(s) for s in self.ids), dtype=np.int64, count=len(self.ids))

    def tokens(self) -> int:
        return int(self.lengths.sum()) if self.ids else 0

    def take(self, index) -> Sequences:
        return Sequences(
            [self.ids[i] for i in index],
            [self.words[i] for i in index],
            [self.candidates[i] for i in index],
        )


@dataclass
class Corpus:
    """The train and held-out sequences, and where they came from (for the receipt)."""

    train: Sequences
    held_out: Sequences
    provenance: dict


def read_file_texts(
    paths: list[str], fmt: str = "auto", progress: ProgressArg = False
) -> tuple[list[str], dict]:
    """Every document's text (title and body, as the indexer encodes it) of the corpus files.

    Returns:
        (texts, provenance): per file its path, size, SHA-256 of its first MiB, documents
        read and rows rejected (with the first few reasons, by row).
    Raises:
        InputError: no file given, a path that is not a file or folder, or no text at all.
    """
    from indexer.ingest.paths import expand_paths
    from indexer.ingest.readers import IdRegistry, document_text, read_batches

    if not paths:
        raise InputError("give corpus files to adapt on, or --store with --collection")
    files, skipped = expand_paths(paths)
    texts: list[str] = []
    sources, rejected_total = [], 0
    ids = IdRegistry()
    for path in files:
        path = Path(path)
        count, rejected = 0, []
        for batch in read_batches(path, fmt, ids=ids):
            for record in batch.records:
                texts.append(document_text(record))
                count += 1
            rejected.extend(batch.rejected)
        for r in rejected[:5]:
            write_line(f"{r.source}, row {r.row}: {r.reason}", progress)
        rejected_total += len(rejected)
        sources.append(
            {
                "path": str(path),
                "bytes": path.stat().st_size,
                "sha256_first_mib": _head_digest(path),
                "documents": count,
                "rejected": len(rejected),
                "rejected_first": [f"row {r.row}: {r.reason}" for r in rejected[:5]],
            }
        )
        write_line(
            f"read {count:,} documents from {path}"
            + (f" ({len(rejected)} rows rejected)" if rejected else ""),
            progress,
        )
    if not texts:
        raise InputError(
            f"no text read from {', '.join(map(str, paths))}: every row was "
            "rejected or the files are empty (see the lines above)"
        )
    return texts, {
        "kind": "files",
        "files": sources,
        "documents": len(texts),
        "rejected": rejected_total,
        "skipped": [f"{r.source}: {r.reason}" for r in skipped],
    }


def read_store_texts(store_path: Path, collection: str) -> tuple[list[str], dict]:
    """Every document's title and text of one collection of the store, in id order.

    Raises:
        InputError: the collection holds no documents (the message lists those that do).
    """
    from indexer.store import Store

    with Store(store_path, read_only=True) as store:
        pairs = [
            (int(i), t)
            for ids, texts in store.dedup.iter_texts(collection)
            for i, t in zip(ids, texts)
        ]
        if not pairs:
            names = ", ".join(c["collection"] for c in store.counts.collections()) or "none"
            raise InputError(
                f"{store_path}: collection '{collection}' holds no documents "
                f"(collections: {names}); pass --collection with one of them"
            )
    pairs.sort()
    return [t for _, t in pairs], {
        "kind": "store",
        "store": str(store_path),
        "collection": collection,
        "documents": len(pairs),
        "first_doc_id": pairs[0][0],
        "last_doc_id": pairs[-1][0],
    }


def _head_digest(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.sha256(fh.read(1 << 20)).hexdigest()


def tokenize(
    tokenizer, texts: list[str], max_length: int, prefix: tuple[int, ...], suffix: tuple[int, ...]
) -> tuple[Sequences, list[int]]:
    """Each text as one or more sequences of at most `max_length` tokens, the tokenizer's
    framing (`model_facts.special_tokens`: `prefix` ids before, `suffix` ids after) around
    each window, as the indexer frames its windows. A special token's id inside a text (a
    literal "[SEP]" in a comment) is never a masking candidate either.

    Returns:
        (sequences, the index of the text each sequence came from).
    """
    out, origin = Sequences(), []
    width = max_length - len(prefix) - len(suffix)
    if width < 1:
        raise InputError(
            f"--max-length {max_length} leaves no room for text beside the "
            f"model's {len(prefix) + len(suffix)} special tokens; raise it"
        )
    head, tail = list(prefix), list(suffix)
    special_ids = np.asarray(sorted(set(tokenizer.all_special_ids)), dtype=np.int32)
    none = [-1] * len(head), [-1] * len(tail)
    for start in range(0, len(texts), TOKENIZE_BATCH):
        chunk = texts[start : start + TOKENIZE_BATCH]
        enc = tokenizer(chunk, add_special_tokens=False, truncation=False, verbose=False)
        for j, ids in enumerate(enc["input_ids"]):
            if not ids:
                continue
            word_ids = [-1 if x is None else x for x in enc.word_ids(j)]
            for w in range(0, len(ids), width):
                piece = ids[w : w + width]
                out.ids.append(np.asarray(head + piece + tail, dtype=np.int32))
                out.words.append(
                    np.asarray(none[0] + word_ids[w : w + width] + none[1], dtype=np.int32)
                )
                chosen = np.ones(len(piece) + len(head) + len(tail), dtype=bool)
                chosen[: len(head)] = False
                chosen[len(chosen) - len(tail) :] = False
                chosen &= ~np.isin(out.ids[-1], special_ids)
                out.candidates.append(chosen)
                origin.append(start + j)
    return out, origin


def build_corpus(
    texts: list[str],
    provenance: dict,
    tokenizer,
    max_length: int,
    specials,
    held_out: float,
    seed: int,
    progress: ProgressArg = False,
) -> Corpus:
    """Tokenise the texts and hold out a seeded share of whole documents (at most
    MAX_HELD_OUT sequences, at least one when there are two documents or more)."""
    sequences, origin = tokenize(tokenizer, texts, max_length, specials.prefix, specials.suffix)
    if not len(sequences):
        raise InputError("the texts hold no tokens to train on")
    documents = len(texts)
    rng = np.random.default_rng(seed)
    order = rng.permutation(documents)
    wanted = max(1, int(round(held_out * documents))) if documents > 1 and held_out > 0 else 0
    held_docs: set[int] = set()
    taken = 0
    counts = np.bincount(np.asarray(origin), minlength=documents)
    for d in order:
        if len(held_docs) >= wanted or taken + counts[d] > MAX_HELD_OUT:
            break
        held_docs.add(int(d))
        taken += int(counts[d])
    held_index = [i for i, d in enumerate(origin) if d in held_docs]
    train_index = [i for i, d in enumerate(origin) if d not in held_docs]
    if not train_index:
        raise InputError("every sequence is held out; give more text or a smaller --held-out")
    corpus = Corpus(sequences.take(train_index), sequences.take(held_index), dict(provenance))
    corpus.provenance.update(
        {
            "sequences": len(sequences),
            "tokens": sequences.tokens(),
            "train_sequences": len(corpus.train),
            "train_tokens": corpus.train.tokens(),
            "held_out_documents": len(held_docs),
            "held_out_sequences": len(corpus.held_out),
            "held_out_tokens": corpus.held_out.tokens(),
            "held_out_share": held_out,
            "max_length": max_length,
        }
    )
    write_line(
        f"{documents:,} documents -> {len(sequences):,} sequences, "
        f"{sequences.tokens():,} tokens ({len(corpus.held_out):,} sequences held out)",
        progress,
    )
    return corpus
