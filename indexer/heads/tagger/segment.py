"""How a tagger cuts raw text into the words it was trained on, and a raw-text encoding's tokens
grouped into those words (`text_words`), with each word's exact character span.

A tagger learns its labels on the first subword of each training word. Its training items are
pre-split word lists (CoNLL columns, `{tokens, tags}` JSON), which bertindex reproduces from raw
text by splitting at whitespace, so the head records `whitespace` (config.json
`bertindex_segmentation`). `tokenizer` keeps the tokenizer's own pre-tokenizer words (which
split `#Spurs` or `U.S.` at punctuation): what bertindex did before the record existed.
Does not tokenize: it works on a fast tokenizer's word ids and character offsets.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import get_args

from indexer.core.choices import Segmentation
from indexer.errors import ModelError
from indexer.heads.labels import merge_subwords

SEGMENTATION_KEY = "bertindex_segmentation"  # in a tagger's config.json
SEGMENTATIONS = get_args(Segmentation)
# a head saved without the record: every bertindex tagger was trained on pre-split word lists
# (CoNLL-style, whitespace-delimited), so raw text is split the same way
ASSUMED = "whitespace"
_WORD = re.compile(r"\S+")


def saved_segmentation(config, where: str) -> str:
    """The segmentation a saved tagger records in its config (ASSUMED when it has none).

    Args:
        config: the head's transformers config.
        where: the head directory, for the error.
    Raises:
        ModelError: an unknown value, naming the key and the choices.
    """
    value = getattr(config, SEGMENTATION_KEY, None) or ASSUMED
    if value not in SEGMENTATIONS:
        raise ModelError(
            f"{where}: config.json has {SEGMENTATION_KEY}={value!r}; choose one of "
            f"{', '.join(SEGMENTATIONS)}"
        )
    return value


def whitespace_words(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the whitespace-delimited words of `text`, in order."""
    return [m.span() for m in _WORD.finditer(text)]


def text_words(
    text: str, word_ids: Sequence[int | None], offsets, segmentation: str = ASSUMED
) -> list[list[int]]:
    """The words of one encoded raw text as [start_char, end_char, first-subword position].

    With `whitespace`, a token belongs to the whitespace word holding its last character; a
    token of no width or of whitespace only (a lone SentencePiece `▁`) to the word after it,
    as `is_split_into_words` encoding gives it that word. A word's span is the whole
    whitespace word, so an entity covers exactly the words the head tagged.

    Args:
        word_ids: per token the tokenizer's word index, None for special tokens and padding.
        offsets: per token its (start, end) character offsets into `text`.
        segmentation: `whitespace` or `tokenizer` (the tokenizer's own words).
    Returns:
        Words that hold at least one token, in text order.
    """
    if segmentation == "tokenizer":
        return merge_subwords(word_ids, offsets)
    if segmentation != "whitespace":
        raise ModelError(
            f"segmentation {segmentation!r} is unknown; choose one of {', '.join(SEGMENTATIONS)}"
        )
    spans = whitespace_words(text)
    starts = [s for s, _ in spans]
    first: dict[int, int] = {}  # word -> first token position
    for pos, w in enumerate(word_ids):
        if w is None:
            continue
        s, e = int(offsets[pos][0]), int(offsets[pos][1])
        k = bisect.bisect_right(starts, e - 1) - 1 if e > s else -1
        if k < 0 or e - 1 >= spans[k][1]:  # no width, or ends in whitespace: the next word
            k = bisect.bisect_left(starts, s)
            if k >= len(spans):
                continue
        first.setdefault(k, pos)
    return [[*spans[k], first[k]] for k in sorted(first)]
