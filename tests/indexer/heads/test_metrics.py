"""Entity-F1 and macro-F1: hand cases, then equality with seqeval and sklearn."""

from __future__ import annotations

import random

import pytest

from indexer.heads.metrics import entity_f1, macro_f1


def test_entity_f1_hand_case():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O", "O"]]
    # gold: PER(0-2) LOC(3) ORG(0-2); pred: PER(0-2) ORG(3) ORG(0-1) -> 1 hit of 3 and 3
    s = entity_f1(gold, pred)
    assert s["gold_entities"] == 3 and s["predicted_entities"] == 3
    assert s["precision"] == pytest.approx(1 / 3)
    assert s["recall"] == pytest.approx(1 / 3)
    assert s["entity_f1"] == pytest.approx(1 / 3)
    assert s["per_type"]["PER"] == {
        "precision": 1.0,
        "recall": 1.0,
        "f1": 1.0,
        "support": 1,
        "predicted": 1,
    }
    assert s["per_type"]["LOC"]["support"] == 1 and s["per_type"]["LOC"]["predicted"] == 0
    assert s["per_type"]["ORG"]["predicted"] == 2 and s["per_type"]["ORG"]["f1"] == 0.0


def test_boundary_and_type_must_both_match():
    assert entity_f1([["B-PER", "I-PER"]], [["B-PER", "O"]])["entity_f1"] == 0.0
    assert entity_f1([["B-PER", "I-PER"]], [["B-LOC", "I-LOC"]])["entity_f1"] == 0.0
    assert entity_f1([["B-PER", "I-PER"]], [["I-PER", "I-PER"]])["entity_f1"] == 1.0  # conlleval
    assert entity_f1([["O"]], [["O"]])["entity_f1"] == 0.0


def _random_tags(rng: random.Random, n: int) -> list[str]:
    return [
        rng.choice(["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"]) for _ in range(n)
    ]


def test_equals_seqeval_default():
    seqeval = pytest.importorskip("seqeval.metrics", reason="pip install -e '.[dev]' for seqeval")
    rng = random.Random(7)
    for _ in range(50):
        lengths = [rng.randint(1, 12) for _ in range(rng.randint(1, 8))]
        gold = [_random_tags(rng, n) for n in lengths]
        pred = [
            _random_tags(rng, n) if rng.random() < 0.5 else list(g) for g, n in zip(gold, lengths)
        ]
        ours = entity_f1(gold, pred)
        assert ours["entity_f1"] == pytest.approx(seqeval.f1_score(gold, pred))
        assert ours["precision"] == pytest.approx(seqeval.precision_score(gold, pred))
        assert ours["recall"] == pytest.approx(seqeval.recall_score(gold, pred))
        report = seqeval.classification_report(gold, pred, output_dict=True, zero_division=0)
        for kind, row in ours["per_type"].items():
            if row["support"]:
                assert row["f1"] == pytest.approx(report[kind]["f1-score"])
                assert row["support"] == report[kind]["support"]


def test_macro_f1_by_hand_and_sklearn():
    gold = [0, 0, 1, 1, 1, 2]
    pred = [0, 1, 1, 1, 0, 0]
    s = macro_f1(gold, pred, ["a", "b", "c"])
    # a: p 1/3 r 1/2 f 0.4; b: p 2/3 r 2/3 f 2/3; c: 0
    assert s["per_class"]["a"]["f1"] == pytest.approx(0.4)
    assert s["per_class"]["b"]["f1"] == pytest.approx(2 / 3)
    assert s["per_class"]["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert s["macro_f1"] == pytest.approx((0.4 + 2 / 3) / 3)
    from sklearn.metrics import f1_score

    rng = random.Random(3)
    for _ in range(20):
        g = [rng.randrange(3) for _ in range(30)]
        p = [rng.randrange(3) for _ in range(30)]
        assert macro_f1(g, p, ["x", "y", "z"])["macro_f1"] == pytest.approx(
            f1_score(g, p, average="macro")
        )
