"""Tiny end-to-end runs: train, save atomically, load with transformers, predict, evaluate."""

from __future__ import annotations

import json

import pytest
from transformers import (
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    pipeline,
)

from indexer.errors import InputError
from indexer.heads.data import read_head_data
from indexer.heads.evaluate import evaluate_head
from indexer.heads.predict import Predictor, load_head
from indexer.heads.receipt import RECEIPT, summary
from indexer.heads.train import TrainSettings, train_head


@pytest.fixture(scope="module")
def classifier_run(tiny_bert, classifier_items, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cls")
    items = [{"text": t, "label": y} for t, y in classifier_items]
    path = tmp / "c.json"
    path.write_text(
        json.dumps(
            {
                "label_names": ["neg", "pos"],
                "train": items,
                "validation": items[::2],
                "test": items[1::2],
            }
        )
    )
    data = read_head_data("classifier", path, fmt="splits")
    out = tmp / "head"
    receipt = train_head(data, TrainSettings("classifier", tiny_bert, out, epochs=1, batch_size=4))
    return data, out, receipt


def test_classifier_dir_loads_as_standard_transformers(classifier_run):
    _, out, _ = classifier_run
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.id2label == {0: "neg", 1: "pos"}
    assert model.config.label2id == {"neg": 0, "pos": 1}
    result = pipeline("text-classification", model=str(out))(["a good movie"])
    assert result[0]["label"] in {"neg", "pos"} and 0 <= result[0]["score"] <= 1
    assert (
        sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".")) == []
    )  # no temp left


def test_classifier_receipt_fields(classifier_run, tiny_bert):
    _, out, receipt = classifier_run
    on_disk = json.loads((out / RECEIPT).read_text())
    assert on_disk == json.loads(json.dumps(receipt))
    assert receipt["label_names"] == ["neg", "pos"] and receipt["metric"] == "macro_f1"
    assert [e["epoch"] for e in receipt["epochs"]] == [1]
    assert {"train_loss", "validation", "seconds"} <= set(receipt["epochs"][0])
    assert receipt["best_epoch"] == 1
    assert receipt["test"]["macro_f1"] >= 0 and "per_class" in receipt["test"]
    assert (
        receipt["baseline"]["name"].startswith("tfidf") and receipt["baseline"]["test"] is not None
    )
    assert receipt["base_model"]["path"] == str(tiny_bert)
    assert len(receipt["base_model"]["weights_sha256"]["model.safetensors"]) == 64
    assert receipt["recipe"]["lr"] == 2e-5 and receipt["recipe"]["grad_clip"] == 1.0
    assert receipt["training_seconds"] > 0 and receipt["examples_per_second"] > 0
    assert {"torch", "transformers", "python"} <= set(receipt["versions"])
    assert set(summary(receipt)) >= {"best_epoch", "validation", "test", "baseline"}


def test_predict_and_evaluate_classifier(classifier_run):
    data, out, receipt = classifier_run
    head = load_head(out)
    assert head.kind.name == "classifier"
    preds = head.predict(["a good movie", "awful film", "x"])
    assert len(preds) == 3 and all(p.label in ("neg", "pos") and 0.5 <= p.score <= 1 for p in preds)
    scores = evaluate_head(out, data, "test")
    assert scores["macro_f1"] == pytest.approx(receipt["test"]["macro_f1"])
    assert set(scores["per_class"]) == {"neg", "pos"}


def test_ner_end_to_end(tiny_bert, ner_conll, tmp_path):
    train, dev = ner_conll
    data = read_head_data("ner", train, validation=dev, test=dev)
    out = tmp_path / "ner"
    receipt = train_head(
        data, TrainSettings("ner", tiny_bert, out, epochs=1, batch_size=2, lr=5e-3)
    )
    assert receipt["metric"] == "entity_f1" and receipt["baseline"] is None
    counts = receipt["entity_counts"]["test"]
    assert counts["gold"] == 6 and counts["by_type"]["PER"]["gold"] == 2  # dev = items 0, 2, 4
    assert counts["predicted"] == receipt["test"]["predicted_entities"]
    model = AutoModelForTokenClassification.from_pretrained(out)
    assert model.config.id2label[0] == "O"
    pipeline("token-classification", model=str(out), aggregation_strategy="first")(
        "john lives in paris"
    )
    tagger = load_head(out)
    assert tagger.kind.name == "ner"
    text = "John Smith lives in unbelievables Paris"
    for entity in tagger.predict([text])[0]:
        assert text[entity.start : entity.end] == entity.text
        assert entity.start == 0 or text[entity.start - 1] == " "  # whole words only
        assert entity.end == len(text) or text[entity.end] == " "
    assert evaluate_head(out, data, "test")["entity_f1"] == pytest.approx(
        receipt["test"]["entity_f1"]
    )


def test_entity_spans_merge_subwords(tiny_bert, tmp_path):
    """Force a tagger whose head always says B-MISC on pieces: a word split in four is one span."""
    import torch
    from transformers import AutoTokenizer

    from indexer.heads.registry import head_type

    names = ["O", "B-MISC", "I-MISC"]
    model = AutoModelForTokenClassification.from_pretrained(
        tiny_bert,
        num_labels=3,
        id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)},
    )
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 5.0, 0.0]))  # every token: B-MISC
    tagger = Predictor(head_type("ner"), model.eval(), AutoTokenizer.from_pretrained(tiny_bert))
    text = "john unbelievables"
    spans = tagger.predict([text])[0]
    assert [(e.type, e.start, e.end, e.text) for e in spans] == [
        ("MISC", 0, 4, "john"),
        ("MISC", 5, 18, "unbelievables"),
    ]


