"""The machine description, the CPU-flags override and the encoder path `dtype: auto` picks from
it, and the int8 path on the tiny random BERT."""

import json

import numpy as np
import pytest
import torch

from indexer.config import ModelConfig
from indexer.core import machine
from indexer.encode import int8_check, limits
from indexer.encode.encoder import Encoder
from indexer.encode.policy import choose_dtype, choose_path, describe_path
from indexer.errors import ModelError

pytestmark = pytest.mark.heavy

CPU = torch.device("cpu")
TEXTS = [
    "the cat sat on the mat",
    "dog",
    "parse command line arguments with python",
    "red apple green pear",
    "the big river runs past the small city and the mountain",
    "compress a file with gzip and write data",
    "the dog slept on the sofa",
    "blue sea",
]


def test_override_replaces_the_cpus_flags(monkeypatch):
    monkeypatch.setenv(machine.FEATURES_ENV, "avx2, FMA")
    flags, source = machine.cpu_flags()
    assert flags == {"avx2", "fma"} and machine.FEATURES_ENV in source
    assert (machine.has_bf16(), machine.has_vnni(), machine.isa_class()) == (False, False, "avx2")
    monkeypatch.setenv(machine.FEATURES_ENV, "avx2,avx512f,avx512_vnni,avx512_bf16")
    assert machine.has_bf16() and machine.has_vnni() and machine.isa_class() == "avx512-bf16"
    monkeypatch.setenv(machine.FEATURES_ENV, "avx2 avx_vnni")
    assert machine.isa_class() == "avx2-vnni" and not machine.has_bf16()
    monkeypatch.delenv(machine.FEATURES_ENV)
    assert machine.cpu_flags()[1] == "/proc/cpuinfo"


@pytest.mark.parametrize(
    "flags, dtype, words",
    [
        ("avx2,fma", torch.float32, "no native bf16"),
        ("avx2,avx512f,avx512_bf16", torch.bfloat16, "native bf16 (avx512_bf16)"),
        ("avx2,amx_tile,amx_bf16", torch.bfloat16, "amx_bf16"),
    ],
)
def test_auto_follows_the_overridden_flags(monkeypatch, flags, dtype, words):
    monkeypatch.setenv(machine.FEATURES_ENV, flags)
    path = choose_path("auto", CPU)
    assert choose_dtype("auto", CPU) == dtype
    assert words in path.reason and f"{machine.FEATURES_ENV}={flags}" in path.reason
    assert choose_path("fp32", CPU).dtype == "fp32"  # a configured dtype ignores the flags
    with pytest.raises(ModelError, match="fp16 is not supported on CPU"):
        choose_path("fp16", CPU)


def record(model_dir, classes, variant="keep-ffn-out"):
    from indexer.records.provenance import weights_hash

    int8_check.write(
        model_dir / int8_check.CHECK_FILE,
        {"weights_hash": weights_hash(model_dir), "variant": variant, "classes": classes},
    )


def test_auto_picks_int8_only_with_a_passed_faster_check_for_this_class(monkeypatch, tmp_path):
    from testkit import build_tiny_bert

    model = build_tiny_bert(tmp_path / "m", layers=2)
    monkeypatch.setenv(machine.FEATURES_ENV, "avx2,fma")
    assert choose_path("auto", CPU, model).dtype == "fp32"  # no record
    assert "no int8 check recorded" in choose_path("auto", CPU, model).reason
    record(
        model,
        {
            "avx2": {"passed": True, "speed": {"fp32": 1.0, "int8": 1.4}},
            "avx512-bf16": {"passed": True, "speed": {"fp32": 1.0, "bf16": 2.5, "int8": 1.6}},
        },
    )
    path = choose_path("auto", CPU, model)
    assert (path.dtype, path.variant) == (
        "int8",
        "keep-ffn-out",
    ) and "passed on avx2" in path.reason
    monkeypatch.setenv(machine.FEATURES_ENV, "avx2,avx512f,avx512_bf16")
    assert choose_path("auto", CPU, model).dtype == "bf16"  # passed, but bf16 is faster here
    monkeypatch.setenv(machine.FEATURES_ENV, "avx2,avx_vnni")
    assert choose_path("auto", CPU, model).dtype == "fp32"  # no record for avx2-vnni
    record(model, {"avx2-vnni": {"passed": True, "speed": {"fp32": 1.0, "int8": 1.05}}})
    assert choose_path("auto", CPU, model).dtype == "fp32"  # passed, but not 10 % faster
    record(
        model,
        {
            "avx2-vnni": {
                "passed": False,
                "speed": {"fp32": 1.0, "int8": 1.9},
                "gates": {"min_cosine": {"passed": False}},
            }
        },
    )
    path = choose_path("auto", CPU, model)
    assert path.dtype == "fp32" and "failed on avx2-vnni (min_cosine)" in path.reason
    monkeypatch.setenv(machine.FEATURES_ENV, "avx2,fma")
    assert choose_path("auto", CPU, model).dtype == "int8"  # the classes were merged
    stored = json.loads((model / int8_check.CHECK_FILE).read_text())
    assert len(stored) == 1 and set(stored[0]["classes"]) == {"avx2", "avx512-bf16", "avx2-vnni"}


