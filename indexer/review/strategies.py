"""Selection strategies: which candidates a person should label next, as an order over
arrays of a head's scores. Pure numpy; `bertindex review export` and
`benchmarks/active_learning.py` run the same functions. Does not read the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import get_args

import numpy as np

from indexer.core.choices import ReviewStrategy
from indexer.errors import InputError

STRATEGIES = get_args(ReviewStrategy)


def uncertain_order(top: np.ndarray) -> np.ndarray:
    """Lowest top-class probability first.

    Args:
        top: (n,) probability of each candidate's predicted label.
    Returns:
        (n,) positions into `top`, least sure first (ties keep input order).
    """
    return np.argsort(np.asarray(top, dtype=np.float64), kind="stable")


def margins(top: np.ndarray, runner_up: np.ndarray | None) -> np.ndarray:
    """Top minus second probability; an unknown runner-up (NaN, or None for all) counts as
    `1 - top`, exact for two labels and the smallest margin possible otherwise.

    Args:
        top: (n,) top-class probabilities.
        runner_up: (n,) second-highest probabilities, NaN where unknown; or None.
    Returns:
        (n,) float64 margins in [0, 1].
    """
    top = np.asarray(top, dtype=np.float64)
    second = np.full_like(top, np.nan) if runner_up is None else np.asarray(runner_up, np.float64)
    second = np.where(np.isnan(second), 1.0 - top, second)
    return top - second


def margin_order(top: np.ndarray, runner_up: np.ndarray | None) -> np.ndarray:
    """Smallest gap between the top two labels first (see `margins`)."""
    return np.argsort(margins(top, runner_up), kind="stable")


def disagree_order(
    labels: Sequence | np.ndarray,
    other_labels: Sequence | np.ndarray,
    top: np.ndarray,
    other_top: np.ndarray,
) -> np.ndarray:
    """Candidates whose two heads give different labels, the least sure pair first (lowest
    mean of the two top-class probabilities); agreeing candidates are left out.

    Args:
        labels, other_labels: (n,) label of each candidate by head one and head two.
        top, other_top: (n,) their top-class probabilities.
    Returns:
        Positions of the disagreeing candidates, in order.
    """
    differ = np.flatnonzero(
        np.asarray(labels, dtype=object) != np.asarray(other_labels, dtype=object)
    )
    mean = (np.asarray(top, np.float64)[differ] + np.asarray(other_top, np.float64)[differ]) / 2
    return differ[np.argsort(mean, kind="stable")]


def random_order(n: int, seed: int) -> np.ndarray:
    """A seeded permutation of `n` positions."""
    return np.random.default_rng(seed).permutation(n)


def collapse_groups(doc_ids: Sequence[int], groups: Mapping[int, int]) -> list[int]:
    """Keep the first document of each near-duplicate group, in the given order.

    Args:
        doc_ids: candidates, best first.
        groups: doc id -> group id for grouped documents (an ungrouped id is its own group),
            e.g. what `store.dedup.groups_of` returns.
    Returns:
        `doc_ids` with every later member of an already seen group dropped.
    """
    seen: set = set()
    out = []
    for doc in doc_ids:
        key = ("group", groups[doc]) if doc in groups else ("doc", doc)
        if key in seen:
            continue
        seen.add(key)
        out.append(doc)
    return out


def check_strategy(name: str) -> None:
    """Raise InputError naming the valid strategies for an unknown one."""
    if name not in STRATEGIES:
        raise InputError(f"unknown review strategy '{name}'; choose one of {', '.join(STRATEGIES)}")
