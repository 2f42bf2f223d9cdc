"""A tiny random BERT + WordPiece tokenizer built in process, once per session, and small
data files for the head tests. Nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from testkit import SHARED_DATA

WORDS = [
    "the",
    "a",
    "good",
    "bad",
    "movie",
    "film",
    "great",
    "awful",
    "john",
    "smith",
    "lives",
    "in",
    "paris",
    "london",
    "works",
    "at",
    "acme",
    "corp",
    "and",
    "is",
    "very",
    "not",
    "un",
    "##believ",
    "##able",
    "##s",
    "##ly",
    "play",
    "##ing",
    "new",
    "york",
    "mary",
    "loves",
    "hates",
    "this",
]


def _vocab() -> list[str]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list("abcdefghijklmnopqrstuvwxyz.,!?'")
    vocab = specials + chars + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"] + WORDS
    seen, out = set(), []
    for token in vocab:
        if token not in seen:
            seen.add(token)
            out.append(token)
    return out


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A random 2-layer BERT (vocab 99) with a fast WordPiece tokenizer, saved to a tmp dir."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("tiny-bert")
    vocab = _vocab()
    assert len(vocab) <= 99
    vocab += [f"[unused{i}]" for i in range(99 - len(vocab))]
    ids = {t: i for i, t in enumerate(vocab)}
    tok = Tokenizer(models.WordPiece(ids, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
    )
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(path)
    fast.save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return path


CLASSIFIER_ITEMS = [
    ("a good movie", "pos"),
    ("great film", "pos"),
    ("a great great movie", "pos"),
    ("mary loves this film", "pos"),
    ("a very good film", "pos"),
    ("unbelievable good", "pos"),
    ("a bad movie", "neg"),
    ("awful film", "neg"),
    ("a very bad bad movie", "neg"),
    ("john hates this film", "neg"),
    ("not good", "neg"),
    ("awful awful", "neg"),
]

NER_ITEMS = [
    (["john", "smith", "lives", "in", "paris"], ["B-PER", "I-PER", "O", "O", "B-LOC"]),
    (["mary", "works", "at", "acme", "corp"], ["B-PER", "O", "O", "B-ORG", "I-ORG"]),
    (["john", "loves", "new", "york"], ["B-PER", "O", "B-LOC", "I-LOC"]),
    (["mary", "lives", "in", "london"], ["B-PER", "O", "O", "B-LOC"]),
    (["acme", "corp", "is", "in", "london"], ["B-ORG", "I-ORG", "O", "O", "B-LOC"]),
    (["the", "playing", "film"], ["O", "O", "O"]),
]


@pytest.fixture
def classifier_json(tmp_path) -> Path:
    items = [{"text": t, "label": y} for t, y in CLASSIFIER_ITEMS]
    doc = {
        "label_names": ["neg", "pos"],
        "train": items,
        "validation": items[::2],
        "test": items[1::2],
    }
    path = tmp_path / "sentiment.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def ner_conll(tmp_path) -> tuple[Path, Path]:
    def write(name: str, items) -> Path:
        lines = ["-DOCSTART- -X- O O", ""]
        for tokens, tags in items:
            lines += [f"{t} NN O {g}" for t, g in zip(tokens, tags)] + [""]
        path = tmp_path / name
        path.write_text("\n".join(lines))
        return path

    return write("train.conll", NER_ITEMS), write("dev.conll", NER_ITEMS[::2])


@pytest.fixture(scope="session")
def classifier_items() -> list[tuple[str, str]]:
    return list(CLASSIFIER_ITEMS)


@pytest.fixture
def shared_data():
    """`shared_data("conll2003")` -> the folder in ../shared/data, or skip the test."""

    def find(*parts: str) -> Path:
        path = SHARED_DATA.joinpath(*parts)
        if not path.exists():
            pytest.skip(f"real data not found at {path} (the team's ../shared/data); skipping")
        return path

    return find