def test_int8_vectors_compare_with_fp32_ones(tiny_model_dir):
    """int8 and fp32 vectors of one model live in one index: close, same nearest documents,
    provenance agrees on the keys a query checks and records the path."""
    from indexer.records.provenance import QUERY_KEYS

    config = {"name": str(tiny_model_dir), "device": "cpu", "max_length": 32}
    fp32 = Encoder(ModelConfig(dtype="fp32", **config))
    int8 = Encoder(ModelConfig(dtype="int8", **config))
    from indexer.encode.quantize import Int8Linear

    assert int8.path.variant == "smooth"
    assert any(isinstance(m, Int8Linear) for m in int8.model.modules())
    a, b = fp32.encode_texts(TEXTS), int8.encode_texts(TEXTS)
    cos = (a * b).sum(axis=1)
    assert cos.min() > 0.9 and cos.mean() > 0.97, cos  # a random model with wide weights
    assert (np.argsort(-(b @ a.T), axis=1)[:, 0] == np.arange(len(TEXTS))).all()
    assert int8.provenance.dtype == "int8" and fp32.provenance.dtype == "fp32"
    assert int8.provenance.mismatches(fp32.provenance, QUERY_KEYS) == []
    assert "no int8 check recorded" in int8.path.reason  # explicit int8 without a record: allowed


def test_quantize_keeps_the_chosen_layers_fp32(tiny_model_dir):
    from transformers import AutoModel

    from indexer.encode.quantize import VARIANTS, quantizable, quantize_int8

    model = AutoModel.from_pretrained(tiny_model_dir).eval()
    names = quantizable(model, VARIANTS["keep-ffn-out"])
    assert names and not any(
        n.endswith("layer.0.output.dense") or n.startswith("pooler") for n in names
    )
    assert any(n.endswith("attention.output.dense") for n in names)
    last = model.config.num_hidden_layers - 1
    kept = quantizable(model, VARIANTS["keep-first-last"])
    assert not any(f"layer.{last}." in n or "layer.0." in n for n in kept)
    q = quantize_int8(model, "keep-ffn-out")
    assert type(q.encoder.layer[0].output.dense) is torch.nn.Linear
    assert type(q.encoder.layer[0].intermediate.dense) is not torch.nn.Linear
    assert type(model.encoder.layer[0].intermediate.dense) is torch.nn.Linear  # a copy
    with pytest.raises(ValueError, match="unknown int8 variant"):
        quantize_int8(model, "nope")
    with pytest.raises(ValueError, match="needs calibration"):
        quantize_int8(model, "smooth")


@pytest.mark.parametrize("smooth", [False, True])
def test_int8_linear_is_close_to_the_fp32_one_whatever_the_outliers(smooth):
    from indexer.encode.quantize import Int8Linear

    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 48)
    x = torch.randn(3, 10, 64)
    x[..., 5] *= 40  # one outlier channel, as BERT's layer-norm outputs have
    q = Int8Linear(layer, x.reshape(-1, 64).abs().amax(dim=0) if smooth else None)
    y, ref = q(x), layer(x)
    assert y.shape == ref.shape
    cos = torch.nn.functional.cosine_similarity(y.reshape(-1, 48), ref.reshape(-1, 48), dim=1)
    assert cos.min() > (0.999 if smooth else 0.99), cos.min()
    assert q.weight_t.dtype == torch.int8


