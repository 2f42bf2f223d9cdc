"""The family matrix: every encoder family bertindex claims, as a tiny random model with a
tokenizer trained in process (tests/support/families.py), through the product path: `index` (long
documents windowed within the model's real limit), the ONNX cold query path against torch,
`train classifier`, `train ner`, `eval head`, `annotate` against `predict`, and for the
sentence-transformers layout, sentence-transformers' own embeddings.

Loading that adapts to the model is checked on the way: the attention implementation its
class supports (recorded in provenance), token type ids only where taken, the usable length
(RoBERTa's padding offset, DeBERTa's tokenizer limit) and a longer `max_length` refused.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import numpy as np
import pytest
from families import FAMILIES, ORGS, PEOPLE, PLACES, WORDS, available, build_family

from indexer.config import Config, ModelConfig
from indexer.encode.encoder import Encoder
from indexer.encode.model_facts import special_tokens, usable_length
from indexer.encode.onnx_runtime import OnnxEncoder
from indexer.errors import ModelError
from indexer.indexing.run import run_index
from indexer.query.searcher import Searcher
from indexer.store import Store

pytestmark = pytest.mark.heavy

NAMES = [n for n in FAMILIES if available(n)]
SDPA = {"bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "modernbert"}
TOKEN_TYPES = {"bert", "roberta", "xlm-roberta", "albert", "electra", "deberta-v2"}
# where torch.onnx cannot trace the family, index warns once and queries use torch
NO_EXPORT: set[str] = set()
QUERIES = [
    "Luca lives in Milano",
    "the fast train",
    "Jürgen café straße",
    "#spurs U.S. 2024",
    "a very good movie at NASA in Paris",
]


@pytest.fixture(scope="module", params=NAMES)
def family(request, tmp_path_factory):
    """(name, model directory) of one family, built once for this module."""
    name = request.param
    return name, build_family(name, tmp_path_factory.mktemp(name))


def _corpus(path: Path, limit: int) -> Path:
    rng = random.Random(1)
    rows = []
    for i in range(12):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 9))]
        words.insert(0, rng.choice(PEOPLE).capitalize())
        words.append(rng.choice(PLACES).capitalize())
        rows.append({"id": f"d{i}", "text": " ".join(words)})
    # longer than the model's whole limit even at one token a word: windowed, not cut
    rows.append({"id": "long", "text": " ".join(rng.choice(WORDS) for _ in range(limit * 2))})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(model_dir: Path, store: Path, max_length: int, **more) -> Config:
    return Config().with_overrides(
        **{
            "model.name": str(model_dir),
            "model.dtype": "fp32",
            "model.device": "cpu",
            "model.max_length": max_length,
            "long_documents.stride": 4,
            "store.path": str(store),
            "search.query_encoder": "auto",
            **more,
        }
    )


def test_loading_adapts_to_the_family(family):
    name, model_dir = family
    spec = FAMILIES[name]
    encoder = Encoder(
        ModelConfig(name=str(model_dir), dtype="fp32", device="cpu", max_length=spec.usable)
    )
    assert encoder.attention == ("sdpa" if name in SDPA else "eager")
    assert encoder.provenance.attention == encoder.attention
    assert encoder.token_types == (name in TOKEN_TYPES)
    assert encoder.length.limit == spec.usable
    # the framing and pad id are the tokenizer's, never BERT's
    tok = encoder.tokenizer
    assert (encoder.cls_id, encoder.sep_id, encoder.pad_id) == (
        tok.cls_token_id,
        tok.sep_token_id,
        tok.pad_token_id,
    )
    framed = tok("Luca", add_special_tokens=True)["input_ids"]
    assert encoder.wrap(encoder.tokenize(["Luca"])[0]) == framed
    with pytest.raises(ModelError, match=f"usable length .*: {spec.usable} tokens"):
        Encoder(
            ModelConfig(name=str(model_dir), dtype="fp32", device="cpu", max_length=spec.usable + 2)
        )
    # padding does not change a text's vector (the mask and position ids are right)
    alone = encoder.encode_texts(["Luca lives in Milano"])
    batched = encoder.encode_texts(["Luca lives in Milano", " ".join(WORDS[:20])])
    assert np.abs(alone[0] - batched[0]).max() < 1e-5


def test_index_windows_and_onnx_query_equal_torch(family, tmp_path, caplog):
    name, model_dir = family
    limit = FAMILIES[name].usable
    cfg = _config(model_dir, tmp_path / "store", limit)
    with caplog.at_level(logging.WARNING):
        summary = run_index([str(_corpus(tmp_path / "c.jsonl", limit))], cfg, collection="c")
    assert (summary["read"], summary["encoded"], summary["rejected"]) == (13, 13, 0), summary
    with Store(cfg.store.path, read_only=True) as store:
        windows = store.con.execute(
            "SELECT count(*), max(n_tokens) FROM chunks JOIN documents USING (doc_id) "
            "WHERE external_id = 'long'"
        ).fetchone()
        provenance = store.vectors.provenance()
    assert windows[0] >= 2 and windows[1] <= limit
    assert provenance.attention == ("sdpa" if name in SDPA else "eager")
    torch_cfg = cfg.with_overrides(**{"search.query_encoder": "torch"})
    with Store(cfg.store.path, read_only=True) as store:
        fast, slow = Searcher(cfg, store), Searcher(torch_cfg, store)
        if name in NO_EXPORT:
            failures = [r for r in caplog.records if "ONNX export" in r.getMessage()]
            assert len(failures) == 1 and "\n" not in failures[0].getMessage()
            assert not isinstance(fast.encoder, OnnxEncoder)
            return
        assert isinstance(fast.encoder, OnnxEncoder), caplog.text
        assert np.abs(fast.encode_queries(QUERIES) - slow.encode_queries(QUERIES)).max() < 1e-4
        for q in QUERIES:
            x, y = fast.search(q, 5, mode="dense"), slow.search(q, 5, mode="dense")
            assert [h.id for h in x] == [h.id for h in y], q
            assert np.allclose([h.score for h in x], [h.score for h in y], atol=1e-4)


def _classifier_data(path: Path) -> Path:
    rng = random.Random(2)
    good, bad = ["good", "great", "loves"], ["bad", "awful", "hates"]
    items = []
    for i in range(24):
        label = "pos" if i % 2 else "neg"
        words = [rng.choice(WORDS[:10]) for _ in range(3)] + [rng.choice(good if i % 2 else bad)]
        items.append(
            {"text": f"{rng.choice(PEOPLE).capitalize()} " + " ".join(words), "label": label}
        )
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
    return path


def _ner_sentences(n: int, seed: int) -> list[tuple[list[str], list[str]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        tokens, tags = [], []
        for _ in range(rng.randint(3, 7)):
            roll = rng.random()
            if roll < 0.2:
                tokens += [rng.choice(PEOPLE).capitalize()]
                tags += ["B-PER"]
            elif roll < 0.35:
                tokens += [rng.choice(PLACES).capitalize()]
                tags += ["B-LOC"]
            elif roll < 0.45:
                tokens += [rng.choice(ORGS).upper(), "Corp"]
                tags += ["B-ORG", "I-ORG"]
            else:
                tokens += [rng.choice(WORDS)]
                tags += ["O"]
        out.append((tokens, tags))
    return out


def _conll(path: Path, items) -> Path:
    lines = []
    for tokens, tags in items:
        lines += [f"{t} NN O {g}" for t, g in zip(tokens, tags)] + [""]
    path.write_text("\n".join(lines))
    return path


def _train(
    task: str,
    data: Path,
    model_dir: Path,
    out: Path,
    validation=None,
    test=None,
    fmt: str = "auto",
    **settings,
) -> dict:
    """`bertindex train TASK` without Prefect: the library calls its flow makes."""
    from indexer.heads.data import read_head_data
    from indexer.heads.train import TrainSettings, train_head

    splits = read_head_data(task, data, validation, test, fmt=fmt)
    return train_head(
        splits,
        TrainSettings(task=task, base=model_dir, out=out, epochs=1, batch_size=8, **settings),
    )


def _eval(task: str, head: Path, data: Path, fmt: str = "auto") -> dict:
    """`bertindex eval head` on the test split."""
    from indexer.heads.data import read_head_data
    from indexer.heads.evaluate import evaluate_head

    return evaluate_head(head, read_head_data(task, data, fmt=fmt, single_split="test"), "test")


def test_heads_train_eval_predict_annotate(family, tmp_path):
    from indexer.errors import InputError

    name, model_dir = family
    limit = FAMILIES[name].usable
    clf = tmp_path / "clf"
    data = _classifier_data(tmp_path / "clf.json")
    receipt = _train("classifier", data, model_dir, clf, fmt="splits")
    assert _eval("classifier", clf, data, fmt="splits")["macro_f1"] == pytest.approx(
        receipt["test"]["macro_f1"]
    )

    ner = tmp_path / "ner"
    train = _conll(tmp_path / "train.conll", _ner_sentences(24, 3))
    dev = _conll(tmp_path / "dev.conll", _ner_sentences(8, 4))
    receipt = _train("ner", train, model_dir, ner, validation=dev, test=dev)
    assert _eval("ner", ner, dev)["entity_f1"] == pytest.approx(receipt["test"]["entity_f1"])

    # a --max-length above the model's usable length is refused, naming the real limit
    with pytest.raises(InputError, match=f"usable length .*: {min(limit, 512)} tokens"):
        _train("ner", train, model_dir, tmp_path / "x", validation=dev, max_length=limit + 8)

    # annotate stores what predict returns, on raw text
    from indexer.annotate.annotator import Annotator, load_heads
    from indexer.annotate.store_pass import annotate_store
    from indexer.heads.predict import load_head

    cfg = _config(
        model_dir, tmp_path / "store", min(limit, 32), **{"search.query_encoder": "torch"}
    )
    corpus = _corpus(tmp_path / "c.jsonl", limit)
    texts = {r["id"]: r["text"] for r in map(json.loads, corpus.read_text().splitlines())}
    del texts["long"]  # predict refuses what it would have to window
    corpus.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in texts.items()))
    run_index([str(corpus)], cfg, collection="c")
    annotator = Annotator(
        load_heads([f"clf={clf}", f"ner={ner}"]), dtype="fp32", device="cpu", max_length=limit
    )
    with Store(cfg.store.path) as store:
        assert annotate_store(store, annotator)["annotated"] == len(texts)
        stored = store.annotations.by_document([("c", k) for k in texts])
    ids = list(texts)
    labels = load_head(clf).predict([texts[k] for k in ids])
    entities = load_head(ner).predict([texts[k] for k in ids])
    assert sum(map(len, entities)) > 0  # a random head tags something: the check is not empty
    for k, label, found in zip(ids, labels, entities):
        row = stored[("c", k)]
        assert [x["label"] for x in row["labels"]] == [label.label], k
        assert [(e["type"], e["start"], e["end"]) for e in row["entities"]] == [
            (e.type, e.start, e.end) for e in found
        ], k


def test_pre_split_words_tokenise_as_running_text(family):
    """NER words come pre-split (`is_split_into_words`); their subwords must be those of
    the same words in raw text, for every tokenizer kind (byte-level BPE needs a prefix
    space), so that word_ids() puts each label on the word's first subword."""
    from transformers import AutoTokenizer

    from indexer.heads.registry import head_type

    name, model_dir = family
    tagger = head_type("ner")
    tok = tagger.prepare_tokenizer(AutoTokenizer.from_pretrained(model_dir), str(model_dir))
    for tokens, _ in _ner_sentences(20, 5):
        split = tok(tokens, is_split_into_words=True, add_special_tokens=False)
        raw = tok(" ".join(tokens), add_special_tokens=False)
        assert split["input_ids"] == raw["input_ids"], (name, tokens)
        words = [w for w in split.word_ids() if w is not None]
        assert sorted(set(words)) == list(range(len(tokens)))
    assert special_tokens(tok, name).framing == 2


