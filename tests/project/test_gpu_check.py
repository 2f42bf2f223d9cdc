"""The GPU run's dry run on a CPU (issue 31): a mini pack built in tmp (the tiny random BERT,
200 SciFact documents and their reference vectors, a tiny head, 200 tweets), then
`benchmarks/gpu_check.py --device cpu --limit 200` over it, in a process where duckdb, polars,
faiss, prefect and tantivy cannot be imported (as on the lent GPU image), so that the script
that machine runs cannot rot. Also: a wrong reference fails the correctness gate, and the pack
refuses a head whose backbone is not the model's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from testkit import ROOT, require_shared

sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402
import gpu_pack  # noqa: E402

pytestmark = pytest.mark.heavy

MAX_LENGTH = 64  # the GPU run's 256 costs 4-16x more here (attention grows with its square)


def tiny_head(model_dir: Path, out: Path, seed: int = 0) -> Path:
    """A randomly initialised [CLS] classifier on the tiny backbone (head-only: backbone as is)."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    torch.manual_seed(seed)
    model = BertForSequenceClassification.from_pretrained(
        model_dir,
        num_labels=2,
        id2label={0: "not-offensive", 1: "offensive"},
        label2id={"not-offensive": 0, "offensive": 1},
    )
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def narrow_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny BERT re-initialised with BERT's own range (0.02), 2 layers: the session model's
    wide weights (0.5) move by bf16 rounding more than any trained model's do."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    out = tmp_path_factory.mktemp("narrow-encoder")
    config = BertConfig.from_pretrained(tiny_model_dir, initializer_range=0.02, num_hidden_layers=2)
    torch.manual_seed(0)
    BertModel(config).eval().save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def mini_pack(tmp_path_factory, narrow_model_dir) -> Path:
    scifact = require_shared("scifact")
    require_shared("tweeteval")
    tmp = tmp_path_factory.mktemp("gpu-pack")
    head = tiny_head(narrow_model_dir, tmp / "head")
    argv = [
        "--out",
        str(tmp / "pack"),
        "--model",
        str(narrow_model_dir),
        "--head",
        str(head),
        "--scifact",
        str(scifact),
        "--limit",
        "200",
        "--tweets",
        "200",
        "--no-wheels",
        "--max-length",
        str(MAX_LENGTH),
    ]
    assert gpu_pack.main(argv) == 0
    first = json.loads((tmp / "pack" / gpu_check.MANIFEST).read_text())
    assert first["reference_computed_now"] and first["documents"] == 200
    assert gpu_pack.main(argv) == 0  # the second build keeps the cached reference vectors
    second = json.loads((tmp / "pack" / gpu_check.MANIFEST).read_text())
    assert not second["reference_computed_now"]
    assert second["head_tensors"] == ["classifier.bias", "classifier.weight"]  # pooler: the model's
    return tmp / "pack"


# run as the bare GPU image would: these packages are not there (faiss neither)
ABSENT = ("duckdb", "polars", "faiss", "prefect", "tantivy")
BLOCKED_RUN = """
import importlib.abc, runpy, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {absent!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (absent on the GPU image)")
sys.meta_path.insert(0, Absent())
sys.argv = ["gpu_check.py", *sys.argv[1:]]
runpy.run_path({script!r}, run_name="__main__")
"""


def test_dry_run_writes_one_report(mini_pack, tmp_path):
    out = tmp_path / "gpu_check.json"
    code = BLOCKED_RUN.format(absent=ABSENT, script=str(ROOT / "benchmarks" / "gpu_check.py"))
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "--pack",
            str(mini_pack),
            "--device",
            "cpu",
            "--limit",
            "200",
            "--max-length",
            str(MAX_LENGTH),
            "--repeats",
            "1",
            "--batch-tokens",
            "16384",
            "--st-batch-sizes",
            "32",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    report = json.loads(out.read_text())
    assert report["ok"] and report["wheels_installed"] == []
    correct = report["correctness"]
    # the pack's model is the bf16 copy (run in fp32 here), the reference the fp32 original
    assert correct["documents"] == 200 and correct["passed"] and correct["min_cosine"] >= 0.999
    speed = report["speed"]
    assert speed["passages"] == 200 and speed["max_length"] == MAX_LENGTH
    assert speed["bertindex"]["batch_tokens_16384"]["per_s"] > 0
    assert speed["sentence_transformers"]["batch_size_32"]["tokens_per_s"] > 0
    assert speed["min_cosine_bertindex_vs_sentence_transformers"] >= 0.9999
    assert speed["ratio_best_vs_best"] > 0 and "goals" not in speed  # speed goals: CUDA only
    annotate = report["annotate"]
    assert annotate["tweets"] == 200 and annotate["bertindex"]["per_s"] > 0
    assert annotate["pipeline_float32"]["label_agreement"] >= 0.99
    assert report["faiss"]["ran"] is False and report["faiss"]["tried"]
    assert "not installed" in report["faiss"]["why"]


def test_a_wrong_reference_fails_the_gate(mini_pack):
    from indexer.config import ModelConfig
    from indexer.encode.encoder import Encoder

    ids, texts = gpu_check.document_texts(mini_pack / gpu_check.CORPUS, 20)
    encoder = Encoder(
        ModelConfig(
            name=str(mini_pack / gpu_check.MODEL), device="cpu", dtype="fp32", max_length=MAX_LENGTH
        )
    )
    reference = np.load(mini_pack / gpu_check.REFERENCE)[:20]
    assert gpu_check.correctness(encoder, texts, ids, reference)["passed"]
    shifted = gpu_check.correctness(encoder, texts, ids, np.roll(reference, 1, axis=0))
    assert not shifted["passed"] and shifted["min_cosine"] < 0.999


def test_the_pack_refuses_a_head_with_its_own_backbone(tiny_model_dir, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    head = tiny_head(tiny_model_dir, tmp_path / "head")
    tensors = load_file(head / "model.safetensors")
    key = "bert.encoder.layer.0.attention.self.query.weight"
    tensors[key] = tensors[key] + torch.ones_like(tensors[key])  # as a full fine-tune would
    save_file(tensors, head / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(gpu_check.PackError, match=f"{key}.*--head-only"):
        gpu_pack.split_head(head, tiny_model_dir, tmp_path / "pack")


def test_a_pack_without_its_files_names_the_fix(tmp_path):
    with pytest.raises(gpu_check.PackError, match="make gpu-pack"):
        gpu_check.need(tmp_path, gpu_check.REFERENCE)
