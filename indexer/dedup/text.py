"""The cheap text check of a candidate pair: words of a tweet-like text once the parts that
copy-paste waves change are gone (a leading `RT @user:`, URLs, @mentions, hashtags, case,
punctuation, emoji), the Jaccard overlap of two such word sets, and the rule that decides."""

from __future__ import annotations

import re

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
