"""Bulk `annotate` stores the entities that `load_head(...).predict` (and `eval head`) give on
the same texts: both decode a tagger's words as the most probable valid BIO sequence.

The tagger here is random with wide weights and a bias towards `I-` tags, so that per-word
argmax yields invalid BIO (`I-X` after `O` or after another type); the test first checks
that it does, so that it would catch an annotate path that decodes by argmax.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from flows.annotate import run_annotate
from indexer.heads.labels import split_tag
from indexer.heads.predict import load_head
from indexer.indexing.run import run_index
from indexer.store import Store

LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
TEXTS = [
    "the cat sat on the mat",
    "the dog slept on the sofa",
    "parse command line arguments in python",
    "compress a file with gzip and write data",
    "red apple green pear blue river",
    "big mountain small city fast train slow car",
    "search the vector index for a text document",
    "the sea house on a rug banana query",
]


def _invalid_bio(tags: list[str]) -> bool:
    """True when an `I-X` tag starts a sequence or follows a tag that is not `B-X`/`I-X`."""
    before = "O"
    for tag in tags:
        prefix, kind = split_tag(tag)
        if prefix == "I" and before not in (f"B-{kind}", f"I-{kind}"):
            return True
        before = tag
    return False


def _tagger(model_dir: Path, out: Path) -> Path:
    from transformers import AutoTokenizer, BertForTokenClassification

    torch.manual_seed(7)
    model = BertForTokenClassification.from_pretrained(
        model_dir,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={n: i for i, n in enumerate(LABELS)},
    )
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 1.0)  # wide: each token's tag differs
        model.classifier.bias.copy_(torch.tensor([0.0, 0.0, 1.5, 0.0, 1.5]))  # I- tags favoured
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out)
    return out


def test_stored_entities_equal_predict(tiny_config, tiny_model_dir, tmp_path):
    head = _tagger(tiny_model_dir, tmp_path / "ner")
    tagger = load_head(head)
    tokenizer = tagger.tokenizer
    # precondition: per-word argmax gives invalid BIO here, and other spans than BIO decoding
    logits = tagger.model(**tokenizer(TEXTS, padding=True, return_tensors="pt")).logits
    argmax_tags = []
    for j in range(len(TEXTS)):
        enc = tokenizer(TEXTS[j])
        words = sorted({w for w in enc.word_ids() if w is not None})
        firsts = [enc.word_ids().index(w) for w in words]
        argmax_tags.append([LABELS[int(logits[j, p].argmax())] for p in firsts])
    assert any(_invalid_bio(tags) for tags in argmax_tags), argmax_tags

    def spans(entities):
        return [(e.type, e.start, e.end, e.text) for e in entities]

    predicted = [spans(ents) for ents in tagger.predict(TEXTS)]
    by_argmax = [spans(ents) for ents in tagger.predict(TEXTS, decode="argmax")]
    assert predicted != by_argmax

    config = tiny_config.with_overrides(**{"model.max_length": 128})  # one window per text
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS))
    )
    run_index([str(corpus)], config, "docs")
    summary = run_annotate([f"ner={head}"], config)
    assert summary["annotated"] == len(TEXTS)
    with Store(config.store.path) as store:
        rows = store.con.execute(
            "SELECT d.external_id, e.type, e.start_char, e.end_char, e.text FROM entities e "
            "JOIN documents d USING (doc_id) ORDER BY d.external_id, e.start_char"
        ).fetchall()
    stored = {f"t{i}": [] for i in range(len(TEXTS))}
    for doc, *span in rows:
        stored[doc].append(tuple(span))
    assert [stored[f"t{i}"] for i in range(len(TEXTS))] == predicted
