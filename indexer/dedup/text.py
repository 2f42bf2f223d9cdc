"""The cheap text check of a candidate pair: words of a tweet-like text once the parts that
copy-paste waves change are gone (a leading `RT @user:`, URLs, @mentions, hashtags, case,
punctuation, emoji), the Jaccard overlap of two such word sets, and the rule that decides."""

from __future__ import annotations

import re
from array import array

import numpy as np

_RETWEET = re.compile(r"^\s*rt\s+@\w+\s*:?\s*", re.IGNORECASE)
_URL = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)
_TAG = re.compile(r"[@#]\w+")
MIN_SHARED_WORDS = 3  # fewer shared words: only identical word sets count as copies
_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script; emoji and punctuation go


def normalise(text: str) -> str:
    """Lower-case words of `text`, space-separated, without retweet prefix, URLs, mentions,
    hashtags, punctuation or emoji.

    >>> normalise("RT @user: Big NEWS!!! https://t.co/x #breaking 🔥")
    'big news'
    """
    text = _RETWEET.sub("", text)
    text = _URL.sub(" ", text)
    text = _TAG.sub(" ", text)
    return " ".join(_WORD.findall(text.lower()))


def word_set(text: str) -> frozenset[str]:
    """The set of normalised words of `text`."""
    return frozenset(normalise(text).split())


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets (texts of only links, tags or emoji) count as 1."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def same_words(a: frozenset[str], b: frozenset[str], min_jaccard: float) -> bool:
    """The text check of a pair: identical word sets, or a Jaccard overlap of at least
    `min_jaccard` with at least MIN_SHARED_WORDS words in common (two short comments that share
    "she is" are not copies, and such pairs would chain unrelated short comments into one
    group)."""
    if a == b:
        return True
    shared = len(a & b)
    return shared >= MIN_SHARED_WORDS and shared / len(a | b) >= min_jaccard


class WordSets:
    """Every document's `word_set`, held as integer word ids (4 bytes a word: a million tweets
    take tens of MB, not the GB of Python sets), and `same_words` of many pairs at once.

    Args:
        batches: (doc ids, texts) items; a document never given has no words.
    """

    def __init__(self, batches):
        vocab: dict[str, int] = {}
        docs, counts, flat = [], array("q"), array("i")  # compact, unlike lists of ints
        for doc_ids, texts in batches:
            docs.append(np.asarray(doc_ids, np.int64))
            for text in texts:
                ids = sorted({vocab.setdefault(w, len(vocab)) for w in word_set(text)})
                counts.append(len(ids))
                flat.extend(ids)
        doc_ids = np.concatenate(docs) if docs else np.zeros(0, np.int64)
        lengths = np.frombuffer(counts, np.int64) if len(counts) else np.zeros(0, np.int64)
        order = np.argsort(doc_ids, kind="stable")
        starts = np.concatenate([np.zeros(1, np.int64), np.cumsum(lengths)])[:-1]
        words = np.frombuffer(flat, np.int32) if len(flat) else np.zeros(0, np.int32)
        self.doc_ids = doc_ids[order]
        self.lengths = lengths[order]
        self.starts = starts[order]
        self.words = words
        self.vocabulary = len(vocab)

    def _rows(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of each doc's word ids; length 0 for unknown docs."""
        pos = np.searchsorted(self.doc_ids, docs)
        pos = np.minimum(pos, max(len(self.doc_ids) - 1, 0))
        known = (self.doc_ids[pos] == docs) if len(self.doc_ids) else np.zeros(len(docs), bool)
        return self.starts[pos] * known, self.lengths[pos] * known

    def _keys(self, docs: np.ndarray) -> np.ndarray:
        """pair index * vocabulary + word id of every word of each doc."""
        start, length = self._rows(docs)
        total = int(length.sum())
        pair = np.repeat(np.arange(len(docs), dtype=np.int64), length)
        offset = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(length) - length, length)
        return pair * max(self.vocabulary, 1) + self.words[np.repeat(start, length) + offset]

    def same(self, a: np.ndarray, b: np.ndarray, min_jaccard: float) -> np.ndarray:
        """`same_words` of the word sets of each pair (a[i], b[i]) of doc ids, as a bool mask."""
        if not len(a):
            return np.zeros(0, bool)
        la, lb = self._rows(a)[1], self._rows(b)[1]
        keys = np.sort(np.concatenate([self._keys(a), self._keys(b)]))
        dup = keys[1:][keys[1:] == keys[:-1]]  # each word both sets hold, once (sets)
        shared = np.bincount(dup // max(self.vocabulary, 1), minlength=len(a))
        union = la + lb - shared
        same = (shared == la) & (shared == lb)
        ratio = shared / np.maximum(union, 1)
        return same | ((shared >= MIN_SHARED_WORDS) & (ratio >= min_jaccard))
