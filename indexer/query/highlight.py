"""Where a query's words occur in a result's text: character spans for the search page to
mark. Words match after lower-casing and a light suffix strip (`parsing` finds `parse`,
`arguments` finds `argument`); stop words are never marked. Pure functions, no I/O.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+", re.UNICODE)  # `parse_args` is two words
_SUFFIXES = ("ing", "ers", "er", "ed", "es", "s")
STOP_WORDS = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
    )
)


def stem(word: str) -> str:
    """A crude stem: lower-case, one common English suffix cut from words of 5+ letters,
    then a final `e` from words of 4+ (`parse`, `parser`, `parsing` -> `pars`)."""
    word = word.lower()
    if len(word) >= 5:
        for suffix in _SUFFIXES:
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)]
                break
    if len(word) >= 4 and word.endswith("e"):
        word = word[:-1]
    return word


def query_stems(query: str) -> set[str]:
    """The stems of the query's words, stop words and one-letter words left out."""
    return {stem(w) for w in _WORD.findall(query) if len(w) > 1 and w.lower() not in STOP_WORDS}


def highlight_spans(text: str, query: str, limit: int = 200) -> list[tuple[int, int]]:
    """(start, end) character spans of `text` whose words are words of `query`.

    Args:
        text: the text shown (e.g. a hit's matching window).
        query: the query as typed.
        limit: at most this many spans, first ones first.
    Returns:
        Non-overlapping spans in text order.
    """
    wanted = query_stems(query)
    if not wanted:
        return []
    spans = []
    for match in _WORD.finditer(text):
        if stem(match.group()) in wanted:
            spans.append((match.start(), match.end()))
            if len(spans) >= limit:
                break
    return spans


def excerpt(text: str, query: str, limit: int = 1500) -> tuple[str, list[tuple[int, int]]]:
    """At most `limit` characters of `text` from just before its first query word, and the
    spans of query words in that excerpt (a keyword-only hit's window is its whole text).

    Returns:
        (excerpt, spans relative to the excerpt).
    """
    if len(text) <= limit:
        return text, highlight_spans(text, query)
    first = highlight_spans(text, query, limit=1)
    start = max(0, min(first[0][0] - 200, len(text) - limit)) if first else 0
    if start:
        space = text.find(" ", start)
        start = space + 1 if 0 <= space < start + 40 else start
    part = text[start : start + limit]
    return part, highlight_spans(part, query)
