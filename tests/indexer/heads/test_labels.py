"""word_ids() alignment and BIO spans, checked by hand on the tiny tokenizer."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from indexer.heads.labels import (
    IGNORE_INDEX,
    align_labels,
    bio_spans,
    decode_bio,
    first_subword_positions,
    is_bio_tag,
    order_bio_labels,
)

X = IGNORE_INDEX


def test_align_labels_by_hand():
    # [CLS] w0 w1 w1 w1 w2 [SEP] [PAD]
    word_ids = [None, 0, 1, 1, 1, 2, None, None]
    assert align_labels(word_ids, [5, 3, 0]) == [X, 5, 3, X, X, 0, X, X]
    assert first_subword_positions(word_ids) == {0: 1, 1: 2, 2: 5}


def test_word_split_into_four_pieces(tiny_bert):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    words = ["John", "unbelievables", "lives"]
    enc = tok(words, is_split_into_words=True)
    pieces = tok.convert_ids_to_tokens(enc["input_ids"])
    assert pieces == ["[CLS]", "john", "un", "##believ", "##able", "##s", "lives", "[SEP]"]
    assert enc.word_ids() == [None, 0, 1, 1, 1, 1, 2, None]
    # B-PER=1, B-MISC=3, O=0: only the first piece of "unbelievables" keeps B-MISC
    assert align_labels(enc.word_ids(), [1, 3, 0]) == [X, 1, 3, X, X, X, 0, X]


def test_word_with_no_tokens_is_skipped():
    # word 1 produced no token (e.g. a lone control character)
    word_ids = [None, 0, 2, None]
    assert align_labels(word_ids, [4, 7, 0]) == [X, 4, 0, X]
    assert first_subword_positions(word_ids) == {0: 1, 2: 2}


def test_bio_spans_by_hand():
    tags = ["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "I-ORG", "B-MISC", "B-MISC", "I-MISC"]
    assert bio_spans(tags) == [
        ("PER", 0, 2),  # B I
        ("LOC", 3, 5),  # I after O opens a span (conlleval)
        ("LOC", 5, 6),  # B closes the previous span even of the same type
        ("ORG", 6, 7),  # I of another type opens a new span
        ("MISC", 7, 8),
        ("MISC", 8, 10),
    ]
    assert bio_spans(["O", "O"]) == []
    assert bio_spans(["I-PER"]) == [("PER", 0, 1)]


def test_bio_tag_checks_and_order():
    assert is_bio_tag("O") and is_bio_tag("B-PER") and is_bio_tag("I-MISC")
    assert not any(is_bio_tag(t) for t in ["B", "E-PER", "PER", "B_PER", "S-LOC"])
    assert order_bio_labels(["I-PER", "O", "B-LOC", "B-PER"]) == [
        "O",
        "B-LOC",
        "I-LOC",
        "B-PER",
        "I-PER",
    ]


def test_decode_bio_by_hand():
    import numpy as np

    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    probs = (
        np.array(
            [
                [0.60, 0.30, 0.05, 0.00, 0.05],  # argmax O
                [0.05, 0.05, 0.90, 0.00, 0.00],  # argmax I-PER: O -> I-PER is not BIO
                [0.10, 0.00, 0.00, 0.05, 0.85],  # argmax I-LOC after PER: not BIO either
            ]
        )
        + 1e-9
    )
    # best valid path B-PER I-PER O: log .30 + log .90 + log .10 = -3.61
    # (B-PER I-PER B-LOC: -5.30; O O O: -5.81; argmax O I-PER I-LOC is not BIO)
    assert decode_bio(np.log(probs), names) == [1, 2, 0]
    assert decode_bio(np.log(probs[:1]), names) == [0]
    assert decode_bio(np.zeros((0, 5)), names) == []
    valid = np.log(np.eye(5)[[1, 2, 0, 3, 4]] + 1e-6)  # already valid: kept as is
    assert decode_bio(valid, names) == [1, 2, 0, 3, 4]


def test_merge_subwords_and_word_spans_by_hand():
    from indexer.heads.labels import merge_subwords, word_spans

    text = "John Smithson lives"
    # [CLS] john smith ##son lives [SEP]
    word_ids = [None, 0, 1, 1, 2, None]
    offsets = [(0, 0), (0, 4), (5, 10), (10, 13), (14, 19), (0, 0)]
    words = merge_subwords(word_ids, offsets)
    assert words == [[0, 4, 1], [5, 13, 2], [14, 19, 4]]
    spans = word_spans(words, ["B-PER", "I-PER", "O"], [0.9, 0.7, 0.99], text)
    assert spans == [("PER", 0, 13, "John Smithson", pytest.approx(0.8))]
