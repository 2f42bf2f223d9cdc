"""Over-long refusal before training, and length-sorted batches that lose nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from transformers import AutoTokenizer

from indexer.errors import InputError
from indexer.heads.classifier.head_type import SentenceExample
from indexer.heads.data import read_head_data
from indexer.heads.features import collate, sorted_batches, training_batches
from indexer.heads.registry import head_type
from indexer.heads.tagger.head_type import TokenExample
from indexer.heads.train import TrainSettings, train_head


def _long_data(tmp_path):
    items = [
        {"text": "good " * n, "label": "pos", "id": f"t{n}"}
        for n in (2, 9, 12, 3, 20, 30, 40, 50, 60)
    ]
    doc = {"train": items, "validation": items[:2]}
    path = tmp_path / "long.json"
    path.write_text(json.dumps(doc))
    return read_head_data("classifier", path, fmt="splits")


def test_refusal_names_count_ids_lengths_and_ways_out(tiny_bert, tmp_path):
    data = _long_data(tmp_path)
    settings = TrainSettings("classifier", tiny_bert, tmp_path / "out", max_length=10, epochs=1)
    with pytest.raises(InputError) as err:
        train_head(data, settings)
    msg = str(err.value)
    # n words + [CLS] [SEP]: 7 of 9 train and 1 of 2 validation are over 10 tokens; five named
    assert msg.startswith("7 train + 1 validation example(s) are longer than --max-length 10")
    assert (
        "t9 (11 tokens), t12 (14 tokens), t20 (22 tokens), t30 (32 tokens), t40 (42 tokens) "
        "and 3 more"
    ) in msg
    assert "raise --max-length to at least 62 (at most 512)" in msg
    assert "split these inputs" in msg
    assert not (tmp_path / "out").exists()


def test_nothing_is_truncated(tiny_bert):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    enc = head_type("classifier").encode(tok, [SentenceExample("x", "good " * 600, 0)])
    assert enc.lengths.tolist() == [602]  # past the model's 512: kept whole, refused later


def test_training_batches_cover_every_index_once():
    rng = np.random.default_rng(0)
    lengths = np.arange(1000) % 37
    batches = training_batches(lengths, 16, rng)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(1000))
    # within a batch lengths are close (sorted pools): spread far below the global 36
    assert np.mean([lengths[b].max() - lengths[b].min() for b in batches]) < 3
    again = training_batches(lengths, 16, np.random.default_rng(0))
    assert all((a == b).all() for a, b in zip(batches, again))  # seeded
    ordered = sorted_batches(lengths, 100)
    assert sorted(np.concatenate(ordered).tolist()) == list(range(1000))


def test_collate_pads_labels_with_ignore(tiny_bert):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    enc = head_type("ner").encode(
        tok,
        [TokenExample("a", ("john",), (1,)), TokenExample("b", ("john", "unbelievables"), (1, 0))],
    )
    batch = collate(enc, [0, 1], pad_id=0)
    assert batch["labels"].tolist() == [
        [-100, 1, -100, -100, -100, -100, -100],
        [-100, 1, 0, -100, -100, -100, -100],
    ]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0, 0, 0], [1] * 7]