@pytest.mark.parametrize("flags, levels", [("avx2,fma", 63), ("avx2,avx512f,avx512_vnni", 127)])
def test_int8_weights_stay_under_the_int16_sums_without_vnni(monkeypatch, flags, levels):
    from indexer.encode.quantize import Int8Linear

    monkeypatch.setenv(machine.FEATURES_ENV, flags)
    q = Int8Linear(torch.nn.Linear(16, 8))
    assert q.weight_levels == levels and int(q.weight_t.abs().max()) == levels


def test_machine_info_and_the_flop_count(monkeypatch):
    from transformers import BertConfig

    monkeypatch.setenv(machine.FEATURES_ENV, "avx2")
    info = limits.machine_info(["fp32", "int8"])
    assert info["isa"]["avx2"] and not info["isa"]["avx512f"] and info["isa_class"] == "avx2"
    assert info["emulated"] == {machine.FEATURES_ENV: "avx2"}
    assert info["libraries"]["torch"] == torch.__version__.split("+")[0] or info["libraries"][
        "torch"
    ].startswith(torch.__version__.split("+")[0])
    assert info["threads"]["torch_threads"] == torch.get_num_threads()
    assert all(v > 0 for v in info["matmul_peak_gflops"].values())
    assert info["cpu_model"]
    minilm = BertConfig(hidden_size=384, intermediate_size=1536, num_hidden_layers=6)
    assert limits.encode_flops(minilm, [256]) / 1e9 == pytest.approx(6.04, abs=0.01)
    assert limits.limit_share(6e9, 1.0, 12.0) == 0.5
    with pytest.raises(ValueError, match="fp32, bf16 or int8"):
        limits.matmul_peak("fp64")


def test_status_shows_the_encoder_path(monkeypatch, tmp_path, tiny_model_dir, small_corpus):
    from click.testing import CliRunner

    from indexer.config import Config
    from indexer.indexing.run import run_index
    from search.cli.main import main

    monkeypatch.setenv(machine.FEATURES_ENV, "avx2,fma")
    cfg = Config().with_overrides(
        **{
            "model.name": str(tiny_model_dir),
            "model.device": "cpu",
            "model.max_length": 16,
            "long_documents.stride": 4,
            "store.path": str(tmp_path / "s"),
        }
    )
    assert describe_path(cfg.model)["dtype"] == "fp32"
    run_index([str(small_corpus)], cfg, collection="news")
    out = CliRunner().invoke(
        main,
        ["status", "--store", str(tmp_path / "s"), "--json"],
        env={machine.FEATURES_ENV: "avx2,fma"},
    )
    assert out.exit_code == 0, out.output
    enc = json.loads(out.stdout)["encoder"]
    assert (enc["dtype"], enc["isa_class"], enc["configured"]) == ("fp32", "avx2", "auto")
    assert "no native bf16" in enc["reason"] and enc["emulated"]


def test_auto_runs_the_recorded_smoothed_variant(monkeypatch, tmp_path):
    """A passed record naming the calibrated variant: `auto` loads it (calibrating on stdlib
    docstrings) and its vectors stay close to fp32."""
    from testkit import build_tiny_bert

    from indexer.encode.quantize import Int8Linear

    model = build_tiny_bert(tmp_path / "m", layers=2)
    record(model, {"avx2": {"passed": True, "speed": {"fp32": 1.0, "int8": 1.3}}}, "smooth")
    monkeypatch.setenv(machine.FEATURES_ENV, "avx2")
    config = {"name": str(model), "device": "cpu", "max_length": 32}
    int8 = Encoder(ModelConfig(dtype="auto", **config))
    assert (int8.provenance.dtype, int8.path.variant) == ("int8", "smooth")
    layers = [m for m in int8.model.modules() if isinstance(m, Int8Linear)]
    assert layers and all(m.inv_smooth is not None and m.weight_levels == 63 for m in layers)
    a = Encoder(ModelConfig(dtype="fp32", **config)).encode_texts(TEXTS)
    cos = (a * int8.encode_texts(TEXTS)).sum(axis=1)
    assert cos.mean() > 0.97, cos
