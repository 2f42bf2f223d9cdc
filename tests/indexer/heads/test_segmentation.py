"""Raw text cut into the words a tagger was trained on (`indexer.heads.tagger.segment`): labels read
on the first subword of each whitespace word, as training put them; spans at the exact character
offsets of those words; `eval head --input raw-text` equal to what `annotate` stores."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer

from indexer.errors import ModelError
from indexer.heads.data import read_head_data
from indexer.heads.inference import model_logits, pad_id_of
from indexer.heads.labels import bio_spans
from indexer.heads.predict import Predictor, load_head
from indexer.heads.registry import head_type
from indexer.heads.tagger.head_type import TokenExample, decode_words
from indexer.heads.tagger.segment import SEGMENTATION_KEY, text_words, whitespace_words
from indexer.heads.train import TrainSettings, train_head

LABELS = ["O", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
TEXTS = [
    "Fans of #Spurs met john in the U.S. today",
    "  mary  lives in  new york, U.S.A.  ",
    "#Spurs beat acme corp. at paris!",
    "the U.S. film is not good...",
]


def _tagger(base, out, bias=(0.0, 0.0, 1.0, 0.0, 1.0), segmentation=None, spread=1.0):
    torch.manual_seed(3)
    model = AutoModelForTokenClassification.from_pretrained(
        base,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={n: i for i, n in enumerate(LABELS)},
    )
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, spread)  # wide: tags differ from token to token
        model.classifier.bias.copy_(torch.tensor(bias))
    if segmentation is not None:
        setattr(model.config, SEGMENTATION_KEY, segmentation)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


def _spans(entities):
    return [(e.type, e.start, e.end, e.text) for e in entities]


def test_text_words_by_hand(tiny_bert):
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    text = "go #Spurs, U.S. fans"
    enc = tokenizer(text, return_offsets_mapping=True)
    # tokens: [CLS] g ##o # s ##p ##u ##r ##s , u . s . f ##a ##n ##s [SEP]
    assert enc.word_ids()[:4] == [None, 0, 0, 1] and enc.word_ids()[9] == 3  # `,` its own word
    words = text_words(text, enc.word_ids(), enc["offset_mapping"], "whitespace")
    assert words == [[0, 2, 1], [3, 10, 3], [11, 15, 10], [16, 20, 14]]
    assert [text[s:e] for s, e, _ in words] == ["go", "#Spurs,", "U.S.", "fans"]
    old = text_words(text, enc.word_ids(), enc["offset_mapping"], "tokenizer")
    assert [text[s:e] for s, e, _ in old] == ["go", "#", "Spurs", ",", "U", ".", "S", ".", "fans"]
    # a token of no width belongs to the word after it; one past the last word to none
    assert text_words("a bc", [0, 1, 1], [(0, 1), (2, 2), (2, 4)]) == [[0, 1, 0], [2, 4, 1]]
    assert text_words("a ", [0, 1], [(0, 1), (2, 2)]) == [[0, 1, 0]]


def test_predict_reads_the_positions_training_labelled(tiny_bert, tmp_path):
    """Each whitespace word's tag comes from the logits at the position training put that
    word's label on (`encode` with pre-split words), and its span is the word's characters."""
    head = _tagger(tiny_bert, tmp_path / "ner")  # saved without the record: whitespace assumed
    tagger = load_head(head)
    assert tagger.options == {"segmentation": "whitespace"}
    kind = head_type("ner")
    examples = [
        TokenExample(f"t{i}", tuple(t.split()), (0,) * len(t.split())) for i, t in enumerate(TEXTS)
    ]
    encoded = kind.encode(tagger.tokenizer, examples)  # the training path
    rows = model_logits(kind, tagger.model, encoded, pad_id_of(tagger.tokenizer), 8)
    expected = []
    for text, x in zip(TEXTS, rows):
        spans = whitespace_words(text)
        ids, _ = decode_words(x.numpy(), LABELS)
        tags = [LABELS[i] for i in ids]
        expected.append(
            [
                (kind_, spans[a][0], spans[b - 1][1], text[spans[a][0] : spans[b - 1][1]])
                for kind_, a, b in bio_spans(tags)
            ]
        )
    got = [_spans(ents) for ents in tagger.predict(TEXTS)]
    assert got == expected
    assert any(t in {"#Spurs", "U.S.", "U.S.A."} for ents in got for *_, t in ents), got
    # the tokenizer's own words (the old behaviour) put the labels elsewhere
    assert [_spans(e) for e in tagger.predict(TEXTS, segmentation="tokenizer")] != expected


def test_every_word_tagged_spans_exact_offsets(tiny_bert, tmp_path):
    """A tagger that says B-ORG on every token: one entity per whitespace word, `#Spurs` and
    `U.S.` whole, at their exact offsets; with the tokenizer's words they fall apart."""
    head = _tagger(tiny_bert, tmp_path / "ner", bias=(0.0, 9.0, 0.0, 0.0, 0.0), spread=0.0)
    model = AutoModelForTokenClassification.from_pretrained(head).eval()
    tagger = Predictor(head_type("ner"), model, AutoTokenizer.from_pretrained(head))
    text = "Fans of #Spurs met in the U.S. today"
    got = _spans(tagger.predict([text])[0])
    assert [t for *_, t in got] == text.split()
    assert got[2] == ("ORG", 8, 14, "#Spurs") and got[6] == ("ORG", 26, 30, "U.S.")
    old = [t for *_, t in _spans(tagger.predict([text], segmentation="tokenizer")[0])]
    assert "#Spurs" not in old and "#" in old and "Spurs" in old


