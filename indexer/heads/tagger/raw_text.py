"""Score a tagger on raw text: each item's words joined by single spaces, the entities a runner
finds in those texts (`annotate`'s, `predict`'s) against the gold spans at character offsets.

What `eval head --input raw-text` reports (run through the annotate path,
`indexer.annotate.raw_eval`) and a training receipt's `raw_text` (run through `predict`, which
gives the entities annotate stores). Does not load heads and does not read files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from indexer.errors import InputError
from indexer.heads.base import Example, examples_of
from indexer.heads.labels import bio_spans
from indexer.heads.metrics import span_f1
from indexer.heads.tagger.head_type import TokenExample
from indexer.records.annotations import Entity

RAW_TEXT_NOTE = (
    "the split's words joined by single spaces, run as raw text (character "
    "spans scored, exact type and boundaries)"
)


def joined_text(example: TokenExample) -> tuple[str, list[tuple[int, int]]]:
    """An item's words joined by single spaces, and each word's character span in it."""
    spans, at = [], 0
    for token in example.tokens:
        spans.append((at, at + len(token)))
        at += len(token) + 1
    return " ".join(example.tokens), spans


def gold_char_spans(examples: Sequence[TokenExample], label_names: Sequence[str]) -> set[tuple]:
    """Every gold entity as (item index, type, start char, end char) in its joined text."""
    out: set[tuple] = set()
    for i, example in enumerate(examples):
        _, spans = joined_text(example)
        tags = [label_names[t] for t in example.tags]
        out.update((i, kind, spans[a][0], spans[b - 1][1]) for kind, a, b in bio_spans(tags))
    return out


def score_raw_text(
    examples: Sequence[Example],
    label_names: Sequence[str],
    run: Callable[[list[str]], Sequence[Sequence[Entity]]],
) -> dict:
    """Entity-F1 of the entities `run` finds in the examples' joined texts.

    Args:
        examples: a tagger's split (tags index `label_names`).
        run: texts -> entities per text (an annotator's or a predictor's).
    Returns:
        `metrics.span_f1`'s keys plus "input": "raw-text" and "examples".
    """
    if not examples:
        raise InputError("nothing to score: the split has no items")
    tagged = examples_of(
        TokenExample,
        examples,
        "raw-text input is for NER heads (items {tokens, tags}); a classifier "
        "already reads its texts whole",
    )
    texts = [joined_text(e)[0] for e in tagged]
    found = run(texts)
    predicted = {(i, e.type, e.start, e.end) for i, ents in enumerate(found) for e in ents}
    return {
        "input": "raw-text",
        "examples": len(examples),
        **span_f1(gold_char_spans(tagged, label_names), predicted),
    }
