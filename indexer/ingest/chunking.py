"""Long documents: cut token sequences into overlapping windows of at most `max_length` tokens.

A window is a chunk: it carries its own vector and the character span it covers. Truncation
is the one-window special case, chosen explicitly with `long_documents.mode: truncate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Window:
    ids: list[int]  # with [CLS] and [SEP]
    start_char: int
    end_char: int


def window_spans(n_tokens: int, room: int, stride: int, mode: str) -> list[tuple[int, int]]:
    """Token ranges [start, end) of each window over a sequence of `n_tokens` tokens.

    Args:
        n_tokens: tokens in the text (no special tokens).
        room: tokens per window (max_length minus [CLS] and [SEP]).
        stride: tokens shared by consecutive windows (chunk mode).
        mode: `chunk` (cover every token) or `truncate` (first window only).
    """
    if n_tokens <= room or mode == "truncate":
        return [(0, min(n_tokens, room))]
    step = room - stride
    spans = []
    start = 0
    while True:
        end = min(start + room, n_tokens)
        spans.append((start, end))
        if end == n_tokens:
            return spans
        start += step


def make_windows(
    token_ids: Sequence[int],
    offsets: Sequence[tuple[int, int]],
    text_len: int,
    cls_id: int,
    sep_id: int,
    max_length: int,
    stride: int,
    mode: str,
    prefix: Sequence[int] = (),
) -> list[Window]:
    """Windows of one text, each wrapped as [CLS] prefix … [SEP], with their character spans.

    `prefix`: token ids put before every window's text (the document prompt), in its room.
    """
    room = max_length - 2 - len(prefix)
    if room <= stride:
        raise ValueError(
            f"the document prompt takes {len(prefix)} of model.max_length "
            f"{max_length} tokens, leaving {room} for text, not more than "
            f"long_documents.stride {stride}; shorten model.document_prompt, lower "
            "the stride or raise model.max_length"
        )
    windows = []
    for start, end in window_spans(len(token_ids), room, stride, mode):
        if end > start:
            first, last = offsets[start][0], offsets[end - 1][1]
        else:  # text with no tokens at all
            first, last = 0, text_len
        windows.append(Window([cls_id, *prefix, *token_ids[start:end], sep_id], first, last))
    return windows
