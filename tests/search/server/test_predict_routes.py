"""`POST /predict` and `POST /annotate` of `bertindex serve --heads`: the scores and spans are what
`bertindex annotate` stores for the same texts (its Annotator over the same store), the answer's
shape follows the input's (one string or a list), the head is picked by name or alone, and the
caps, the long-input refusal, the token check and the start-up refusal of a bad head hold; one
test calls a real `bertindex serve` over HTTP with a Bearer token."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from head_kit import NER_LABELS, save_head
from port_kit import free_port, start_serve, stop
from pydantic import ValidationError
from server_kit import BASE, app_for, prepare
from testkit import tiny_model_config

from indexer.annotate.annotator import Annotator, load_heads
from indexer.annotate.served import ServedHeads
from indexer.annotate.store_pass import annotate_and_publish
from indexer.errors import ModelError
from indexer.heads.base import softmax
from indexer.store import Store
from search import predict_routes
from search.cli.main import main

pytestmark = pytest.mark.heavy  # a store indexed and annotated per module; one test starts serve

SHORT = ["the cat sat on the mat", "a dog slept on the sofa", "red apple green pear"]
LONG = [  # over the tiny config's 16-token windows: read in several (letters spell the words)
    "the quick brown fox jumps over the lazy dog near the river in the big city",
    "parse command line arguments in python then compress a file with gzip and write data",
]
MOOD = ["calm", "glad", "sad"]


@dataclass
class Served:
    client: object  # TestClient with the read token
    app: object
    tokens: dict[str, str]
    labels: dict[tuple[str, str], tuple[str, float, float]]  # (text, head) -> stored label
    entities: dict[str, list[tuple]]  # text -> stored spans of head `tags`


@pytest.fixture(scope="module")
def more_heads(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """A random 3-label classifier and a random tagger whose tags change from word to word,
    both head-only on the tiny encoder (one backbone pass serves them and `heads`)."""
    import torch
    from transformers import (
        AutoTokenizer,
        BertForSequenceClassification,
        BertForTokenClassification,
    )

    root = tmp_path_factory.mktemp("more-heads")
    torch.manual_seed(3)
    mood = BertForSequenceClassification.from_pretrained(
        tiny_model_dir,
        num_labels=3,
        id2label=dict(enumerate(MOOD)),
        label2id={n: i for i, n in enumerate(MOOD)},
    )
    tags = BertForTokenClassification.from_pretrained(
        tiny_model_dir,
        num_labels=len(NER_LABELS),
        id2label=dict(enumerate(NER_LABELS)),
        label2id={n: i for i, n in enumerate(NER_LABELS)},
    )
    torch.manual_seed(1)
    with torch.no_grad():  # centred on LONG[0]'s mean state, which every token's is close to
        tokens = AutoTokenizer.from_pretrained(tiny_model_dir)(LONG[0], return_tensors="pt")
        centre = tags.eval().bert(**tokens).last_hidden_state[0].mean(0)  # (hidden,)
        tags.classifier.weight.normal_(0, 2.0)  # (labels, hidden)
        tags.classifier.bias.copy_(-tags.classifier.weight @ centre)
    return {
        "mood": save_head(mood, tiny_model_dir, root / "mood"),
        "tags": save_head(tags, tiny_model_dir, root / "tags"),
    }


def stored(config) -> tuple[dict, dict]:
    """What the annotate pass wrote: (text, head) -> (label, probability, runner_up), and
    text -> spans (type, start, end, text, score) of head `tags`."""
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        labels = {
            (text, head): (label, p, r)
            for text, head, label, p, r in store.con.execute(
                "SELECT d.text, a.head, a.label, a.probability, a.runner_up "
                "FROM annotations a JOIN documents d USING (doc_id)"
            ).fetchall()
        }
        spans: dict[str, list[tuple]] = {}
        for text, *span in store.con.execute(
            "SELECT d.text, e.type, e.start_char, e.end_char, e.text, e.score "
            "FROM entities e JOIN documents d USING (doc_id) WHERE e.head = 'tags' "
            "ORDER BY d.doc_id, e.start_char"
        ).fetchall():
            spans.setdefault(text, []).append(tuple(span))
    return labels, spans


@pytest.fixture(scope="module")
def served(heads, more_heads, tiny_model_dir, tmp_path_factory):
    """A store of SHORT + LONG with a token per scope, annotated by `clf`, `mood` and `tags` as
    `bertindex annotate --heads ...` annotates it (`flows.annotate.build_annotator`, then the
    store pass), and an app serving the same heads."""
    from fastapi.testclient import TestClient

    root = tmp_path_factory.mktemp("predict-routes")
    config = tiny_model_config(tiny_model_dir, root / "store")
    corpus = root / "docs.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(SHORT + LONG))
    )
    tokens = prepare(config, corpus)
    args = [f"clf={heads['clf']}", f"mood={more_heads['mood']}", f"tags={more_heads['tags']}"]
    annotate_and_publish(Annotator.for_config(load_heads(args), config), config)
    labels, spans = stored(config)
    store, app = app_for(config, ServedHeads.load(args, config))
    with store:
        client = TestClient(app, base_url=BASE, headers=bearer(tokens["read"]))
        yield Served(client, app, tokens, labels, spans)


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_predict_answers_the_probabilities_annotate_stores(served):
    answer = served.client.post("/predict", json={"inputs": SHORT, "head": "mood"})
    assert answer.status_code == 200, answer.text
    rows = answer.json()
    assert len(rows) == len(SHORT)
    for text, row in zip(SHORT, rows):
        label, probability, runner_up = served.labels[(text, "mood")]
        assert sorted(r["label"] for r in row) == MOOD
        scores = [r["score"] for r in row]
        assert scores == sorted(scores, reverse=True) and sum(scores) == pytest.approx(1)
        assert row[0]["label"] == label
        assert scores[:2] == pytest.approx([probability, runner_up], abs=1e-6)
    one = served.client.post("/predict", json={"inputs": SHORT[1], "head": "mood"}).json()
    assert [r["label"] for r in one] == [r["label"] for r in rows[1]]  # a string: one list
    assert [r["score"] for r in one] == pytest.approx([r["score"] for r in rows[1]], abs=1e-6)


def test_raw_scores_are_the_logits_of_those_probabilities(served):
    ask = {"inputs": SHORT, "head": "mood"}
    probs = served.client.post("/predict", json=ask).json()
    raw = served.client.post("/predict", json={**ask, "raw_scores": True}).json()
    for p, r in zip(probs, raw):
        assert [x["label"] for x in r] == [x["label"] for x in p]
        assert softmax(np.array([x["score"] for x in r])) == pytest.approx(
            [x["score"] for x in p], abs=1e-6
        )
        assert not np.isclose(sum(x["score"] for x in r), 1)  # logits, not probabilities


def test_annotate_answers_the_spans_annotate_stores(served):
    texts = SHORT + LONG
    answer = served.client.post("/annotate", json={"inputs": texts})  # the one tagger
    assert answer.status_code == 200, answer.text
    for text, found in zip(texts, answer.json()):
        want = served.entities.get(text, [])
        assert [(e["type"], e["start"], e["end"], e["text"]) for e in found] == [
            w[:4] for w in want
        ], text
        assert [e["score"] for e in found] == pytest.approx([w[4] for w in want], abs=1e-6)
        assert all(text[e["start"] : e["end"]] == e["text"] for e in found)
    # the long texts' windows were stitched: spans past the first window's 14 tokens
    assert any(e[1] > 40 for t in LONG for e in served.entities.get(t, []))
    one = served.client.post("/annotate", json={"inputs": LONG[0], "head": "tags"}).json()
    assert [(e["start"], e["end"]) for e in one] == [w[1:3] for w in served.entities[LONG[0]]]


def test_a_long_input_is_refused_unless_truncated_to_its_first_window(served, tiny_model_dir):
    from transformers import AutoTokenizer

    refused = served.client.post("/predict", json={"inputs": [SHORT[0], LONG[0]], "head": "clf"})
    assert refused.status_code == 400
    assert "input 1 is" in refused.json()["detail"] and "truncate: true" in refused.json()["detail"]
    cut = served.client.post(
        "/predict", json={"inputs": [SHORT[0], LONG[0]], "head": "clf", "truncate": True}
    )
    assert cut.status_code == 200, cut.text
    offsets = AutoTokenizer.from_pretrained(tiny_model_dir)(
        LONG[0], add_special_tokens=False, return_offsets_mapping=True
    )["offset_mapping"]
    first_window = LONG[0][: offsets[16 - 3][1]]  # its first 14 tokens: 16 less [CLS], [SEP]
    alone = served.client.post("/predict", json={"inputs": first_window, "head": "clf"}).json()
    assert [r["label"] for r in cut.json()[1]] == [r["label"] for r in alone]
    assert [r["score"] for r in cut.json()[1]] == pytest.approx([r["score"] for r in alone])


ODD = ["", "   ", "\x00\u200b", "naïve café ☕ 東京 مرحبا", "x" * 300, "a\u0301" * 20]


def test_odd_texts_get_an_answer_of_their_own(served):
    """Empty, blank, control and zero-width characters, accents, emoji, other scripts, one
    300-letter word, combining marks: an answer per text, spans that are slices of it."""
    scored = served.client.post("/predict", json={"inputs": ODD, "head": "clf", "truncate": True})
    assert scored.status_code == 200, scored.text
    assert all(sum(r["score"] for r in row) == pytest.approx(1) for row in scored.json())
    spans = served.client.post("/annotate", json={"inputs": ODD})
    assert spans.status_code == 200, spans.text
    assert spans.json()[0] == spans.json()[1] == []
    for text, found in zip(ODD, spans.json()):
        assert all(text[e["start"] : e["end"]] == e["text"] for e in found), text


def test_the_head_is_named_or_the_only_one_of_its_kind(served):
    post = served.client.post
    several = post("/predict", json={"inputs": "the cat"})
    assert several.status_code == 400 and "clf, mood" in several.json()["detail"]
    unknown = post("/predict", json={"inputs": "the cat", "head": "nope"})
    assert unknown.status_code == 400
    assert "'nope'" in unknown.json()["detail"] and "clf, mood" in unknown.json()["detail"]
    tagger = post("/predict", json={"inputs": "the cat", "head": "tags"})
    assert tagger.status_code == 400 and "POST /annotate" in tagger.json()["detail"]
    classifier = post("/annotate", json={"inputs": "the cat", "head": "clf"})
    assert classifier.status_code == 400 and "choose one of tags" in classifier.json()["detail"]
    assert post("/predict", json={"inputs": "the cat", "head": "clf"}).status_code == 200


def test_caps(served, monkeypatch):
    post = served.client.post
    many = post("/predict", json={"inputs": ["cat"] * (predict_routes.MAX_INPUTS + 1)})
    assert many.status_code == 422 and "inputs" in many.json()["detail"]
    wide = {"inputs": "a" * (predict_routes.MAX_INPUT_CHARS + 1)}
    assert post("/annotate", json=wide).status_code == 413  # the body limit (16 KB) first
    with pytest.raises(ValidationError, match="inputs.0"):  # under a raised body limit
        predict_routes.HeadRequest.model_validate(wide)
    name = post("/annotate", json={"inputs": "cat", "head": "h" * 201})
    assert name.status_code == 422 and "head" in name.json()["detail"]
    assert post("/annotate", json={"inputs": "cat", "extra": 1}).status_code == 422
    assert post("/annotate", json={"inputs": []}).status_code == 422
    monkeypatch.setattr(predict_routes, "MAX_REQUEST_TOKENS", 20)
    heavy = post("/annotate", json={"inputs": ["the cat sat on the mat"] * 3})  # 3 x 8 tokens
    assert heavy.status_code == 400
    assert "24 tokens" in heavy.json()["detail"] and "cap of 20" in heavy.json()["detail"]
    assert post("/annotate", json={"inputs": ["the cat sat on the mat"] * 2}).status_code == 200


def test_a_token_is_needed(served):
    from fastapi.testclient import TestClient

    bare = TestClient(served.app, base_url=BASE)
    for path in ("/predict", "/annotate"):
        ask = {"inputs": "the cat", "head": "clf" if path == "/predict" else "tags"}
        assert bare.post(path, json=ask).status_code == 401
        assert bare.post(path, json=ask, headers=bearer("bi_not-a-token")).status_code == 401
        for scope, token in served.tokens.items():  # each scope that includes `read`
            answer = bare.post(path, json=ask, headers=bearer(token))
            assert answer.status_code == (403 if scope == "metrics" else 200), scope
        foreign = bare.post(
            path, json=ask, headers={**bearer(served.tokens["read"]), "Host": "evil.example"}
        )
        assert foreign.status_code == 403


def test_without_heads_both_routes_say_how_to_load_them(tiny_config, small_corpus):
    from fastapi.testclient import TestClient

    prepare(tiny_config, small_corpus, scopes=())
    store, app = app_for(tiny_config)
    with store:
        client = TestClient(app, base_url=BASE)
        for path, kind in (("/predict", "classifier"), ("/annotate", "tagger")):
            answer = client.post(path, json={"inputs": "the cat"})
            assert answer.status_code == 404
            assert kind in answer.json()["detail"]
            assert "serve --heads NAME=PATH" in answer.json()["detail"]


def test_serve_refuses_a_head_it_cannot_load_before_listening(tiny_config, small_corpus, tmp_path):
    prepare(tiny_config, small_corpus, scopes=())
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(tiny_config.model_dump()))
    serve = ["serve", "--config", str(config_file), "--workers", "1"]
    missing = CliRunner().invoke(main, [*serve, "--heads", f"clf={tmp_path / 'nope'}"])
    assert missing.exit_code == 2, missing.output
    assert "head 'clf'" in missing.output and "no directory" in missing.output
    (tmp_path / "empty").mkdir()
    empty = CliRunner().invoke(main, [*serve, "--heads", f"clf={tmp_path / 'empty'}"])
    assert empty.exit_code == 1, empty.output
    assert "error: head 'clf'" in empty.output and "no config.json" in empty.output
    assert "Traceback" not in empty.output


def test_a_pair_head_is_refused_with_where_it_is_served(tiny_model_dir, tiny_config, tmp_path):
    from transformers import BertForSequenceClassification

    pair = BertForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1)
    pair.config.bertindex_head_type = "pair"  # a reranker (`bertindex train rerank`)
    save_head(pair, tiny_model_dir, tmp_path / "pair")
    with pytest.raises(ModelError, match="head 'rr' .* scores pairs .* search.rerank"):
        ServedHeads.load([f"rr={tmp_path / 'pair'}"], tiny_config)


def test_predict_over_http_from_bertindex_serve(heads, tiny_config, small_corpus, tmp_path):
    """Two server processes, each loading the heads `serve` hands them (ServeSettings)."""
    import httpx

    tokens = prepare(tiny_config, small_corpus, scopes=("read",))
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(tiny_config.model_dump()))
    clf, ner = f"clf={heads['clf']}", f"ner={heads['ner']}"
    expected = ServedHeads.load([clf], tiny_config)
    texts = ["the cat sat on the mat", "a dog"]
    want = expected.label_scores(expected.tokenize("clf", texts))
    port = free_port()
    server = start_serve(config_file, port, "--heads", clf, "--heads", ner, "--workers", "2")
    try:
        url, auth = f"http://127.0.0.1:{port}", bearer(tokens["read"])
        for _ in range(4):  # requests reach either process
            answer = httpx.post(f"{url}/predict", json={"inputs": texts}, headers=auth, timeout=60)
            assert answer.status_code == 200, answer.text
            got = answer.json()
            assert [[r["label"] for r in row] for row in got] == [[x for x, _ in w] for w in want]
            assert [r["score"] for row in got for r in row] == pytest.approx(
                [s for w in want for _, s in w], abs=1e-6
            )
        spans = httpx.post(f"{url}/annotate", json={"inputs": "the cat"}, headers=auth, timeout=60)
        assert [(e["type"], e["start"], e["end"]) for e in spans.json()] == [
            ("LOC", 0, 3),
            ("LOC", 4, 7),
        ]  # the `heads` tagger tags every word B-LOC
        refused = httpx.post(f"{url}/predict", json={"inputs": "the cat"}, timeout=60)
        assert refused.status_code == 401
    finally:
        stop(server)
