"""Label alignment between words and subword tokens, and BIO tags to entity spans.

Does not tokenize: it works on the `word_ids()` a fast tokenizer already produced.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

IGNORE_INDEX = -100  # ignored by cross-entropy: later subwords, special tokens, padding


def align_labels(word_ids: Sequence[int | None], word_labels: Sequence[int]) -> list[int]:
    """Give each token the label it trains on.

    The first subword of a word keeps the word's label; later subwords of the same word,
    special tokens (`word_id` None) and padding get IGNORE_INDEX.

    Args:
        word_ids: one entry per token, the index of its word or None (from `word_ids()`).
        word_labels: one label id per word.
    Returns:
        One label id per token.
    """
    aligned: list[int] = []
    previous: int | None = None
    for word in word_ids:
        if word is None or word == previous:
            aligned.append(IGNORE_INDEX)
        else:
            aligned.append(word_labels[word])
        previous = word
    return aligned


def first_subword_positions(word_ids: Sequence[int | None]) -> dict[int, int]:
    """Map each word index to the position of its first subword token.

    Words that produced no token at all (e.g. a lone control character) are absent.
    """
    positions: dict[int, int] = {}
    for position, word in enumerate(word_ids):
        if word is not None and word not in positions:
            positions[word] = position
    return positions


def merge_subwords(word_ids: Sequence[int | None], offsets) -> list[list[int]]:
    """Words of one encoded text as [start_char, end_char, first-subword position], in order.

    Special tokens (word id None) are skipped; a later subword extends its word's end.
    """
    words: list[list[int]] = []
    last = None
    for pos, w in enumerate(word_ids):
        if w is None:
            continue
        s, e = int(offsets[pos][0]), int(offsets[pos][1])
        if w != last:
            words.append([s, e, pos])
        else:
            words[-1][1] = e
        last = w
    return words


def word_spans(
    words: Sequence[Sequence], tags: Sequence[str], probs: Sequence[float], text: str
) -> list[tuple[str, int, int, str, float]]:
    """BIO spans over tagged words as (type, start_char, end_char, text, mean word prob)."""
    out = []
    for kind, a, b in bio_spans(list(tags)):
        s, e = int(words[a][0]), int(words[b - 1][1])
        out.append((kind, s, e, text[s:e], float(sum(probs[a:b]) / (b - a))))
    return out


def split_tag(tag: str) -> tuple[str, str]:
    """`B-PER` -> (`B`, `PER`); `O` -> (`O`, ``)."""
    if tag == "O":
        return "O", ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def is_bio_tag(tag: str) -> bool:
    """True for `O` and for `B-TYPE` / `I-TYPE` with a non-empty type."""
    prefix, kind = split_tag(tag)
    return prefix == "O" or (prefix in ("B", "I") and bool(kind) and tag[1] == "-")


def bio_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entity spans of a BIO tag sequence, read the conlleval way (as seqeval's default).

    A span starts at `B-X`, or at `I-X` that does not continue a span of type X (after `O`,
    or after a span of another type); it ends before `O`, `B-*`, or a tag of another type.

    Args:
        tags: tags such as `O`, `B-PER`, `I-PER`.
    Returns:
        (type, start, end) with `end` exclusive, in order.
    """
    spans: list[tuple[str, int, int]] = []
    kind_open: str | None = None
    start = 0
    for i, tag in enumerate(tags):
        prefix, kind = split_tag(tag)
        if kind_open is not None and (prefix in ("O", "B") or kind != kind_open):
            spans.append((kind_open, start, i))
            kind_open = None
        if prefix == "B" or (prefix == "I" and kind_open is None):
            kind_open, start = kind, i
    if kind_open is not None:
        spans.append((kind_open, start, len(tags)))
    return spans


def order_bio_labels(tags: Iterable[str]) -> list[str]:
    """A stable label list for a set of BIO tags: `O` first, then `B-X`, `I-X` by type."""
    kinds = sorted({split_tag(t)[1] for t in tags if t != "O"})
    return ["O"] + [f"{p}-{k}" for k in kinds for p in ("B", "I")]


def allowed_transitions(label_names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """BIO constraints: `I-X` may only follow `B-X` or `I-X`, and may not start a sentence.

    Returns:
        (start, transition): (labels,) and (labels, labels) boolean masks, transition[i, j]
        True when label j may follow label i.
    """
    parts = [split_tag(name) for name in label_names]
    start = np.array([prefix != "I" for prefix, _ in parts])
    transition = np.ones((len(parts), len(parts)), dtype=bool)
    for j, (prefix, kind) in enumerate(parts):
        if prefix == "I":
            transition[:, j] = [p in ("B", "I") and k == kind for p, k in parts]
    return start, transition


def decode_bio(log_probs: np.ndarray, label_names: Sequence[str]) -> list[int]:
    """The most probable tag sequence that is valid BIO (Viterbi over per-word log-probs).

    Args:
        log_probs: (words, labels) log-probabilities, one row per word.
        label_names: the tags, indexed by label id.
    Returns:
        One label id per word.
    """
    n = log_probs.shape[0]
    if n == 0:
        return []
    start, transition = allowed_transitions(label_names)
    penalty = np.where(transition, 0.0, -np.inf)  # (from, to)
    score = np.where(start, log_probs[0], -np.inf)  # (labels,)
    back = np.zeros((n, log_probs.shape[1]), dtype=np.int64)
    for t in range(1, n):
        candidates = score[:, None] + penalty  # (from, to)
        back[t] = candidates.argmax(0)
        score = candidates.max(0) + log_probs[t]
    path = [int(score.argmax())]
    for t in range(n - 1, 0, -1):
        path.append(int(back[t, path[-1]]))
    return path[::-1]
