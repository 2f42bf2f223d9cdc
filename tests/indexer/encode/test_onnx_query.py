"""The ONNX query encoder: exported when an index version is written (its large weights in a
file beside the graph), named with its sha256 in the version's provenance, equal to the torch
encoder (fp32) on ids, order and scores, used by a CLI search that never imports torch, and
replaced by torch with one stderr line when the export is missing or changed; its int8 twin
(`onnx-int8`), made once and checked likewise."""

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from testkit import ROOT, build_tiny_bert, tiny_model_config

from indexer.core.fsio import file_sha256, files_sha256
from indexer.core.machine import has_vnni
from indexer.encode.encoder import Encoder
from indexer.encode.onnx_export import export_encoder
from indexer.encode.onnx_files import (
    DATA_FILE,
    ENCODERS_DIR,
    EXTERNAL_MIN_BYTES,
    MODEL_FILE,
    Unavailable,
    export_parts,
    int8_files,
)
from indexer.encode.onnx_int8 import int8_twin
from indexer.encode.onnx_runtime import OnnxEncoder
from indexer.encode.query_encoder import QueryEncoder
from indexer.errors import ModelError
from indexer.indexing.run import run_index
from indexer.ops.tolerance import cosines, for_dtype
from indexer.query.searcher import Searcher
from indexer.records.versions import current_version, version_dir
from indexer.store import Store

pytestmark = pytest.mark.heavy

QUERIES = [
    "parse command line arguments",
    "cat",
    "the dog slept on the sofa",
    "compress a file with gzip and write data to the big city by train",
    "zzz unknownword",
    "red apple green pear blue river",
]

# the twin this CPU runs: 8-bit weights with VNNI, 7-bit without (`indexer.encode.onnx_int8`)
TWIN, TWIN_INFO = int8_files(reduce_range=not has_vnni())


@pytest.fixture
def tiny_config(tiny_config):
    """The tiny model with the default query encoder (`auto`)."""
    return tiny_config.with_overrides(**{"search.query_encoder": "auto"})


@pytest.fixture
def exported_store(tiny_config, small_corpus):
    """The small corpus indexed with the default query encoder: its version holds the export."""
    run_index([str(small_corpus)], tiny_config, collection="c")
    return tiny_config


def _version_info(store_path):
    folder = version_dir(store_path, current_version(store_path))
    return json.loads((folder / "provenance.json").read_text())


def test_index_exports_once_and_records_sha256(exported_store, small_corpus):
    store = exported_store.store.path
    record = _version_info(store)["query_encoder"]
    model_file = os.path.join(store, record["path"])
    assert record["path"].startswith(ENCODERS_DIR + "/") and record["path"].endswith(MODEL_FILE)
    assert files_sha256(export_parts(Path(model_file))) == record["sha256"]  # graph + weights
    mtime = os.stat(model_file).st_mtime_ns
    # a second run with nothing new publishes nothing and exports nothing again
    summary = run_index([str(small_corpus)], exported_store, collection="c")
    assert summary["index"]["version"] is None
    assert os.stat(model_file).st_mtime_ns == mtime


def test_query_encoder_torch_writes_no_export(tiny_config, small_corpus):
    cfg = tiny_config.with_overrides(**{"search.query_encoder": "torch"})
    run_index([str(small_corpus)], cfg, collection="c")
    assert _version_info(cfg.store.path)["query_encoder"] is None
    assert not os.path.exists(os.path.join(cfg.store.path, ENCODERS_DIR))


