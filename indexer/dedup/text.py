"""The cheap text check of a candidate pair: words of a tweet-like text once the parts that
copy-paste waves change are gone (a leading `RT @user:`, URLs, @mentions, hashtags, case,
punctuation, emoji), and the Jaccard overlap of two such word sets."""

from __future__ import annotations

import re

_RETWEET = re.compile(r"^\s*rt\s+@\w+\s*:?\s*", re.IGNORECASE)
_URL = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)
_TAG = re.compile(r"[@#]\w+")
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
