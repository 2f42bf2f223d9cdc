"""Fixtures shared across the test directories: a tiny random BERT saved in process (nothing is
downloaded), small corpora, the tiny heads and pair head, one Prefect API per session, and one
torch thread per module. Plain helpers live in tests/support (testkit.py and the *_kit.py
modules); a directory's own fixtures live in its conftest.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from head_kit import NER_LABELS, save_head, toy_pairs, write_jsonl
from testkit import TINY_WORDS, build_tiny_bert


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-encoder"))


@pytest.fixture
def tiny_config(tiny_model_dir, tmp_path):
    """A Config using the tiny model in fp32 on CPU, with a store under tmp_path.

    Queries are encoded with torch and index runs write no ONNX export (about a second per
    store): tests/indexer/encode/test_onnx_query.py sets `search.query_encoder: auto`, the default.
    """
    from indexer.config import Config

    return Config().with_overrides(
        **{
            "model.name": str(tiny_model_dir),
            "model.dtype": "fp32",
            "model.device": "cpu",
            "model.max_length": 16,
            "long_documents.stride": 4,
            "store.path": str(tmp_path / "store"),
            "search.query_encoder": "torch",
        }
    )


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    rows = [
        {"id": "a1", "text": "the cat sat on the mat", "kind": "pet", "lang": "en"},
        {"id": "a2", "text": "the dog slept on the sofa", "kind": "pet", "lang": "en"},
        {
            "id": "b1",
            "text": "parse command line arguments in python",
            "kind": "code",
            "lang": "en",
        },
        {
            "id": "b2",
            "text": "compress a file with gzip and write data",
            "kind": "code",
            "lang": "en",
        },
        {
            "id": "c1",
            "text": "red apple green pear blue river big mountain small city fast train "
            "slow car the sea house on a rug banana query vector index search text document data",
            "kind": "long",
            "lang": "xx",
        },
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def serve_flows(monkeypatch):
    """`serve_flows(config)` runs `bertindex flows serve --config CONFIG` without starting
    Prefect and returns (deployments, limit) as they would have been served."""
    from click.testing import CliRunner

    import flows.runtime
    import flows.schedules
    from search.cli.main import main

    served = {}
    monkeypatch.setattr(flows.runtime, "warm_up_api", lambda services=False, database=None: None)
    monkeypatch.setattr(flows.runtime, "wait_for_api", lambda: None)
    monkeypatch.setattr(
        flows.schedules,
        "serve_deployments",
        lambda deployments, limit: served.update(d=deployments, limit=limit),
    )

    def serve(config: Path) -> tuple[list, int]:
        result = CliRunner().invoke(main, ["flows", "serve", "--config", str(config)])
        assert result.exit_code == 0, result.output
        return served["d"], served["limit"]

    return serve


@pytest.fixture(scope="session")
def prefect_api():
    """One temporary Prefect API for the whole session: starting one costs 8-16 s, so every
    test that runs a flow shares it (tests/search/cli/test_cli.py, tests/flows,
    tests/indexer/annotate)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread while a module runs (modules ask with `pytest.mark.usefixtures`): on a
    small shared machine torch's default thread pool spins against other processes, and the
    tiny model then runs many times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def heads(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """A random 2-label classifier and an every-word-is-B-LOC tagger, both head-only (they keep
    the tiny encoder's backbone, so one pass serves both)."""
    import torch
    from transformers import BertForSequenceClassification, BertForTokenClassification

    root = tmp_path_factory.mktemp("heads")
    torch.manual_seed(1)
    clf = BertForSequenceClassification.from_pretrained(
        tiny_model_dir, num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1}
    )
    ner = BertForTokenClassification.from_pretrained(
        tiny_model_dir,
        num_labels=5,
        id2label=dict(enumerate(NER_LABELS)),
        label2id={n: i for i, n in enumerate(NER_LABELS)},
    )
    with torch.no_grad():
        ner.classifier.weight.zero_()
        ner.classifier.bias.copy_(torch.tensor([0.0, 5.0, 0.0, 0.0, 0.0]))  # always B-LOC
    return {
        "clf": save_head(clf, tiny_model_dir, root / "clf"),
        "ner": save_head(ner, tiny_model_dir, root / "ner"),
    }


@pytest.fixture(scope="module")
def pair_bert(tmp_path_factory):
    """A random 2-layer BERT with a BERT tokenizer (token types) and BERT's own 0.02 init (the
    shared tiny encoder's wide 0.5 init suits embeddings, not fine-tuning)."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path = tmp_path_factory.mktemp("pair-bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS]
    BertTokenizerFast(
        vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True
    ).save_pretrained(path)
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=len(vocab),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
        )
    ).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def toy_head(pair_bert, tmp_path_factory):
    """A tiny pair head trained on the toy rule; (head dir, receipt, validation rows)."""
    from indexer.heads.data import read_head_data
    from indexer.heads.train import TrainSettings, train_head

    tmp = tmp_path_factory.mktemp("pair")
    train, val = toy_pairs(192, seed=1), toy_pairs(48, seed=2)
    data = read_head_data(
        "pair", write_jsonl(tmp / "train.jsonl", train), write_jsonl(tmp / "val.jsonl", val)
    )
    settings = TrainSettings(
        task="pair", base=pair_bert, out=tmp / "head", epochs=16, lr=3e-3, batch_size=16, threads=1
    )
    receipt = train_head(data, settings)
    return tmp / "head", receipt, val


# -- the order two workers share the suite in -----------------------------------------------------
# The real-data tests encode with the packaged model on one torch thread: SciFact alone is ~4 min
# of the 20-26 min of work on 2 cores (Intel, AMD), and started mid-run it finished last, alone.
# `make test` runs `--dist worksteal`, which gives the first half of the collected order to one
# worker and the second half to the other, and lets an idle worker take the end of the other's
# queue. So modules
# (a module's tests stay together: its module fixtures are built once) are weighed by their
# marks, shared longest first to the lighter half, and each half runs longest first: the long
# tests start at once on both workers and what is stolen at the end is short.
LONGEST = {"tests/indexer/query/test_hybrid.py": 300.0}  # SciFact + msmarco-subset: ~5 min


def _weight(item) -> float:
    marks = {m.name for m in item.iter_markers()}
    return 60.0 if "slow" in marks else 3.0 if "heavy" in marks else 0.3


def pytest_collection_modifyitems(config, items):
    """Longest modules first, shared between the halves worksteal hands out (above)."""
    if not items:
        return
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    weight = {
        path: LONGEST.get(path) or sum(map(_weight, tests)) for path, tests in modules.items()
    }
    halves: tuple[list[str], list[str]] = ([], [])
    loads = [0.0, 0.0]
    for path in sorted(modules, key=lambda p: -weight[p]):  # stable: ties keep their order
        side = int(loads[1] < loads[0])
        halves[side].append(path)
        loads[side] += weight[path]
    # worksteal splits the list at its middle: the first half must reach it, or the second
    # half's longest modules would queue behind the first's; its lightest modules move over
    count = sum(len(modules[p]) for p in halves[0])
    while count < len(items) // 2 and halves[1]:
        moved = halves[1].pop()
        halves[0].append(moved)
        count += len(modules[moved])
    halves[0].sort(key=lambda p: -weight[p])
    items[:] = [
        test
        for path in halves[0] + halves[1]
        for test in sorted(modules[path], key=lambda t: -_weight(t))  # stable within a module
    ]
