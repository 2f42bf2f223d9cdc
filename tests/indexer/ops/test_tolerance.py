"""The "same store" tolerance rules (`indexer.ops.tolerance`): each rule accepts the differences
kernels make (last digits, near-ties) and refuses the ones a bug makes (a wrong vector, a swap
of clearly ordered hits, a label flipped where the margin is clear, a shifted span)."""

from __future__ import annotations

import numpy as np

from indexer.ops.tolerance import (
    FP32,
    HALF,
    cosines,
    far_vectors,
    for_dtype,
    same_entities,
    same_labels,
    same_ranking,
)


def test_the_dtype_picks_the_rule():
    assert for_dtype("fp32") is FP32 and for_dtype("bf16") is HALF and for_dtype("auto") is HALF
    # a score tolerance covers what its vector tolerance allows on unit vectors
    for tol in (FP32, HALF):
        assert tol.score_atol >= np.sqrt(2 * (1 - tol.min_cosine)) - 1e-12


def test_vectors_by_cosine():
    rng = np.random.default_rng(0)
    v = rng.standard_normal((50, 384)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    bf16_like = v + rng.standard_normal(v.shape).astype(np.float32) * 1e-3  # last-digit noise
    mine = {("c", str(i), 0): v[i] for i in range(50)}
    near = {k: bf16_like[i] for i, k in enumerate(mine)}
    assert far_vectors(mine, near, HALF) == []
    assert len(far_vectors(mine, near, FP32)) > 0  # fp32 promises more than bf16 noise
    wrong = dict(near)
    wrong[("c", "7", 0)] = v[8]  # another text's vector
    assert far_vectors(mine, wrong, HALF) == [("c", "7", 0)]
    assert cosines(np.zeros((1, 3)), np.zeros((1, 3))).tolist() == [1.0]


def test_rankings_allow_only_near_tie_swaps():
    ref = [("a", 0.90), ("b", 0.80), ("c", 0.7990), ("d", 0.60)]
    assert same_ranking(ref, ref, FP32) == []
    swapped = [("a", 0.90), ("c", 0.7991), ("b", 0.7999), ("d", 0.60)]  # b and c tied
    assert same_ranking(swapped, ref, FP32) == []
    clear = [("b", 0.80), ("a", 0.90), ("c", 0.7990), ("d", 0.60)]  # a above b by 0.1
    assert same_ranking(clear, ref, FP32) != []
    cut = [("a", 0.90), ("b", 0.80), ("c", 0.7990), ("e", 0.5999)]  # e tied with d at the cut
    assert same_ranking(cut, ref, FP32) == []
    lost = [("a", 0.90), ("b", 0.80), ("c", 0.7990), ("e", 0.30)]
    assert same_ranking(lost, ref, FP32) != []
    assert same_ranking(ref[:3], ref, FP32) == ["3 hits against 4"]


def test_labels_exact_where_the_margin_is_clear():
    ref = [("d1", "clf", "pos", 0.90, 0.10), ("d2", "clf", "neg", 0.5003, 0.4997)]
    kernel = [("d1", "clf", "pos", 0.90001, 0.09999), ("d2", "clf", "pos", 0.5001, 0.4999)]
    assert same_labels(kernel, ref, FP32) == []  # d2's margin 0.0006 is a near-tie
    flipped = [("d1", "clf", "neg", 0.55, 0.45), ref[1]]
    assert same_labels(flipped, ref, FP32) != []
    assert same_labels(ref[:1], ref, FP32) != []  # a missing row
    far = [("d1", "clf", "pos", 0.80, 0.20), ref[1]]
    assert same_labels(far, ref, FP32) != []


def test_entities_spans_exact_scores_near():
    ref = [("d1", "ner", "PER", 0, 5, "Alice", 0.7)] + [
        ("d%d" % i, "ner", "LOC", 0, 4, "Rome", 0.6) for i in range(2, 200)
    ]
    near = [r[:-1] + (r[-1] + 1e-4,) for r in ref]
    assert same_entities(near, ref, FP32) == []
    assert same_entities(near[1:], ref, FP32) == []  # one near-tie span of 199: within 1 %
    shifted = [r[:3] + (r[3] + 1, r[4] + 1) + r[5:] for r in ref]
    assert same_entities(shifted, ref, FP32) != []
    rescored = [r[:-1] + (r[-1] + 0.1,) for r in ref]
    assert same_entities(rescored, ref, FP32) != []