@pytest.mark.parametrize("name", [n for n in ("mpnet", "xlm-roberta") if available(n)])
def test_sentence_transformers_layout_equals_its_encode(name, tmp_path):
    from families import save_sentence_transformers
    from sentence_transformers import SentenceTransformer

    limit = FAMILIES[name].usable
    hf = build_family(name, tmp_path / "hf")
    st_dir = save_sentence_transformers(hf, tmp_path / "st", max_seq_length=limit)
    texts = QUERIES + [" ".join(WORDS * 3)]  # the last one truncated by both
    ours = Encoder(ModelConfig(name=str(st_dir), dtype="fp32", device="cpu")).encode_texts(texts)
    theirs = SentenceTransformer(str(st_dir), device="cpu").encode(texts, convert_to_numpy=True)
    cosine = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert cosine.min() >= 0.9999, cosine


def test_usable_length_rules(family):
    """The limit comes from the model and tokenizer: position embeddings less RoBERTa-style
    padding offsets, the tokenizer's limit for relative attention."""
    from transformers import AutoModel, AutoTokenizer

    name, model_dir = family
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.model_max_length = int(1e30)  # no tokenizer limit: the model's alone
    length = usable_length(AutoModel.from_pretrained(model_dir), tok)
    spec = FAMILIES[name]
    if name == "deberta-v2":  # relative attention only: max_position_embeddings, said so
        assert length.limit == spec.positions and "relative attention" in length.why
    else:
        assert length.limit == spec.usable, length


