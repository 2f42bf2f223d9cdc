"""Window arithmetic for long documents, by hand."""

from indexer.ingest.chunking import make_windows, window_spans


def test_short_text_is_one_window():
    assert window_spans(5, room=8, stride=2, mode="chunk") == [(0, 5)]


def test_windows_overlap_by_stride_and_cover_the_end():
    assert window_spans(20, room=8, stride=2, mode="chunk") == [(0, 8), (6, 14), (12, 20)]
    assert window_spans(15, room=8, stride=2, mode="chunk") == [(0, 8), (6, 14), (12, 15)]


def test_truncate_keeps_the_first_window_only():
    assert window_spans(20, room=8, stride=2, mode="truncate") == [(0, 8)]


def test_make_windows_wraps_and_maps_characters():
    text = "aa bb cc dd ee"
    ids = [10, 11, 12, 13, 14]
    offsets = [(0, 2), (3, 5), (6, 8), (9, 11), (12, 14)]
    windows = make_windows(
        ids, offsets, len(text), cls_id=1, sep_id=2, max_length=5, stride=1, mode="chunk"
    )
    assert [w.ids for w in windows] == [[1, 10, 11, 12, 2], [1, 12, 13, 14, 2]]
    assert [text[w.start_char : w.end_char] for w in windows] == ["aa bb cc", "cc dd ee"]
