"""Mean-pooled classifier heads: the head-only feature pass, `bertindex_pooling` in config.json,
and every bertindex loader (predict, evaluate, annotate) applying it; transformers' own
loaders still load the directory (and pool [CLS])."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline

from indexer.annotate.annotator import Annotator, load_heads
from indexer.errors import InputError
from indexer.heads.data import read_head_data
from indexer.heads.evaluate import evaluate_head
from indexer.heads.predict import load_head
from indexer.heads.registry import head_type
from indexer.heads.sentence import POOLING_KEY
from indexer.heads.train import TrainSettings, feature_encoder, train_head

TEXTS = ["a good movie", "john hates this awful awful film and mary loves it", "x", "not good"]


@pytest.fixture(scope="module")
def data(classifier_items, tmp_path_factory):
    items = [{"text": t, "label": lab} for t, lab in classifier_items]
    path = tmp_path_factory.mktemp("pool") / "c.json"
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
    return read_head_data("classifier", path, fmt="splits")


@pytest.fixture(scope="module")
def mean_head(tiny_bert, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("mean") / "head"
    receipt = train_head(
        data,
        TrainSettings(
            "classifier", tiny_bert, out, epochs=2, batch_size=4, head_only=True, lr=1e-2
        ),
    )
    return out, receipt


def _by_hand(model_dir, texts) -> np.ndarray:
    """Softmax of classifier(pooler(normalised mean of the token states)), one text at a time."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    full = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    out = []
    with torch.no_grad():
        for text in texts:
            hidden = full.bert(**tok([text], return_tensors="pt")).last_hidden_state[
                0
            ]  # (seq, hidden)
            mean = hidden.mean(0)
            vec = mean / mean.norm()
            pooled = torch.tanh(full.bert.pooler.dense(vec))
            out.append(torch.softmax(full.classifier(pooled), -1).numpy())
    return np.stack(out)


def test_head_only_defaults_to_mean_and_says_so(mean_head, tiny_bert):
    out, receipt = mean_head
    assert receipt["recipe"]["pooling"] == "mean" and receipt["recipe"]["head_only"]
    assert receipt["recipe"]["feature_pass"].startswith("index encoder")
    assert receipt["training_cpu_seconds"] > 0 and receipt["feature_seconds"] > 0
    assert json.loads((out / "config.json").read_text())[POOLING_KEY] == "mean"
    # still a standard directory; transformers pools [CLS], as the README says
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    got = pipeline("text-classification", model=model, tokenizer=tok, top_k=None)(TEXTS[:1])[0]
    with torch.no_grad():
        cls = torch.softmax(model(**tok(TEXTS[:1], return_tensors="pt")).logits, -1)[0]
    assert {r["label"]: r["score"] for r in got} == pytest.approx(
        {"neg": float(cls[0]), "pos": float(cls[1])}
    )


def test_predict_and_evaluate_apply_mean_pooling(mean_head, data):
    out, receipt = mean_head
    expected = _by_hand(out, TEXTS)
    preds = load_head(out).predict(TEXTS, batch_size=3)  # padded batches: the mask must count
    for p, row in zip(preds, expected):
        assert p.label == ["neg", "pos"][int(row.argmax())]
        assert p.score == pytest.approx(float(row.max()), abs=1e-5)
    assert evaluate_head(out, data, "test")["macro_f1"] == pytest.approx(
        receipt["test"]["macro_f1"]
    )


def test_annotate_applies_each_heads_pooling_in_one_backbone_pass(
    mean_head, tiny_bert, data, tmp_path
):
    out, _ = mean_head
    cls_out = tmp_path / "cls-head"
    train_head(
        data,
        TrainSettings(
            "classifier", tiny_bert, cls_out, epochs=1, batch_size=4, head_only=True, pooling="cls"
        ),
    )
    assert json.loads((cls_out / "config.json").read_text())[POOLING_KEY] == "cls"
    annotator = Annotator(
        load_heads([f"mean={out}", f"cls={cls_out}"]), dtype="fp32", device="cpu", batch_tokens=64
    )
    assert len(annotator.groups) == 1 and annotator.groups[0].split  # one shared backbone pass
    results = annotator.annotate(TEXTS)
    for name, head_dir in (("mean", out), ("cls", cls_out)):
        want = load_head(head_dir).predict(TEXTS)
        got = [next(lab for lab in r.labels if lab.head == name) for r in results]
        assert [g.label for g in got] == [w.label for w in want]
        assert [g.score for g in got] == pytest.approx([w.score for w in want], abs=1e-5)
    mean_probs = [r.labels[0].score for r in results]
    assert mean_probs == pytest.approx(_by_hand(out, TEXTS).max(1).tolist(), abs=1e-5)


