"""`bertindex adapt`: the masking rule, the loss on chosen positions only, a tiny model
learning a toy corpus, the saved directory as an encoder, and a resume after a kill ending
where an unbroken run ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from adapt_kit import TOY, settings, toy_texts
from testkit import ROOT, SUPPORT, TINY_WORDS

from indexer.adapt.masking import IGNORE, MaskRule, mask_tokens

pytestmark = pytest.mark.heavy


def test_the_rule_chooses_15_percent_and_splits_them_80_10_10_never_a_special():
    ids = torch.randint(5, 2000, (500, 400))
    candidates = torch.ones_like(ids, dtype=torch.bool)
    candidates[:, 0] = candidates[:, -1] = False  # [CLS] and [SEP]
    candidates[:, 300:] = False  # padding
    g = torch.Generator().manual_seed(1)
    inputs, labels = mask_tokens(ids, candidates, 4, torch.arange(5, 2000), MaskRule(), g)
    chosen = labels != IGNORE
    assert not chosen[~candidates].any()
    assert (inputs[~candidates] == ids[~candidates]).all()  # specials and padding untouched
    share = chosen.sum() / candidates.sum()
    assert abs(share - 0.15) < 0.01 * 0.15 * 10  # within 1 point: 0.14..0.16
    assert abs(float(share) - 0.15) < 0.01
    masked = (inputs[chosen] == 4).float().mean()
    changed = (inputs[chosen] != 4) & (inputs[chosen] != ids[chosen])
    assert abs(float(masked) - 0.8) < 0.01
    # random draws that happen to equal the original count as kept: 1 in 1,995 of them
    assert abs(float(changed.float().mean()) - 0.1) < 0.01
    assert abs(float((inputs[chosen] == ids[chosen]).float().mean()) - 0.1) < 0.01
    assert (labels[chosen] == ids[chosen]).all() and (labels[~chosen] == IGNORE).all()


def test_whole_word_masking_chooses_every_subword_of_a_word_together():
    words = torch.arange(300).repeat_interleave(3).reshape(1, -1).repeat(200, 1)  # 3 subwords each
    ids = torch.randint(5, 1000, words.shape)
    candidates = torch.ones_like(ids, dtype=torch.bool)
    inputs, labels = mask_tokens(
        ids,
        candidates,
        4,
        torch.arange(5, 1000),
        MaskRule(whole_word=True),
        torch.Generator().manual_seed(2),
        words,
    )
    chosen = (labels != IGNORE).reshape(200, 300, 3)
    assert (chosen.all(-1) == chosen.any(-1)).all()
    assert abs(float(chosen.float().mean()) - 0.15) < 0.01


def test_sequences_never_offer_special_tokens_even_written_in_the_text(tiny_model_dir):
    from transformers import AutoTokenizer

    from indexer.adapt.corpus import tokenize
    from indexer.encode.model_facts import special_tokens

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    sp = special_tokens(tok, "tiny")
    seqs, origin = tokenize(
        tok, ["the cat [SEP] sat", " ".join(["cat"] * 40)], 16, sp.prefix, sp.suffix
    )
    assert origin == [0, 1, 1, 1]  # 40 words cut into windows of 14: none lost
    assert sum(len(s) - 2 for s in seqs.ids[1:]) == 40
    special = set(tok.all_special_ids)
    for ids, cand in zip(seqs.ids, seqs.candidates):
        assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
        assert not any(c for i, c in zip(ids, cand) if int(i) in special)
        assert all(c for i, c in zip(ids, cand) if int(i) not in special)


def test_the_loss_is_on_chosen_positions_only_and_the_sparse_head_equals_the_full_model(
    tiny_model_dir,
):
    from indexer.adapt.mlm import head_logits, load_mlm, mlm_loss

    model, info = load_mlm(tiny_model_dir, seed=0)
    assert info["head"] == "fresh" and info["tied"]
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    model.eval()
    ids = torch.randint(5, 40, (3, 10))
    labels = torch.full_like(ids, IGNORE)
    labels[0, 2], labels[1, 5], labels[2, 7] = 7, 8, 9
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    with torch.no_grad():
        sparse, _, n = mlm_loss(model, batch, head_logits(model), token_types=True)
        full, _, n_full = mlm_loss(model, batch, None, token_types=True)
        logits = model(
            input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids)
        ).logits
    expected = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE
    )
    assert n == n_full == 3
    assert torch.allclose(sparse, expected, atol=1e-5) and torch.allclose(full, expected, atol=1e-5)
    # a label moved to an unchosen position changes nothing else: only chosen ones count
    labels2 = labels.clone()
    labels2[0, 3] = IGNORE
    with torch.no_grad():
        same, _, _ = mlm_loss(model, {**batch, "labels": labels2}, head_logits(model), True)
    assert torch.allclose(same, sparse)


@pytest.fixture(scope="module")
def adapted(tiny_model_dir, tmp_path_factory):
    from indexer.adapt.run import adapt

    out = tmp_path_factory.mktemp("adapted") / "enc"
    receipt = adapt(toy_texts(), {"kind": "test"}, settings(tiny_model_dir, out))
    return out, receipt


def test_a_tiny_model_learns_the_toy_corpus_and_the_receipt_says_how(adapted):
    out, receipt = adapted
    history = receipt["history"]
    assert [h["epoch"] for h in history] == [0, 1, 2, 3, 4, 5, 6]
    assert history[-1]["held_out_loss"] < 0.6 * history[0]["held_out_loss"]
    assert history[-1]["held_out_accuracy"] > history[0]["held_out_accuracy"]
    assert receipt["tokens_seen"] == 6 * receipt["data"]["train_tokens"]
    assert receipt["masking"]["mask_prob"] == 0.15 and receipt["masking"]["keep"] == 0.1
    assert receipt["head"]["head"] == "fresh" and receipt["stopped"] == "epochs"
    saved = json.loads((out / "adapt-receipt.json").read_text())
    assert saved["tokens_seen"] == receipt["tokens_seen"]
    assert not (out / "adapt-checkpoint.pt").exists()


def test_the_saved_directory_is_an_encoder_that_indexes_and_trains_heads(
    adapted, tiny_model_dir, tmp_path
):
    from transformers import AutoModel

    from indexer.adapt.mlm import HEAD_FILE, load_mlm
    from indexer.config import Config
    from indexer.encode.encoder import Encoder
    from indexer.heads.data import HeadData
    from indexer.heads.train import TrainSettings, train_head

    out, _ = adapted
    model = AutoModel.from_pretrained(out)
    base = AutoModel.from_pretrained(tiny_model_dir)
    assert torch.equal(model.pooler.dense.weight, base.pooler.dense.weight)  # kept from the base
    assert not torch.equal(
        model.embeddings.word_embeddings.weight, base.embeddings.word_embeddings.weight
    )  # adapted
    assert (out / HEAD_FILE).is_file()
    again, info = load_mlm(out, seed=5)  # adapting again starts from the saved head
    assert info["head"] == "loaded"
    cfg = Config().with_overrides(
        **{
            "model.name": str(out),
            "model.dtype": "fp32",
            "model.max_length": 16,
            "long_documents.stride": 4,
        }
    )
    vectors = Encoder(cfg.model).encode_texts(["the cat sat", "red river"])
    assert vectors.shape[0] == 2 and np.isfinite(vectors).all()
    from indexer.heads.registry import head_type

    kind, names = head_type("classifier"), ["pet", "thing"]

    def split(texts, prefix):
        return [
            kind.example(
                f"{prefix}{i}", {"text": t, "label": int("apple" in t or "pear" in t)}, names, "toy"
            )
            for i, t in enumerate(texts)
        ]

    data = HeadData(
        task="classifier",
        label_names=names,
        splits={"train": split(toy_texts(24), "t"), "validation": split(TOY, "v")},
        sources={"train": "toy", "validation": "toy"},
    )
    receipt = train_head(
        data,
        TrainSettings(
            task="classifier", base=out, out=tmp_path / "head", epochs=1, batch_size=8, seed=0
        ),
    )
    assert str(out) in json.dumps(receipt["base_model"])


def test_finished_and_foreign_out_dirs_are_refused(adapted, tiny_model_dir, tmp_path):
    from indexer.adapt.run import adapt
    from indexer.errors import InputError

    out, _ = adapted
    with pytest.raises(InputError, match="holds a finished adaptation"):
        adapt(toy_texts(), {}, settings(tiny_model_dir, out))
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.md").write_text("x")
    with pytest.raises(InputError, match="neither an adaptation in progress"):
        adapt(toy_texts(), {}, settings(tiny_model_dir, other))


RUN = """
import sys
from pathlib import Path
from indexer.adapt.run import AdaptSettings, adapt
from adapt_kit import toy_texts, settings
adapt(toy_texts(), {{"kind": "test"}}, settings(Path({model!r}), Path({out!r}),
      checkpoint_steps=4, epochs=2))