def test_onnx_search_equals_torch_fp32(exported_store):
    torch_cfg = exported_store.with_overrides(**{"search.query_encoder": "torch"})
    onnx_cfg = exported_store.with_overrides(**{"search.query_encoder": "onnx"})
    with Store(exported_store.store.path, read_only=True) as store:
        fast, slow = Searcher(onnx_cfg, store), Searcher(torch_cfg, store)
        assert isinstance(fast.encoder, OnnxEncoder) and isinstance(slow.encoder, Encoder)
        assert isinstance(fast.encoder, QueryEncoder) and isinstance(slow.encoder, QueryEncoder)
        # batched: queries of different lengths share a padded batch
        a, b = fast.encode_queries(QUERIES), slow.encode_queries(QUERIES)
        assert np.abs(a - b).max() < 1e-5
        for mode in ("dense", "hybrid"):
            for q in QUERIES:
                x = fast.search(q, 5, mode=mode)
                y = slow.search(q, 5, mode=mode)
                assert [h.id for h in x] == [h.id for h in y], (mode, q)
                assert np.allclose([h.score for h in x], [h.score for h in y], atol=1e-4)
        # `release` frees the weights even while something still holds the encoder (as the
        # routes of `serve`'s supervisor hold it): the session and the model are collected
        held = (fast.encoder, slow.encoder)
        weights = [weakref.ref(fast.encoder.session), weakref.ref(slow.encoder.model)]
        for encoder in held:
            encoder.release()
        gc.collect()
        assert [w() for w in weights] == [None, None]


def test_overlapping_calls_take_the_one_thread_session(exported_store):
    """Alone, a query runs on the multi-thread session; while another call is in
    flight, on the one-thread session: the same vectors either way."""
    import threading

    onnx_cfg = exported_store.with_overrides(**{"search.query_encoder": "onnx"})
    with Store(exported_store.store.path, read_only=True) as store:
        encoder = Searcher(onnx_cfg, store).encoder
        alone = encoder.encode_queries(QUERIES)
        assert encoder._single is None
        used, inside, release = [], threading.Event(), threading.Event()
        real = encoder.session.run

        def slow_run(*args, **kwargs):  # holds the first call in flight
            used.append("multi")
            inside.set()
            release.wait(10)
            return real(*args, **kwargs)

        encoder.session.run = slow_run
        first = threading.Thread(target=encoder.encode_queries, args=(QUERIES[:1],))
        first.start()
        assert inside.wait(10)
        overlapped = encoder.encode_queries(QUERIES)
        release.set()
        first.join(10)
        assert used == ["multi"] and encoder._single is not None
        assert np.abs(overlapped - alone).max() < 1e-5


@pytest.mark.parametrize("pooling", ["cls", "pooler", "last4"])
def test_every_pooling_exports_equal(tiny_config, tmp_path, pooling):
    cfg = tiny_config.with_overrides(**{"model.pooling": pooling, "model.normalize": False})
    encoder = Encoder(cfg.model)
    record = export_encoder(encoder, tmp_path)
    onnx = OnnxEncoder.open(tmp_path, record, cfg.model, encoder.provenance)
    want = encoder.encode_texts(QUERIES)
    assert np.abs(onnx.encode_texts(QUERIES) - want).max() < 1e-4 * max(1, np.abs(want).max())