def test_recorded_segmentation_is_read_and_checked(tiny_bert, tmp_path):
    old = load_head(_tagger(tiny_bert, tmp_path / "old", segmentation="tokenizer"))
    assert old.options == {"segmentation": "tokenizer"}
    bad = _tagger(tiny_bert, tmp_path / "bad", segmentation="words")
    with pytest.raises(ModelError, match=rf"{SEGMENTATION_KEY}='words'.*whitespace, tokenizer"):
        load_head(bad)


def test_raw_text_eval_equals_stored_entities(tiny_bert, tmp_path):
    """`eval head --input raw-text` scores exactly the entities `annotate` stores for the
    joined texts; `train` records whitespace and its receipt's raw-text figure agrees."""
    from click.testing import CliRunner

    from flows.annotate import run_annotate
    from indexer.annotate.raw_eval import evaluate_raw_text
    from indexer.config import Config
    from indexer.heads.metrics import span_f1
    from indexer.heads.tagger.raw_text import gold_char_spans
    from indexer.indexing.run import run_index
    from indexer.store import Store
    from search.cli.main import main as cli

    tokens = [t.split() for t in TEXTS[:3]] + [["john", "smith", "lives", "in", "paris"]]
    gold = [
        ["O", "O", "B-ORG", "O", "B-LOC", "O", "O", "B-LOC", "O"],
        ["B-LOC", "O", "O", "B-LOC", "I-LOC", "B-LOC"],
        ["B-ORG", "O", "B-ORG", "I-ORG", "O", "B-LOC"],
        ["B-ORG", "I-ORG", "O", "O", "B-LOC"],
    ]
    items = [{"tokens": t, "tags": g} for t, g in zip(tokens, gold)]
    path = tmp_path / "ner.json"
    path.write_text(json.dumps({"train": items, "validation": items, "test": items}))
    data = read_head_data("ner", path, fmt="splits")
    out = tmp_path / "head"
    receipt = train_head(
        data, TrainSettings("ner", tiny_bert, out, epochs=1, batch_size=2, lr=5e-3)
    )
    assert json.loads((out / "config.json").read_text())[SEGMENTATION_KEY] == "whitespace"
    assert receipt["raw_text"]["segmentation"] == "whitespace"

    config = Config().with_overrides(
        **{
            "model.name": str(tiny_bert),
            "model.dtype": "fp32",
            "model.device": "cpu",
            "model.max_length": 64,
            "long_documents.stride": 8,
            "store.path": str(tmp_path / "store"),
            "search.query_encoder": "torch",
        }
    )
    config_file = tmp_path / "config.yaml"
    config_file.write_text(json.dumps(config.model_dump(exclude_unset=True)))
    result = CliRunner().invoke(
        cli,
        [
            "eval",
            "head",
            str(out),
            "--data",
            str(path),
            "--format",
            "splits",
            "--input",
            "raw-text",
            "--config",
            str(config_file),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    scores = json.loads(result.output)
    assert scores["input"] == "raw-text" and scores["examples"] == 4

    corpus = tmp_path / "joined.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": f"t{i}", "text": " ".join(t)}) + "\n" for i, t in enumerate(tokens)
        )
    )
    wide = _tagger(tiny_bert, tmp_path / "wide")  # many entities, many of them right
    run_index([str(corpus)], config, "docs")
    run_annotate([f"trained={out}", f"wide={wide}"], config)
    with Store(config.store.path) as store:
        rows = store.con.execute(
            "SELECT e.head, d.external_id, e.type, e.start_char, e.end_char FROM entities e "
            "JOIN documents d USING (doc_id)"
        ).fetchall()
    golds = gold_char_spans(data.splits["test"], data.label_names)
    for name, head_scores in (("trained", scores), ("wide", evaluate_raw_text(wide, data, config))):
        stored = {(int(doc[1:]), kind, s, e) for h, doc, kind, s, e in rows if h == name}
        expected = span_f1(golds, stored)
        assert head_scores["entity_f1"] == pytest.approx(expected["entity_f1"])
        assert head_scores["predicted_entities"] == len(stored)
    assert len(stored) > 5 and 0 < expected["entity_f1"] < 1  # the wide head: a real test
    assert receipt["raw_text"]["entity_f1"] == pytest.approx(scores["entity_f1"])

    refused = CliRunner().invoke(
        cli,
        [
            "eval",
            "head",
            str(out),
            "--data",
            str(path),
            "--input",
            "raw-text",
            "--decode",
            "argmax",
            "--config",
            str(config_file),
        ],
    )
    assert refused.exit_code == 2 and "decodes bio only" in refused.output