def test_feature_pass_equals_unbatched_forward(tiny_bert, data):
    """The head-only features from the index encoder's batches (token budget, padding, no mask
    on full batches) equal a plain one-at-a-time forward."""
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    base = AutoModel.from_pretrained(tiny_bert).eval()
    encoded = head_type("classifier").encode(tok, data.splits["train"])
    settings = TrainSettings("classifier", tiny_bert, tiny_bert / "unused", head_only=True)
    feats = head_type("classifier").backbone_features(
        feature_encoder(settings, batch_tokens=64), encoded
    )
    with torch.no_grad():
        for ids, f in zip(encoded.input_ids, feats):
            hidden = base(torch.tensor([ids])).last_hidden_state[0]
            assert torch.allclose(
                f, torch.nn.functional.normalize(hidden.mean(0), dim=0), atol=1e-5
            )


def test_token_states_keep_the_asked_rows(tiny_bert):
    from indexer.heads.tagger.head_type import TokenExample

    tok = AutoTokenizer.from_pretrained(tiny_bert)
    base = AutoModel.from_pretrained(tiny_bert).eval()
    examples = [
        TokenExample("a", ("john", "unbelievables", "paris"), (1, 0, 3)),
        TokenExample("b", ("mary",), (1,)),
    ]
    encoded = head_type("ner").encode(tok, examples)
    settings = TrainSettings("ner", tiny_bert, tiny_bert / "unused", head_only=True)
    feats = head_type("ner").backbone_features(feature_encoder(settings), encoded)
    assert [f.shape[0] for f in feats] == [3, 1]  # one row per word (its first subword)
    with torch.no_grad():
        hidden = base(torch.tensor([encoded.input_ids[0]])).last_hidden_state[0]
    rows = [encoded.word_positions[0][w] for w in range(3)]
    assert rows == [1, 2, 6]  # "unbelievables" is four pieces: un ##believ ##able ##s
    assert torch.allclose(feats[0], hidden[rows], atol=1e-5)


def test_full_fine_tune_with_mean_pooling_scores_consistently(tiny_bert, data, tmp_path):
    out = tmp_path / "full-mean"
    receipt = train_head(
        data, TrainSettings("classifier", tiny_bert, out, epochs=1, batch_size=4, pooling="mean")
    )
    assert receipt["recipe"]["pooling"] == "mean" and not receipt["recipe"]["head_only"]
    assert evaluate_head(out, data, "test")["macro_f1"] == pytest.approx(
        receipt["test"]["macro_f1"]
    )
    probs = _by_hand(out, TEXTS)
    assert [p.score for p in load_head(out).predict(TEXTS)] == pytest.approx(
        probs.max(1).tolist(), abs=1e-5
    )


def test_mean_pooling_refused_for_ner(tiny_bert, tmp_path):
    with pytest.raises(InputError, match="--pooling mean is for classifiers"):
        TrainSettings("ner", tiny_bert, tmp_path / "o", pooling="mean")


def test_head_only_ner_trains_on_token_states(tiny_bert, ner_conll, tmp_path):
    train, dev = ner_conll
    data = read_head_data("ner", train, validation=dev, test=dev)
    out = tmp_path / "ner-head"
    receipt = train_head(
        data, TrainSettings("ner", tiny_bert, out, epochs=2, batch_size=2, lr=5e-2, head_only=True)
    )
    assert receipt["recipe"]["pooling"] is None and POOLING_KEY not in json.loads(
        (out / "config.json").read_text()
    )
    assert receipt["feature_seconds"] > 0
    assert evaluate_head(out, data, "test")["entity_f1"] == pytest.approx(
        receipt["test"]["entity_f1"]
    )


def test_cli_pooling_option(tiny_bert, classifier_json, tmp_path):
    from click.testing import CliRunner

    from search.cli.heads import train

    runner = CliRunner()
    out = tmp_path / "cls"
    result = runner.invoke(
        train,
        [
            "classifier",
            "--data",
            str(classifier_json),
            "--format",
            "splits",
            "--out",
            str(out),
            "--base",
            str(tiny_bert),
            "--epochs",
            "1",
            "--head-only",
            "--pooling",
            "cls",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads((out / "config.json").read_text())[POOLING_KEY] == "cls"
    result = runner.invoke(
        train,
        [
            "ner",
            "--data",
            str(classifier_json),
            "--format",
            "splits",
            "--out",
            str(tmp_path / "n"),
            "--base",
            str(tiny_bert),
            "--pooling",
            "mean",
        ],
    )
    assert result.exit_code == 1 and "--pooling mean is for classifiers" in result.stderr
    assert not (tmp_path / "n").exists()
