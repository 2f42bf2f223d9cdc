"""The pair head (a cross-encoder) on the tiny BERT: the recipe's pair inputs (token types 0/1,
the template without them), the refusal of an over-long pair by name, a toy rule learnt from
both texts together, the STS-B layout, and reranking that reorders hits by the head's scores
without dropping or adding any."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from head_kit import FILLER, toy_pairs, write_jsonl

from indexer.errors import InputError, ModelError
from indexer.heads.data import read_head_data
from indexer.heads.registry import head_type


def test_pair_inputs_carry_token_types_0_then_1(tiny_model_dir):
    from transformers import AutoTokenizer

    from indexer.heads.features import collate
    from indexer.heads.pair.head_type import PairExample

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)  # a BERT tokenizer
    kind = head_type("pair")
    enc = kind.encode(tokenizer, [PairExample("x", "cat sat", "the mat", 0, 1.0)])
    tokens = tokenizer.convert_ids_to_tokens(enc.input_ids[0])
    assert tokens == ["[CLS]", "cat", "sat", "[SEP]", "the", "mat", "[SEP]"]
    assert enc.token_type_ids[0] == [0, 0, 0, 0, 1, 1, 1]  # A and its [SEP]: 0; B and its [SEP]: 1
    batch = collate(enc, [0], pad_id=0)
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 1, 1, 1]]
    assert batch["labels"].dtype.is_floating_point  # a regression target stays a float


def test_pair_template_without_token_types(tiny_bert):
    """A tokenizer without token types (its model has none, as RoBERTa) still gets its pair
    template, and no token_type_ids are invented."""
    from transformers import AutoTokenizer

    from indexer.heads.features import collate
    from indexer.heads.pair.head_type import PairExample

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    assert "token_type_ids" not in tokenizer.model_input_names
    enc = head_type("pair").encode(tokenizer, [PairExample("x", "john", "the film", 0, 1.0)])
    assert tokenizer.convert_ids_to_tokens(enc.input_ids[0]) == [
        "[CLS]",
        "john",
        "[SEP]",
        "the",
        "film",
        "[SEP]",
    ]
    assert enc.token_type_ids is None
    assert "token_type_ids" not in collate(enc, [0], pad_id=0)


def test_a_pair_longer_than_max_length_is_refused_by_name(tiny_model_dir, tmp_path):
    from indexer.heads.train import TrainSettings, train_head

    rows = toy_pairs(8, seed=3)
    rows[5]["text_b"] = " ".join(["river"] * 20)
    data = read_head_data(
        "pair", write_jsonl(tmp_path / "t.jsonl", rows), write_jsonl(tmp_path / "v.jsonl", rows[:4])
    )
    settings = TrainSettings(
        task="pair", base=tiny_model_dir, out=tmp_path / "out", max_length=16, epochs=1
    )
    with pytest.raises(InputError, match=r"--max-length 16 .*: p5 \(25 tokens\)"):
        train_head(data, settings)
    assert not (tmp_path / "out").exists()


def test_pair_data_refuses_mixed_targets_and_reads_stsb(tmp_path):
    rows = [{"text_a": "a", "text_b": "b", "score": 1}, {"text_a": "a", "text_b": "b", "label": 0}]
    with pytest.raises(InputError, match="line 1: has 'score' but other items have 'label'"):
        read_head_data("pair", write_jsonl(tmp_path / "mixed.jsonl", rows))
    sts = tmp_path / "sts-train.csv"  # the STS-B layout: tab-separated, no header, no quoting
    sts.write_text(
        "main-news\tMSRvid\t2012test\t0001\t4.200\tA "
        'man "sings".\tA man sings.\n'
        "main-news\tMSRvid\t2012test\t0002\t0.500\tA cat.\tA dog runs.\textra\tx\n"
    )
    data = read_head_data("pair", sts)
    assert data.label_names == ["score"]
    first = data.splits["train"][0]
    assert (first.text_a, first.text_b, first.score) == ('A man "sings".', "A man sings.", 4.2)
    csv = tmp_path / "pairs.csv"
    csv.write_text('text_a,text_b,label\nhi,there,yes\n"a, b",c,no\n')
    data = read_head_data("pair", csv)
    assert data.label_names == ["no", "yes"] and data.splits["train"][1].text_a == "a, b"


def test_a_tiny_pair_head_learns_a_rule_of_both_texts(toy_head):
    from indexer.heads.evaluate import evaluate_head
    from indexer.heads.pair.scorer import PairScorer

    head, receipt, val = toy_head
    assert receipt["task"] == "pair" and receipt["pair"]["kind"] == "regression"
    # binary gold: a perfect ranking of 24 + 24 scores Spearman 0.866, chance 0
    assert receipt["validation"]["spearman"] > 0.8
    assert receipt["baseline"]["name"] == "bi-encoder cosine"
    assert json.loads((head / "config.json").read_text())["bertindex_score_range"] == [0.0, 1.0]
    scores = PairScorer(head).score([(r["text_a"], r["text_b"]) for r in val])
    gold = np.array([r["score"] for r in val])
    assert scores[gold == 1].mean() > scores[gold == 0].mean() + 0.5
    data = read_head_data("pair", head.parent / "val.jsonl", single_split="test")
    result = evaluate_head(head, data, "test")
    assert result["spearman"] == pytest.approx(receipt["validation"]["spearman"], abs=1e-6)
    blend = receipt["blend"]  # chosen on validation: never below the head alone there
    assert blend["validation"] >= blend["alone"] and 0.0 <= blend["weight"] < 1.0
    assert receipt["validation"]["spearman"] == pytest.approx(blend["validation"], abs=1e-9)


def _shared_word_pairs(n: int, seed: int) -> list[dict]:
    """Score 1 when the two texts share their first word: a rule two vectors can tell."""
    rng = random.Random(seed)
    words = ["cat", "dog", *FILLER]
    rows = []
    for i in range(n):
        a, b = rng.choice(words), rng.choice(words)
        rows.append(
            {
                "id": f"s{i}",
                "text_a": f"{a} {rng.choice(FILLER)}",
                "text_b": f"{b} {rng.choice(FILLER)}",
                "score": float(a == b),
            }
        )
    return rows


def test_a_tuned_blend_saves_its_bi_encoder_inside_the_head(pair_bert, tmp_path):
    """`--blend tuned`: a bi-encoder fine-tuned on the train pairs is saved inside the head and
    read from there by `eval head` and `PairScorer`, wherever the head is moved. The head
    itself is barely trained (one epoch at a tiny rate), so the cosine earns a share."""
    import shutil

    from indexer.heads.evaluate import evaluate_head
    from indexer.heads.pair.bi_encoder import BI_ENCODER_DIR
    from indexer.heads.pair.scorer import PairScorer
    from indexer.heads.train import TrainSettings, train_head

    val = _shared_word_pairs(64, seed=4)
    data = read_head_data(
        "pair",
        write_jsonl(tmp_path / "train.jsonl", _shared_word_pairs(96, 3)),
        write_jsonl(tmp_path / "val.jsonl", val),
    )
    settings = TrainSettings(
        task="pair",
        base=pair_bert,
        out=tmp_path / "head",
        epochs=1,
        lr=1e-6,
        batch_size=16,
        threads=1,
        blend="tuned",
    )
    receipt = train_head(data, settings)
    blend = receipt["blend"]
    assert len(blend["bi_encoder"]["loss"]) == blend["bi_encoder"]["epochs"] >= 1
    assert blend["weight"] > 0 and blend["validation"] > blend["alone"]
    config = json.loads((tmp_path / "head" / "config.json").read_text())
    assert config["bertindex_cosine_blend"]["encoder"] == BI_ENCODER_DIR
    assert (tmp_path / "head" / BI_ENCODER_DIR / "config.json").is_file()
    moved = tmp_path / "elsewhere"
    shutil.move(str(tmp_path / "head"), str(moved))
    result = evaluate_head(
        moved, read_head_data("pair", tmp_path / "val.jsonl", single_split="test"), "test"
    )
    assert result["spearman"] == pytest.approx(receipt["validation"]["spearman"], abs=1e-6)
    assert len(PairScorer(moved).score([(r["text_a"], r["text_b"]) for r in val[:4]])) == 4


def test_the_blend_weight_follows_what_validation_says():
    """A cosine that ranks better than the head gets a share; one that only adds noise gets 0
    (the head alone), so the blend cannot lower the validation score."""
    from indexer.heads.pair.blend import choose_weight, mixed

    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 400)
    head = gold / 5 + rng.normal(0, 0.3, 400)  # informative, noisy
    useful = gold / 5 + rng.normal(0, 0.3, 400)  # as good, errors of its own
    chosen = choose_weight(gold, head, useful)
    assert 0.3 <= chosen["weight"] <= 0.7 and chosen["validation"] > chosen["alone"] + 0.02
    noise = rng.normal(0, 1, 400)
    assert choose_weight(gold, head, noise)["weight"] == 0.0
    assert mixed(np.ones(3), np.zeros(3), 0.25).tolist() == [0.75] * 3


def test_a_pair_head_refuses_head_only_and_single_texts(toy_head, tiny_model_dir, tmp_path):
    from indexer.heads.predict import load_head
    from indexer.heads.train import TrainSettings, train_head

    head, _, _ = toy_head
    data = read_head_data("pair", head.parent / "train.jsonl", head.parent / "val.jsonl")
    with pytest.raises(ModelError, match="without them"):
        train_head(
            data,
            TrainSettings(
                task="pair", base=tiny_model_dir, out=tmp_path / "o", head_only=True, epochs=1
            ),
        )
    with pytest.raises(ModelError, match="scores pairs of texts"):
        load_head(head).predict(["the mat"])


def test_reranking_reorders_by_the_heads_scores_and_keeps_every_hit(toy_head):
    from indexer.heads.pair.scorer import PairScorer
    from indexer.query.hits import SearchHit
    from indexer.query.rerank import hit_passage, rerank_hits

    head, _, _ = toy_head
    scorer = PairScorer(head)
    texts = ["sea mat", "pear rug", "city mat", "sofa rug", "river mat", "apple rug", "sea rug"]
    hits = [
        SearchHit(i + 1, 1.0 - i / 10, f"d{i}", "c", None, t, {}, 0, len(t))
        for i, t in enumerate(texts)
    ]
    reranked = rerank_hits("cat apple", hits, scorer, depth=5)
    assert sorted(h.id for h in reranked) == sorted(h.id for h in hits)  # none dropped or added
    assert [h.rank for h in reranked] == list(range(1, len(hits) + 1))
    expected = scorer.score([("cat apple", hit_passage(h)) for h in hits[:5]])
    order = sorted(range(5), key=lambda i: (-expected[i], i))
    assert [h.id for h in reranked[:5]] == [hits[i].id for i in order]
    assert [h.rerank for h in reranked[:5]] == pytest.approx(sorted(expected, reverse=True))
    assert [h.id for h in reranked[5:]] == ["d5", "d6"] and reranked[5].rerank is None
    assert [h.text.endswith("mat") for h in reranked[:5]] == [True] * 3 + [False] * 2  # cat: mat
    assert [h.score for h in reranked[:5]] == [hits[i].score for i in order]  # first stage kept


def test_the_rerank_weight_mixes_the_first_stage_and_the_head(toy_head):
    """Share 0 keeps the first stage's order, 1 is the head's; between, both scaled 0..1; the
    share is chosen by nDCG@10 on held-out queries and kept in config.json."""
    import json as jsonlib

    from indexer.heads.pair.scorer import PairScorer
    from indexer.query.hits import SearchHit
    from indexer.query.rerank import RERANK_WEIGHT_KEY, interpolated, rerank_hits
    from indexer.reranker.weight import choose_rerank_weight

    head, _, _ = toy_head
    scorer = PairScorer(head)
    texts = ["sea rug", "pear rug", "city mat", "sofa rug", "river mat"]
    hits = [
        SearchHit(i + 1, 1.0 - i / 10, f"d{i}", "c", None, t, {}, 0, len(t))
        for i, t in enumerate(texts)
    ]
    kept = rerank_hits("cat apple", hits, scorer, depth=5, weight=0.0)
    assert [h.id for h in kept] == [h.id for h in hits]  # the first stage's order
    alone = rerank_hits("cat apple", hits, scorer, depth=5, weight=1.0)
    assert [h.text.endswith("mat") for h in alone] == [True, True, False, False, False]
    assert interpolated([3.0, 1.0, 2.0], [0.0, 1.0, 0.5], 0.5) == pytest.approx([0.5, 0.5, 0.5])
    # d2 and d4 are the relevant ones: the head finds them, the first stage ranks them low
    scores = [float(x) for x in scorer.score([("cat apple", t) for t in texts])]
    chosen = choose_rerank_weight([(hits, scores)], {"q": {"d2": 1, "d4": 1}}, ["q"])
    assert (
        chosen["weight"] > 0.0
        and chosen["ndcg@10"][str(chosen["weight"])] > chosen["ndcg@10"]["0.0"]
    )
    # a flat curve (a SciFact reranker's held-out nDCG@10): the lowest share near the best
    from indexer.reranker.weight import RERANK_TIE, lowest_of_the_best

    curve = {0.0: 0.7504, 0.2: 0.7686, 0.3: 0.7789, 0.5: 0.7791, 0.8: 0.77912, 1.0: 0.7737}
    assert lowest_of_the_best(curve) == 0.3 and lowest_of_the_best(curve, tie=0.0) == 0.8
    assert lowest_of_the_best({0.0: 0.70, 0.4: 0.70 + 2 * RERANK_TIE}) == 0.4
    # a head config with a share: rerank_hits reads it
    config = jsonlib.loads((head / "config.json").read_text())
    assert RERANK_WEIGHT_KEY not in config  # a `train pair` head: alone (1)
    assert [h.id for h in rerank_hits("cat apple", hits, scorer, depth=5)] == [h.id for h in alone]


def test_search_rerank_on_the_cli_and_the_server(toy_head, tiny_config, small_corpus, tmp_path):
    """`search --rerank HEAD --json`: the same hits as without it, the top --rerank-depth
    ordered by their `rerank` score, the rest in their first-stage order; the server's request
    reranks with its configured `search.rerank`."""
    import yaml
    from click.testing import CliRunner
    from fastapi.testclient import TestClient

    from indexer.indexing.run import run_index
    from indexer.query.searcher import Searcher
    from indexer.store import Store
    from search.cli.main import main
    from search.server import create_app

    head, _, _ = toy_head
    run_index([str(small_corpus)], tiny_config)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config.model_dump()))
    runner = CliRunner()

    def search(*extra) -> list[dict]:
        result = runner.invoke(
            main, ["search", "cat mat", "--config", str(config), "--json", "-k", "5", *extra]
        )
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in result.stdout.splitlines()]

    plain = search()
    reranked = search("--rerank", str(head), "--rerank-depth", "3")
    assert sorted(h["id"] for h in reranked) == sorted(h["id"] for h in plain)
    top = [h["rerank"] for h in reranked[:3]]
    assert top == sorted(top, reverse=True) and None not in top
    assert {h["id"] for h in reranked[:3]} == {h["id"] for h in plain[:3]}
    assert [h["id"] for h in reranked[3:]] == [h["id"] for h in plain[3:]]
    assert all(h["rerank"] is None for h in reranked[3:] + plain)
    assert (
        runner.invoke(
            main, ["search", "cat", "--config", str(config), "--rerank", str(head), "--unique"]
        ).exit_code
        == 2
    )

    served = tiny_config.with_overrides(**{"search.rerank": str(head), "search.rerank_depth": 3})
    with Store(served.store.path, read_only=True) as store:
        client = TestClient(create_app(Searcher(served, store)))
        body = client.post("/search", json={"query": "cat mat", "k": 5}).json()
        assert [h["id"] for h in body["hits"]] == [h["id"] for h in reranked]
        off = client.post("/search", json={"query": "cat mat", "k": 5, "rerank": False}).json()
        assert [h["id"] for h in off["hits"]] == [h["id"] for h in plain]
        assert off["hits"][0]["rerank"] is None


def test_train_rerank_mines_pairs_and_keeps_a_share_chosen_on_held_out_queries(
    pair_bert, tiny_config, tmp_path
):
    """`train rerank --beir DIR`: judged positives and hard negatives from the store's own
    hybrid hits (recorded), then the head's share of the order chosen by nDCG@10 on the held-out
    queries and kept in config.json, where search reads it."""
    import yaml
    from click.testing import CliRunner

    from indexer.query.rerank import RERANK_WEIGHT_KEY
    from indexer.reranker.weight import RERANK_WEIGHTS
    from search.cli.main import main

    folder = tmp_path / "mini"
    (folder / "qrels").mkdir(parents=True)
    animals, things = ["cat", "dog", "sea", "city"], ["mat", "rug", "pear", "river"]
    docs = [
        {"_id": f"d{i}{j}", "title": "", "text": f"the {a} and the {t}"}
        for i, a in enumerate(animals)
        for j, t in enumerate(things)
    ]
    queries = [
        {"_id": f"q{i}{j}", "text": f"{a} {t}"}
        for i, a in enumerate(animals)
        for j, t in enumerate(things)
    ]
    write_jsonl(folder / "corpus.jsonl", docs)
    write_jsonl(folder / "queries.jsonl", queries)
    (folder / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q['_id']}\td{q['_id'][1:]}\t1\n" for q in queries)
    )
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config.model_dump()))
    out = tmp_path / "rerank"
    result = CliRunner().invoke(
        main,
        [
            "train",
            "rerank",
            "--beir",
            str(folder),
            "--negatives",
            "2",
            "--epochs",
            "2",
            "--lr",
            "1e-3",
            "--batch-size",
            "8",
            "--base",
            str(pair_bert),
            "--max-length",
            "32",
            "--validation-share",
            "0.25",
            "--out",
            str(out),
            "--config",
            str(config),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    short = json.loads(result.stdout)
    pairs = short["rerank_pairs"]
    assert pairs["queries"] == 16 and pairs["positives"] == 16 and pairs["negatives"] == 32
    assert pairs["validation_queries"] == 4
    share = json.loads((out / "config.json").read_text())[RERANK_WEIGHT_KEY]
    assert share in RERANK_WEIGHTS and short["rerank_weight"]["weight"] == share
    receipt = json.loads((out / "run-receipt.json").read_text())
    tried = receipt["rerank_weight"]["ndcg@10"]
    assert set(tried) == {str(w) for w in RERANK_WEIGHTS}
    assert tried[str(share)] == max(tried.values())  # the best on the held-out queries