def test_head_only_trains_head_and_keeps_backbone(tiny_bert, classifier_run, tmp_path):
    data, _, _ = classifier_run
    out = tmp_path / "head-only"
    receipt = train_head(
        data, TrainSettings("classifier", tiny_bert, out, epochs=2, batch_size=4, head_only=True)
    )
    assert receipt["recipe"]["head_only"] and receipt["recipe"]["lr"] == 1e-3
    import torch
    from safetensors.torch import load_file

    base = load_file(tiny_bert / "model.safetensors")
    trained = load_file(out / "model.safetensors")
    key = "encoder.layer.0.attention.self.query.weight"
    assert torch.equal(base[key], trained["bert." + key])
    AutoModelForSequenceClassification.from_pretrained(out)


def test_out_dir_guard_and_interrupted_save(tiny_bert, classifier_run, tmp_path, monkeypatch):
    data, _, _ = classifier_run
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not an earlier head"):
        train_head(data, TrainSettings("classifier", tiny_bert, busy, epochs=1))
    from transformers import PreTrainedTokenizerFast

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(PreTrainedTokenizerFast, "save_pretrained", interrupt)
    out = tmp_path / "never"
    with pytest.raises(KeyboardInterrupt):
        train_head(data, TrainSettings("classifier", tiny_bert, out, epochs=1, batch_size=4))
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["busy"]  # no half-written temp folder


def test_probe_epochs_fit_the_head_before_the_full_fine_tune(tiny_bert, classifier_run, tmp_path):
    """LP-FT: the full stage starts from the probed head (at lr ~0 it scores what the probe
    scored), the best epoch is picked among the fine-tuning epochs, the backbone then moves."""
    data, _, _ = classifier_run
    settings = TrainSettings(
        "classifier",
        tiny_bert,
        tmp_path / "still",
        epochs=1,
        batch_size=4,
        probe_epochs=2,
        lr=1e-12,
    )
    receipt = train_head(data, settings)
    stages = [(e.get("stage"), e["epoch"]) for e in receipt["epochs"]]
    assert stages == [("probe", 1), ("probe", 2), (None, 1)]
    probe_score = receipt["epochs"][1]["validation"]["macro_f1"]
    assert receipt["epochs"][2]["validation"]["macro_f1"] == pytest.approx(probe_score, abs=1e-9)
    assert receipt["best_epoch"] == 1 and receipt["recipe"]["probe_epochs"] == 2
    assert receipt["feature_seconds"] is not None

    import torch
    from safetensors.torch import load_file

    moved = train_head(
        data,
        TrainSettings(
            "classifier", tiny_bert, tmp_path / "moved", epochs=1, batch_size=4, probe_epochs=1
        ),
    )
    assert moved["recipe"]["lr"] == 2e-5 and moved["recipe"]["probe_lr"] == 1e-3
    key = "encoder.layer.0.attention.self.query.weight"
    base = load_file(tiny_bert / "model.safetensors")[key]
    assert not torch.equal(base, load_file(tmp_path / "moved" / "model.safetensors")["bert." + key])
    with pytest.raises(InputError, match="--probe-epochs"):
        TrainSettings("classifier", tiny_bert, tmp_path / "x", head_only=True, probe_epochs=1)


def test_probe_epochs_for_a_tagger(tiny_bert, ner_conll, tmp_path):
    """LP-FT on a token head: the probe trains the classifier on first-subword states, the
    full stage starts from it (at lr ~0 it scores what the probe scored)."""
    train, dev = ner_conll
    data = read_head_data("ner", train, validation=dev)
    receipt = train_head(
        data,
        TrainSettings(
            "ner", tiny_bert, tmp_path / "ner", epochs=1, batch_size=2, probe_epochs=2, lr=1e-12
        ),
    )
    assert [e.get("stage") for e in receipt["epochs"]] == ["probe", "probe", None]
    first, probe, full = receipt["epochs"]
    assert probe["train_loss"] < first["train_loss"]  # the probe learns
    assert full["validation"]["entity_f1"] == pytest.approx(
        probe["validation"]["entity_f1"], abs=1e-9
    )
    assert full["train_loss"] < first["train_loss"]  # and the full stage starts where it ended
    AutoModelForTokenClassification.from_pretrained(tmp_path / "ner")


def test_batch_size_defaults(tiny_bert, tmp_path):
    """A fixed --epochs keeps the seeds' 32 / 8; auto epochs choose by data size."""
    from indexer.heads.features import Encoded

    def encoded(n: int) -> dict:
        return {"train": Encoded([str(i) for i in range(n)], [[2, 3]] * n, [0] * n)}

    fixed = TrainSettings("classifier", tiny_bert, tmp_path, epochs=2)
    assert fixed.resolve(encoded(3000))[0].batch_size == 32
    assert (
        TrainSettings("ner", tiny_bert, tmp_path, epochs=2).resolve(encoded(3000))[0].batch_size
        == 8
    )
    auto = TrainSettings("classifier", tiny_bert, tmp_path)
    assert [auto.resolve(encoded(n))[0].batch_size for n in (100, 3000, 5000, 12000)] == [
        8,
        8,
        16,
        32,
    ]
    assert TrainSettings("ner", tiny_bert, tmp_path).resolve(encoded(14041))[0].batch_size == 8
    given = TrainSettings("ner", tiny_bert, tmp_path, batch_size=16).resolve(encoded(10))
    assert given[0].batch_size == 16 and given[1]["batch_size"] == "given"
