"""When two stores built from the same input count as the same: the one set of tolerance rules
for every "same store" comparison (`consistency.StoreContents.differences`, the crash-safety,
reindex, Dask and cluster checks in the tests, `benchmarks/crash_recovery.py`).

Why not bit-equality. Matrix kernels sum in an order that depends on the batch's shape on some
CPUs (oneDNN with AMX on Intel Sapphire Rapids; the fp32 GEMMs too), and bf16 rounds every
product to 8 bits of mantissa. Two runs that batch the same texts differently (a run killed and
resumed, a Dask worker's partition against the local runner's batch, a shard against the whole)
therefore give vectors and scores that differ in their last digits: measured on Sapphire
Rapids, fp32 classifier probabilities by 1e-5 and bf16 document vectors by up to 1.2e-3 per
component (cosine 0.99997). Bit-equality is still promised, and tested, where the code promises
it: the same batches in the same process (tests/indexer/encode/test_pooling.py,
tests/indexer/encode/test_encoder.py).

The rules (a `Tolerance` per encoder dtype, `for_dtype`):

- vectors: the same key in both stores, cosine >= `min_cosine`;
- scores (search scores, probabilities, entity scores): absolute difference <= `score_atol`.
  For unit vectors |q.a - q.b| <= ||a - b|| = sqrt(2 (1 - cos)), so the score tolerance of a
  dtype is at least what its vector tolerance allows;
- rankings: the same hits in the same order, except that hits whose scores lie within
  `score_atol` of each other may swap, and a hit at the cut-off may be replaced by another
  within `score_atol` of it (`same_ranking`);
- labels: exactly equal wherever the reference's margin (probability minus runner-up) exceeds
  2 x `score_atol`; within that margin either label is accepted (`same_labels`);
- entities: spans, types and texts are compared exactly; scores within `score_atol`. A tag
  decided by a near-tie may add or drop a span, so at most `entity_slack` of the reference's
  entities may be unmatched (`same_entities`).

Everything that is not a floating-point result (ids, hashes, metadata, chunk spans, counts,
data versions, the FAISS id set `bertindex doctor` checks) is compared exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    """How far two runs' floating-point results may differ and still be the same.

    Attributes:
        min_cosine: two vectors of one key are the same at this cosine or above.
        score_atol: two scores are the same within this absolute difference.
        entity_slack: the share of the reference's entities that may be unmatched.
    """

    min_cosine: float
    score_atol: float
    entity_slack: float = 0.01


# fp32: batch-shape differences are ~1e-6 relative; a wrong vector has cosine far below 0.9999
FP32 = Tolerance(min_cosine=1 - 1e-5, score_atol=5e-3)
# bf16 / fp16: 8 (10) bits of mantissa; measured min cosine 0.99997 across batch shapes
HALF = Tolerance(min_cosine=1 - 5e-4, score_atol=math.sqrt(2 * 5e-4))


def for_dtype(dtype: str | None) -> Tolerance:
    """The tolerance for an encoder dtype (`fp32`, `bf16`, `fp16`; `auto` and None: the looser)."""
    return FP32 if dtype in ("fp32", "float32") else HALF


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (n, dim) arrays (a zero row has cosine 1 with a zero row only)."""
    a = np.asarray(a, np.float64).reshape(len(a), -1)
    b = np.asarray(b, np.float64).reshape(len(b), -1)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    both_zero = (na == 0) & (nb == 0)
    out = (a * b).sum(axis=1) / np.maximum(na * nb, 1e-30)
    return np.where(both_zero, 1.0, out)


def far_vectors(mine: dict, theirs: dict, tol: Tolerance) -> list:
    """Keys present in both whose vectors are further apart than `tol.min_cosine`."""
    keys = sorted(set(mine) & set(theirs), key=repr)
    if not keys:
        return []
    cos = cosines(np.stack([mine[k] for k in keys]), np.stack([theirs[k] for k in keys]))
    return [k for k, c in zip(keys, cos.tolist()) if c < tol.min_cosine]