def _cli(args, cwd, env_extra=None):
    code = (
        "import sys\nfrom search.cli.main import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code or 0\n"
        "else:\n    code = 0\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _config_file(cfg, path, **search):
    data = {
        "model": {k: getattr(cfg.model, k) for k in ("name", "dtype", "device", "max_length")},
        "long_documents": {"stride": 4},
        "search": search,
    }
    path.write_text(yaml.safe_dump(data))
    return path


def test_cli_search_never_imports_torch(exported_store, tmp_path):
    config = _config_file(exported_store, tmp_path / "c.yaml")
    result = _cli(
        [
            "search",
            "parse command line arguments",
            "--store",
            exported_store.store.path,
            "--config",
            str(config),
            "--json",
            "-k",
            "3",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines() == ["NO-TORCH"]
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    assert hits and hits[0]["id"] == "b1"


def test_large_weights_live_beside_the_graph_and_are_checked(exported_store):
    """Weights of 64 KB and more are in `model.onnx.data`, which onnxruntime maps; the
    version's sha256 covers both files, so a weights file changed or missing is refused by
    name; an export made before (one file, a record without `data`) encodes the same."""
    store = Path(exported_store.store.path)
    record = _version_info(store)["query_encoder"]
    model_file = store / record["path"]
    data = model_file.with_name(DATA_FILE)
    graph = onnx.load(str(model_file), load_external_data=False)
    apart = [t for t in graph.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert apart and "data" in record and data.stat().st_size >= EXTERNAL_MIN_BYTES
    assert data.stat().st_mode & 0o777 == model_file.stat().st_mode & 0o777  # as readable
    with Store(store, read_only=True) as s:
        stored = s.vectors.provenance()

    def encode(rec):
        return OnnxEncoder.open(store, rec, exported_store.model, stored).encode_queries(QUERIES)

    want = encode(record)
    graph_bytes, weights = model_file.read_bytes(), data.read_bytes()
    onnx.save_model(onnx.load(str(model_file)), str(model_file))  # the weights back inside
    data.unlink()
    st = model_file.stat()
    one_file = {k: v for k, v in record.items() if k != "data"}
    one_file |= {"sha256": file_sha256(model_file), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    np.testing.assert_array_equal(encode(one_file), want)
    with pytest.raises(Unavailable, match="FileNotFoundError.*model.onnx.data"):
        encode(record)
    model_file.write_bytes(graph_bytes)
    data.write_bytes(weights[:100] + bytes([weights[100] ^ 1]) + weights[101:])
    with pytest.raises(Unavailable, match="model.onnx and model.onnx.data differ from the sha256"):
        encode(record)


def test_missing_or_changed_export_falls_back_with_one_line(exported_store, tmp_path):
    record = _version_info(exported_store.store.path)["query_encoder"]
    model_file = os.path.join(exported_store.store.path, record["path"])
    with open(model_file, "r+b") as fh:  # a changed byte: its sha256 no longer matches
        fh.seek(200)
        byte = fh.read(1)
        fh.seek(200)
        fh.write(bytes([byte[0] ^ 1]))
    config = _config_file(exported_store, tmp_path / "c.yaml")
    args = [
        "search",
        "parse command line arguments",
        "--store",
        exported_store.store.path,
        "--config",
        str(config),
        "--json",
        "-k",
        "3",
    ]
    result = _cli(args, tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[1] == "TORCH", lines
    assert "sha256" in lines[0] and "torch" in lines[0]
    assert json.loads(result.stdout.splitlines()[0])["id"] == "b1"
    # `onnx` required: an error naming the file and the fix
    strict = exported_store.with_overrides(**{"search.query_encoder": "onnx"})
    with Store(exported_store.store.path, read_only=True) as store:
        with pytest.raises(
            ModelError,
            match="search.query_encoder is onnx but .*model.onnx and model.onnx.data differ from "
            "the sha256",
        ):
            Searcher(strict, store).search("cat", 3)
        os.remove(model_file)
        with pytest.raises(Unavailable, match="FileNotFoundError"):
            OnnxEncoder.open(store.path, record, exported_store.model, store.vectors.provenance())
        with pytest.raises(Unavailable, match="outside"):
            OnnxEncoder.open(
                store.path,
                {**record, "path": "../../x/model.onnx"},
                exported_store.model,
                store.vectors.provenance(),
            )


def test_a_bf16_encoder_exports_its_fp32_weights(tiny_config, tmp_path):
    """Indexing in bf16 (the `auto` dtype on CPUs with native bf16) still exports fp32, from
    the model directory's weights: the ONNX queries equal the fp32 torch ones."""
    bf16 = Encoder(tiny_config.model.model_copy(update={"dtype": "bf16"}))
    record = export_encoder(bf16, tmp_path)
    onnx = OnnxEncoder.open(tmp_path, record, tiny_config.model, bf16.provenance)
    want = Encoder(tiny_config.model).encode_texts(QUERIES)
    assert np.abs(onnx.encode_texts(QUERIES) - want).max() < 1e-5
    assert np.abs(bf16.encode_texts(QUERIES) - want).max() > 1e-4  # bf16 itself is not fp32


def test_onnx_int8_twin_is_made_once_checked_and_close(exported_store):
    """`onnx-int8`: the int8 twin is derived beside the fp32 export, recorded with both
    sha256s, reused while it checks out and made again when it does not; its queries stay
    close to fp32 and are not claimed to be fp32."""
    record = _version_info(exported_store.store.path)["query_encoder"]
    folder = os.path.join(exported_store.store.path, os.path.dirname(record["path"]))
    assert not os.path.exists(os.path.join(folder, TWIN))  # only when asked for
    int8_cfg = exported_store.with_overrides(**{"search.query_encoder": "onnx-int8"})
    fp32_cfg = exported_store.with_overrides(**{"search.query_encoder": "onnx"})
    with Store(exported_store.store.path, read_only=True) as store:
        fast, exact = Searcher(int8_cfg, store), Searcher(fp32_cfg, store)
        assert fast.encoder.model_file.name == TWIN
        assert fast.encoder.provenance.dtype == "int8" and exact.encoder.provenance.dtype == "fp32"
        with open(os.path.join(folder, TWIN_INFO)) as fh:
            info = json.load(fh)
        twin = os.path.join(folder, TWIN)
        assert info["source_sha256"] == record["sha256"]
        assert info["sha256"] == file_sha256(type(store.path)(twin))
        ops = {node.op_type for node in onnx.load(twin).graph.node}
        assert "MatMulInteger" in ops and "DynamicQuantizeLinear" in ops
        a, b = fast.encode_queries(QUERIES), exact.encode_queries(QUERIES)
        cosine = (a * b).sum(axis=1)
        # a random tiny model quantises worse than a trained one (SciFact: min 0.987)
        assert cosine.min() > 0.9 and np.abs(a - b).max() > 1e-5  # close, but not fp32
        # the same dense ranking as fp32 (hybrid ties within 0.01 on this random model)
        query = "parse command line arguments"
        assert [h.id for h in fast.search(query, 3, mode="dense")] == [
            h.id for h in exact.search(query, 3, mode="dense")
        ]
        mtime = os.stat(twin).st_mtime_ns
        assert Searcher(int8_cfg, store).encoder.model_file.name == TWIN
        assert os.stat(twin).st_mtime_ns == mtime  # reused, not made again
        with open(twin, "r+b") as fh:  # a changed byte: made again from the fp32 file
            fh.seek(100)
            byte = fh.read(1)
            fh.seek(100)
            fh.write(bytes([byte[0] ^ 1]))
        again = Searcher(int8_cfg, store).encoder
        assert file_sha256(type(store.path)(twin)) == info["sha256"]
        assert np.abs(again.encode_queries(QUERIES) - a).max() < 1e-6


def test_int8_twin_weight_bits_follow_the_cpu(exported_store, monkeypatch):
    """8-bit weights where the CPU has VNNI, 7-bit (no int16 saturation) where it has not;
    a store shared by both kinds keeps both twins side by side."""
    from indexer.core.machine import FEATURES_ENV

    record = _version_info(exported_store.store.path)["query_encoder"]
    model_file = Path(exported_store.store.path) / record["path"]
    monkeypatch.setenv(FEATURES_ENV, "avx2,fma")
    seven = int8_twin(model_file, record["sha256"])
    monkeypatch.setenv(FEATURES_ENV, "avx2,fma,avx512f,avx512_vnni")
    eight = int8_twin(model_file, record["sha256"])
    assert (seven.name, eight.name) == (int8_files(True)[0], int8_files(False)[0])
    bits = [
        json.loads((model_file.parent / int8_files(r)[1]).read_text())["weight_bits"]
        for r in (True, False)
    ]
    assert bits == [7, 8] and file_sha256(seven) != file_sha256(eight)


def test_int8_twin_of_a_broken_file_names_it(tmp_path):
    bad = tmp_path / MODEL_FILE
    bad.write_bytes(b"not an onnx model")
    with pytest.raises(Unavailable, match=f"cannot make the int8 twin of {bad}"):
        int8_twin(bad, "0" * 64)
    assert sorted(p.name for p in tmp_path.iterdir()) == [MODEL_FILE]  # no leftovers


def test_indexing_for_onnx_int8_makes_the_twin_then(tiny_config, small_corpus):
    cfg = tiny_config.with_overrides(**{"search.query_encoder": "onnx-int8"})
    run_index([str(small_corpus)], cfg, collection="c")
    record = _version_info(cfg.store.path)["query_encoder"]
    folder = os.path.join(cfg.store.path, os.path.dirname(record["path"]))
    assert os.path.exists(os.path.join(folder, TWIN))


@pytest.fixture(scope="module")
def no_layer_bert(tmp_path_factory):
    """A 0-layer BERT: its output is the embeddings alone, so the exporter drops the mask."""
    return build_tiny_bert(tmp_path_factory.mktemp("no-layer-bert"), layers=0)


def test_a_graph_without_the_mask_is_fed_what_it_declares(no_layer_bert, small_corpus, tmp_path):
    """A 0-layer model's export declares only `input_ids`: the ONNX queries (padded batches,
    the mask applied in the pooling) equal torch's, in and out of a search."""
    cfg = tiny_model_config(no_layer_bert, tmp_path / "store", **{"search.query_encoder": "onnx"})
    run_index([str(small_corpus)], cfg, collection="c")
    record = _version_info(cfg.store.path)["query_encoder"]
    graph = onnx.load(os.path.join(cfg.store.path, record["path"])).graph
    assert [i.name for i in graph.input] == ["input_ids"]
    torch_cfg = cfg.with_overrides(**{"search.query_encoder": "torch"})
    with Store(cfg.store.path, read_only=True) as store:
        fast, slow = Searcher(cfg, store), Searcher(torch_cfg, store)
        assert isinstance(fast.encoder, OnnxEncoder) and fast.encoder.feed_names == ("input_ids",)
        a, b = fast.encode_queries(QUERIES), slow.encode_queries(QUERIES)
        assert cosines(a, b).min() >= for_dtype("fp32").min_cosine
        # the padding is pooled out: a query alone equals itself in the padded batch
        assert cosines(fast.encode_queries(QUERIES[1:2]), a[1:2]).min() >= 1 - 1e-6
        hits = fast.search("parse command line arguments", 3, mode="dense")
        assert [h.id for h in hits] == [
            h.id for h in slow.search("parse command line arguments", 3, mode="dense")
        ]


def test_a_graph_asking_for_an_input_no_query_feeds_falls_back(exported_store, caplog, monkeypatch):
    """A graph that declares an input a query cannot give (`token_type_ids` here) is refused
    by name; `auto` then searches with torch after one line saying why."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from indexer.encode.onnx_runtime import _feed_names

    ins = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["b", "t"])
        for n in ("input_ids", "token_type_ids")
    ]
    out = helper.make_tensor_value_info("output", TensorProto.INT64, ["b", "t"])
    graph = helper.make_graph(
        [helper.make_node("Add", [i.name for i in ins], ["output"])], "g", ins, [out]
    )
    path = Path(exported_store.store.path) / "odd.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(
        Unavailable, match=r"odd.onnx declares the inputs \['input_ids', 'token_type_ids'\]"
    ):
        _feed_names(session, path)
    # the same refusal from inside `open`: `auto` falls back to torch with one warning
    monkeypatch.setattr(OnnxEncoder, "_session", lambda self, threads: session)
    with Store(exported_store.store.path, read_only=True) as store:
        searcher = Searcher(exported_store, store)
        with caplog.at_level("WARNING"):
            assert isinstance(searcher.encoder, Encoder)
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and "token_type_ids" in warnings[0] and "torch" in warnings[0]
        assert searcher.search("cat", 3)