"""


def _run(model_dir: Path, out: Path, crash: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(SUPPORT)])}
    env.pop("BERTINDEX_CRASH_AT", None)
    if crash:
        env["BERTINDEX_CRASH_AT"] = crash
    return subprocess.run(
        [sys.executable, "-c", RUN.format(model=str(model_dir), out=str(out))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_run_killed_after_a_checkpoint_resumes_to_the_weights_of_an_unbroken_run(
    tiny_model_dir, tmp_path
):
    from safetensors.torch import load_file

    whole, broken = tmp_path / "whole", tmp_path / "broken"
    assert _run(tiny_model_dir, whole, None).returncode == 0
    killed = _run(tiny_model_dir, broken, "adapt.after_checkpoint:3")
    assert killed.returncode == -9, killed.stderr
    assert (broken / "adapt-checkpoint.pt").is_file() and not (
        broken / "adapt-receipt.json"
    ).exists()
    resumed = _run(tiny_model_dir, broken, None)
    assert resumed.returncode == 0, resumed.stderr
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(broken / "model.safetensors"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    ra = json.loads((whole / "adapt-receipt.json").read_text())
    rb = json.loads((broken / "adapt-receipt.json").read_text())
    assert rb["resumed"] and rb["resumed"][0]["at_step"] == 12
    assert [h["held_out_loss"] for h in ra["history"]] == [
        h["held_out_loss"] for h in rb["history"]
    ]
    assert ra["tokens_seen"] == rb["tokens_seen"]


def test_a_checkpoint_of_other_settings_is_not_resumed(tiny_model_dir, tmp_path):
    from indexer.adapt.run import adapt
    from indexer.errors import InputError

    out = tmp_path / "o"
    assert _run(tiny_model_dir, out, "adapt.after_checkpoint:1").returncode == -9
    with pytest.raises(InputError, match="checkpoint is of another run"):
        adapt(toy_texts(), {}, settings(tiny_model_dir, out, checkpoint_steps=4, epochs=2, lr=1e-3))


def test_max_tokens_bounds_the_run(tiny_model_dir, tmp_path):
    from indexer.adapt.run import adapt

    receipt = adapt(toy_texts(), {}, settings(tiny_model_dir, tmp_path / "o", max_tokens=100))
    assert receipt["stopped"] == "max_tokens"
    assert 100 <= receipt["tokens_seen"] < 100 + 8 * 16
    assert receipt["history"][-1]["fraction_of_epoch"] < 1


def test_the_cli_adapts_on_text_files_and_on_a_store_collection(
    tiny_config, tiny_model_dir, small_corpus, tmp_path
):
    import yaml
    from click.testing import CliRunner

    from indexer.indexing.run import run_index
    from search.cli.main import main

    corpus = tmp_path / "tweets.txt"
    corpus.write_text("\n".join(toy_texts(60)) + "\n\n" + "\n")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config.model_dump()))
    runner = CliRunner()
    args = ["--max-length", "16", "--batch-size", "8", "--config", str(config), "--json"]
    result = runner.invoke(main, ["adapt", str(corpus), "--out", str(tmp_path / "a"), *args])
    assert result.exit_code == 0, result.output
    receipt = json.loads(result.stdout.splitlines()[-1])
    assert receipt["data"]["kind"] == "files" and receipt["data"]["documents"] == 60
    assert receipt["data"]["files"][0]["path"] == str(corpus)
    run_index([str(small_corpus)], tiny_config)
    result = runner.invoke(main, ["adapt", "--out", str(tmp_path / "b"), *args])
    assert result.exit_code == 0, result.output
    receipt = json.loads(result.stdout.splitlines()[-1])
    assert receipt["data"]["kind"] == "store" and receipt["data"]["collection"] == "default"
    missing = runner.invoke(
        main, ["adapt", "--collection", "nope", "--out", str(tmp_path / "c"), *args]
    )
    assert missing.exit_code == 1 and "collection 'nope' holds no documents" in missing.output


@pytest.mark.parametrize("family", ["roberta", "distilbert", "modernbert"])
def test_other_families_adapt_and_load_back(family, tmp_path):
    from families import available, build_family, sentences

    if not available(family):
        pytest.skip(f"transformers has no {family}")
    from transformers import AutoModel

    from indexer.adapt.run import adapt

    model_dir = build_family(family, tmp_path / family)
    receipt = adapt(
        sentences(80), {}, settings(model_dir, tmp_path / "out", epochs=1, max_length=32, lr=1e-3)
    )
    assert receipt["head"]["head"] == "fresh"
    assert receipt["history"][-1]["held_out_loss"] is not None
    AutoModel.from_pretrained(tmp_path / "out")


assert TINY_WORDS  # the toy corpus draws on the tiny tokenizer's words