def same_ranking(
    got: Sequence[tuple[object, float]], ref: Sequence[tuple[object, float]], tol: Tolerance
) -> list[str]:
    """Differences between two ranked hit lists of (id, score), best first (empty: the same).

    Scores compare rank by rank within `score_atol`; a hit may sit at another rank only among
    hits tied within `score_atol`; a hit in one list only must be within `score_atol` of the
    other list's last score (a near-tie at the cut-off).
    """
    out: list[str] = []
    if len(got) != len(ref):
        return [f"{len(got)} hits against {len(ref)}"]
    got_score = dict(got)
    ref_score = dict(ref)
    for rank, ((gid, gs), (rid, rs)) in enumerate(zip(got, ref)):
        if abs(gs - rs) > tol.score_atol:
            out.append(f"rank {rank + 1}: score {gs:.6f} against {rs:.6f}")
        if gid == rid:
            continue
        for hid, scores, other in ((gid, got_score, ref_score), (rid, ref_score, got_score)):
            if hid in other:
                if abs(scores[hid] - other[hid]) > tol.score_atol:
                    out.append(f"{hid!r}: score {scores[hid]:.6f} against {other[hid]:.6f}")
            elif ref and abs(scores[hid] - ref[-1][1]) > tol.score_atol:
                out.append(
                    f"{hid!r} (score {scores[hid]:.6f}) is in one list only and not "
                    f"tied with the cut-off {ref[-1][1]:.6f}"
                )
    return out


def same_labels(got: Iterable[tuple], ref: Iterable[tuple], tol: Tolerance) -> list[str]:
    """Differences between classifier annotations (empty: the same).

    Rows are (key..., label, probability, runner_up): the key identifies a document and head.
    Labels must be equal where the reference's margin exceeds 2 x `score_atol`; probabilities of
    equal labels within `score_atol`.
    """
    mine = {row[:-3]: row[-3:] for row in got}
    theirs = {row[:-3]: row[-3:] for row in ref}
    out: list[str] = []
    if set(mine) != set(theirs):
        out.append(
            f"labels: {len(set(mine) - set(theirs))} keys only here, "
            f"{len(set(theirs) - set(mine))} only there"
        )
    for key in sorted(set(mine) & set(theirs), key=repr):
        (label, p, _), (rlabel, rp, rrunner) = mine[key], theirs[key]
        if label == rlabel:
            if abs(p - rp) > tol.score_atol:
                out.append(f"{key}: probability {p:.6f} against {rp:.6f}")
        elif rp - (rrunner or 0.0) > 2 * tol.score_atol:
            out.append(
                f"{key}: label {label!r} against {rlabel!r} "
                f"(margin {rp - (rrunner or 0.0):.6f} is clear)"
            )
    return out


def same_entities(got: Iterable[tuple], ref: Iterable[tuple], tol: Tolerance) -> list[str]:
    """Differences between entity rows (empty: the same).

    Rows are (key..., score): everything before the score (document, head, type, span, text) is
    compared exactly, scores within `score_atol`; at most `entity_slack` of the reference's
    entities (and of these) may be unmatched, for tags decided by near-ties.
    """
    mine = {row[:-1]: row[-1] for row in got}
    theirs = {row[:-1]: row[-1] for row in ref}
    out: list[str] = []
    unmatched = len(set(mine) ^ set(theirs))
    allowed = math.floor(tol.entity_slack * max(len(theirs), 1))
    if unmatched > allowed:
        out.append(
            f"entities: {len(set(mine) - set(theirs))} only here, "
            f"{len(set(theirs) - set(mine))} only there (at most {allowed} allowed)"
        )
    far = [k for k in set(mine) & set(theirs) if abs(mine[k] - theirs[k]) > tol.score_atol]
    if far:
        out.append(
            f"entities: {len(far)} scores differ beyond {tol.score_atol}, "
            f"e.g. {sorted(far, key=repr)[0]}"
        )
    return out