def test_left_padding_tokenizer_is_honoured(tmp_path):
    """A tokenizer that pads on the left gets its batches padded on the left (the pad id
    its own), and `cls` pooling, which would read padding at position 0, is refused."""
    model_dir = build_family("roberta", tmp_path / "left")
    settings = json.loads((model_dir / "tokenizer_config.json").read_text())
    (model_dir / "tokenizer_config.json").write_text(
        json.dumps({**settings, "padding_side": "left"})
    )
    with pytest.raises(ModelError, match="pads on the left"):
        Encoder(
            ModelConfig(
                name=str(model_dir), dtype="fp32", device="cpu", max_length=32, pooling="cls"
            )
        )
    encoder = Encoder(
        ModelConfig(name=str(model_dir), dtype="fp32", device="cpu", max_length=32, pooling="mean")
    )
    ids, mask = encoder.pad([[5, 6, 7], [8]])
    assert ids.tolist() == [[5, 6, 7], [1, 1, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    states = encoder.token_states([encoder.wrap([5, 6, 7]), encoder.wrap([8])])
    assert [s.shape[0] for s in states] == [5, 3]  # each text's own tokens, padding dropped


def test_a_framing_other_than_one_token_each_side_is_refused():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP] [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")
    with pytest.raises(ModelError, match=r"1 token\(s\) before and 2 after \(\[2, 4, 3, 3\]\)"):
        special_tokens(fast, "DIR")
