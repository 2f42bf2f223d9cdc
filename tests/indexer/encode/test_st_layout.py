"""sentence-transformers model directories read as their authors meant: pooling, Normalize,
max_seq_length and query/document prompts as `model.*` defaults (config.yaml overrides), the
vectors equal to sentence-transformers' own on the same directory, provenance records them."""

import json

import numpy as np
import pytest

from indexer.config import Config
from indexer.encode.encoder import Encoder
from indexer.encode.onnx_export import export_encoder
from indexer.encode.onnx_runtime import OnnxEncoder
from indexer.errors import ConfigError
from indexer.indexing.run import run_index
from indexer.indexing.steps import encode_documents
from indexer.records.st_layout import model_defaults
from indexer.store import Store

pytestmark = pytest.mark.heavy

st = pytest.importorskip("sentence_transformers")

TEXTS = [
    "parse command line arguments in python",
    "the cat sat on the mat",
    "compress a file with gzip",
    "red apple green pear blue river big mountain",
]


def save_st(
    path,
    tiny_model_dir,
    pooling="cls",
    normalize=True,
    prompts=None,
    max_seq_length=24,
    similarity=None,
):
    """A tiny sentence-transformers model in its own layout, saved to `path`."""
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers import models

    word = models.Transformer(str(tiny_model_dir), max_seq_length=max_seq_length)
    dim = getattr(word, "get_embedding_dimension", None) or word.get_word_embedding_dimension
    pool = models.Pooling(dim(), pooling_mode=pooling)
    modules = [word, pool] + ([models.Normalize()] if normalize else [])
    model = SentenceTransformer(
        modules=modules, prompts=prompts, device="cpu", similarity_fn_name=similarity
    )
    model.save(str(path))
    return model


def _config(model_dir, tmp_path, **model):
    return Config().with_overrides(
        **{
            "model.name": str(model_dir),
            "model.dtype": "fp32",
            "model.device": "cpu",
            "long_documents.stride": 4,
            "store.path": str(tmp_path / "store"),
            **{f"model.{k}": v for k, v in model.items()},
        }
    )


@pytest.fixture(scope="module")
def st_cls(tmp_path_factory, tiny_model_dir):
    path = tmp_path_factory.mktemp("st-cls")
    model = save_st(path, tiny_model_dir, prompts={"query": "query: ", "document": "passage: "})
    return path, model


def test_defaults_come_from_the_directory(st_cls, tmp_path, tiny_model_dir):
    path, _ = st_cls
    cfg = _config(path, tmp_path)
    m = cfg.model
    assert (m.pooling, m.normalize, m.max_length) == ("cls", True, 24)
    assert (m.query_prompt, m.document_prompt) == ("query: ", "passage: ")
    # config.yaml (any set key) wins; the rest still come from the directory
    over = _config(path, tmp_path, pooling="mean", query_prompt="")
    assert (over.model.pooling, over.model.query_prompt, over.model.document_prompt) == (
        "mean",
        "",
        "passage: ",
    )
    # another model.name reads that model's own (a plain HF dir: bertindex's defaults)
    plain = cfg.with_overrides(**{"model.name": str(tiny_model_dir)})
    assert (plain.model.pooling, plain.model.max_length, plain.model.query_prompt) == (
        "mean",
        256,
        "",
    )


def test_queries_and_documents_equal_sentence_transformers(st_cls, tmp_path):
    path, model = st_cls
    cfg = _config(path, tmp_path)
    encoder = Encoder(cfg.model)
    want_q = model.encode(TEXTS, prompt_name="query", convert_to_numpy=True)
    want_d = model.encode(TEXTS, prompt_name="document", convert_to_numpy=True)
    assert np.abs(encoder.encode_queries(TEXTS) - want_q).max() < 1e-5
    _, chunks = encode_documents(encoder, TEXTS, cfg)  # one window each: no chunking here
    assert list(chunks.doc_ids) == [0, 1, 2, 3]
    assert np.abs(chunks.vectors - want_d).max() < 1e-5
    assert np.abs(want_q - want_d).max() > 1e-3  # the prompts do change the vectors
    # the ONNX query encoder applies the same prompt
    record = export_encoder(encoder, tmp_path)
    onnx = OnnxEncoder.open(tmp_path, record, cfg.model, encoder.provenance)
    assert np.abs(onnx.encode_queries(TEXTS) - want_q).max() < 1e-5


def test_provenance_records_what_was_used(st_cls, tmp_path, small_corpus):
    path, _ = st_cls
    cfg = _config(path, tmp_path)
    run_index([str(small_corpus)], cfg, collection="c")
    with Store(cfg.store.path, read_only=True) as store:
        p = store.vectors.provenance()
    assert (p.pooling, p.normalize, p.max_length) == ("cls", True, 24)
    assert (p.query_prompt, p.document_prompt) == ("query: ", "passage: ")
    # adding vectors made with another document prompt is refused
    other = cfg.with_overrides(**{"model.document_prompt": "doc: "})
    with pytest.raises(Exception, match="document_prompt"):
        run_index([str(small_corpus)], other, collection="d")


def test_dot_product_model_without_normalize(tmp_path, tiny_model_dir):
    path = tmp_path / "st-dot"
    model = save_st(path, tiny_model_dir, pooling="mean", normalize=False, similarity="dot")
    cfg = _config(path, tmp_path)
    assert (cfg.model.pooling, cfg.model.normalize) == ("mean", False)
    want = model.encode(TEXTS, convert_to_numpy=True)
    got = Encoder(cfg.model).encode_texts(TEXTS)
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()
    assert np.abs(np.linalg.norm(got, axis=1) - 1).max() > 1e-2  # not normalised


def test_older_layout_and_unsupported_settings(tmp_path, tiny_model_dir):
    path = tmp_path / "st-old"
    save_st(path, tiny_model_dir, pooling="mean")
    # sentence-transformers 2.x files: flags per mode, max_seq_length in sentence_bert_config
    (path / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": 32,
                "pooling_mode_cls_token": False,
                "pooling_mode_mean_tokens": True,
                "pooling_mode_max_tokens": False,
            }
        )
    )
    (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 40}))
    assert model_defaults(path)["max_length"] == 40
    assert model_defaults(path)["pooling"] == "mean"
    (path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "max"}))
    with pytest.raises(
        ConfigError,
        match=r"1_Pooling/config.json asks for max pooling.*"
        r"model.pooling",
    ):
        _config(path, tmp_path)
    assert _config(path, tmp_path, pooling="mean").model.pooling == "mean"  # overridden
    modules = json.loads((path / "modules.json").read_text())
    modules.append(
        {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"}
    )
    (path / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ConfigError, match="modules.json chains module.s. Dense"):
        _config(path, tmp_path, pooling="mean")
