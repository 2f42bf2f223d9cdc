"""`POST /v1/embeddings` and `GET /v1/models` (issue 39): OpenAI's shapes, errors and caps in
process; the vectors equal the store's own document vectors (`Encoder.encode_texts` of the same
texts, the stored chunk vectors, the query prompt when asked) within the project's tolerance
(other batches, other kernels' summing order; indexer/ops/tolerance.py); and the real
`openai` SDK against a `bertindex serve` process, with and without a token."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from port_kit import free_port, start_serve, stop
from server_kit import BASE, app_for, prepare

from indexer.encode.encoder import load_encoder
from indexer.encode.onnx_runtime import OnnxEncoder
from indexer.indexing.run import run_index
from indexer.ops.tolerance import cosines, for_dtype
from indexer.store import Store
from search import openai_routes
from search.cli.main import main

pytestmark = pytest.mark.heavy  # a store indexed per test; one test starts `bertindex serve`

TEXTS = ["the cat sat on the mat", "compress a file with gzip", "", "red apple"]


def stored_single_windows(config) -> dict[str, np.ndarray]:
    """text -> stored vector of each document the index run encoded as one window."""
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        chunk_ids, doc_ids, _, _ = store.vectors.chunk_span_map()
        texts = dict(store.con.execute("SELECT doc_id, text FROM documents").fetchall())
        single = [d for d in set(doc_ids.tolist()) if (doc_ids == d).sum() == 1]
        wanted = np.sort(chunk_ids[np.isin(doc_ids, single)])
        vectors = store.vectors.fetch(wanted)
        owner = dict(zip(chunk_ids.tolist(), doc_ids.tolist()))
        return {texts[owner[c]]: v for c, v in zip(wanted.tolist(), vectors)}


@pytest.fixture
def served(tiny_config, small_corpus):
    """(TestClient, config, model id) over the small corpus, no tokens."""
    from fastapi.testclient import TestClient

    prepare(tiny_config, small_corpus, scopes=())
    store, app = app_for(tiny_config)
    with store:
        client = TestClient(app, base_url=BASE)
        model = client.get("/v1/models").json()["data"][0]["id"]
        yield client, tiny_config, model


def embed(client, model, inputs, **fields):
    return client.post("/v1/embeddings", json={"input": inputs, "model": model, **fields})


def floats(answer) -> np.ndarray:
    return np.array([d["embedding"] for d in answer.json()["data"]], np.float32)


def test_models_lists_the_served_encoder(served):
    client, config, model = served
    listed = client.get("/v1/models").json()
    assert listed == {
        "object": "list",
        "data": [{"id": model, "object": "model", "owned_by": "bertindex"}],
    }
    with Store(config.store.path, read_only=True) as store:
        assert model == store.vectors.provenance().model_name


def test_vectors_are_the_document_encoding_with_usage(served):
    client, config, model = served
    encoder = load_encoder(config.model)
    answer = embed(client, model, TEXTS)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "list" and body["model"] == model
    assert [(d["object"], d["index"]) for d in body["data"]] == [
        ("embedding", i) for i in range(len(TEXTS))
    ]
    # other batches than `encode_texts` makes: equal within the project's tolerance (a kernel
    # may sum in an order that depends on the batch's shape; indexer/ops/tolerance.py)
    tol = for_dtype(encoder.provenance.dtype)
    assert cosines(floats(answer), encoder.encode_texts(TEXTS)).min() >= tol.min_cosine
    tokens = sum(len(ids) + 2 for ids in encoder.tokenize(TEXTS))  # [CLS] text [SEP]
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    one = embed(client, model, TEXTS[0])  # a single string is a list of one
    assert cosines(floats(one), floats(answer)[:1]).min() >= tol.min_cosine  # a batch of 1
    # the vectors the store holds for the documents the index run encoded as one window
    stored = stored_single_windows(config)
    assert len(stored) >= 3
    texts = sorted(stored)
    served_vectors = floats(embed(client, model, texts))
    assert cosines(served_vectors, np.stack([stored[t] for t in texts])).min() >= tol.min_cosine


def test_base64_and_dimensions(served):
    client, config, model = served
    full = floats(embed(client, model, TEXTS))
    packed = embed(client, model, TEXTS, encoding_format="base64").json()["data"]
    unpacked = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in packed])
    np.testing.assert_array_equal(unpacked, full)
    dim = full.shape[1]
    cut = floats(embed(client, model, TEXTS, dimensions=8))
    assert cut.shape == (len(TEXTS), 8)
    expected = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, expected, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(floats(embed(client, model, TEXTS, dimensions=dim)), full)
    over = embed(client, model, TEXTS, dimensions=dim + 1)
    assert over.status_code == 400 and over.json()["error"]["param"] == "dimensions"
    assert f"({dim})" in over.json()["error"]["message"]


def test_errors_in_openai_shape(served):
    client, config, model = served
    wrong = embed(client, "text-embedding-3-small", "cat")
    assert wrong.status_code == 404
    error = wrong.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "model_not_found" and model in error["message"]
    for ids in ([101, 2003, 102], [[101, 102], [7]], ["cat", [5, 6]]):
        refused = embed(client, model, ids)
        assert refused.status_code == 400, ids
        assert "token-id inputs are not accepted" in refused.json()["error"]["message"]
    long = " ".join(["apple"] * 40)  # over the tiny config's 16 tokens
    too_long = embed(client, model, ["cat", long])
    assert too_long.status_code == 400
    error = too_long.json()["error"]
    assert error["code"] == "context_length_exceeded" and "input 1 is" in error["message"]
    assert "truncate" in error["message"]
    cut = embed(client, model, ["cat", long], truncate=True)
    assert cut.status_code == 200
    encoder = load_encoder(config.model)
    expected = encoder.encode_texts(["cat", long])  # its first window: the one the cut keeps
    assert cosines(floats(cut), expected).min() >= for_dtype(encoder.provenance.dtype).min_cosine
    assert cut.json()["usage"]["prompt_tokens"] == 3 + 16  # cut to the model's limit
    for bad in ({"input": "cat"}, {"model": model}, {"input": [], "model": model}):
        invalid = client.post("/v1/embeddings", json=bad)
        assert invalid.status_code == 400, bad
        assert invalid.json()["error"]["type"] == "invalid_request_error"
    unknown = embed(client, model, "cat", colour="red")
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "colour"


def test_caps_and_the_body_limit(served, monkeypatch):
    client, config, model = served
    many = embed(client, model, ["a"] * (openai_routes.MAX_INPUTS + 1))
    assert many.status_code == 400 and many.json()["error"]["param"] == "input"
    wide = embed(client, model, "a " * (openai_routes.MAX_INPUT_CHARS // 2 + 1))
    assert wide.status_code in (400, 413)  # the body limit (16 KB) refuses it first
    assert embed(client, model, "word " * 4000).status_code == 413  # the body limit holds
    monkeypatch.setattr(openai_routes, "MAX_REQUEST_TOKENS", 10)
    heavy = embed(client, model, ["the cat sat", "on the mat", "again"])
    assert heavy.status_code == 400
    assert heavy.json()["error"]["code"] == "max_tokens_per_request"


def test_prompts_document_and_query(tiny_config, small_corpus):
    """With prompts in the model config, `input` gets the document prompt as the index run
    puts it (its tokens before the text's), `input_type: query` the query prompt as a search."""
    from fastapi.testclient import TestClient

    config = tiny_config.with_overrides(
        **{"model.document_prompt": "passage: ", "model.query_prompt": "query: "}
    )
    prepare(config, small_corpus, scopes=())
    store, app = app_for(config)
    with store:
        client = TestClient(app, base_url=BASE)
        model = client.get("/v1/models").json()["data"][0]["id"]
        stored = stored_single_windows(config)
        texts = sorted(stored)
        documents = floats(embed(client, model, texts))
        encoder = load_encoder(config.model)
        tol = for_dtype(encoder.provenance.dtype)
        assert cosines(documents, np.stack([stored[t] for t in texts])).min() >= tol.min_cosine
        queries = floats(embed(client, model, texts, input_type="query"))
        assert cosines(queries, encoder.encode_queries(texts)).min() >= tol.min_cosine
        assert not np.allclose(queries, documents)


def test_the_onnx_query_encoder_matches_the_stored_vectors(tiny_config, small_corpus):
    """Served by the index version's ONNX export, the document vectors (the document prompt
    included) still match what the torch encoder stored, within the tolerance of the stored
    dtype (`indexer.ops.tolerance`)."""
    from fastapi.testclient import TestClient

    config = tiny_config.with_overrides(
        **{"search.query_encoder": "onnx", "model.document_prompt": "passage: "}
    )
    prepare(config, small_corpus, scopes=())
    store, app = app_for(config)
    with store:
        assert isinstance(app.app.app.state.searcher.encoder, OnnxEncoder)
        dtype = store.vectors.provenance().dtype
        client = TestClient(app, base_url=BASE)
        model = client.get("/v1/models").json()["data"][0]["id"]
        stored = stored_single_windows(config)
        texts = sorted(stored)
        served_vectors = floats(embed(client, model, texts))
        assert cosines(served_vectors, np.stack([stored[t] for t in texts])).min() >= (
            for_dtype(dtype).min_cosine
        )


def vector_of(embedding) -> np.ndarray:
    """A vector the SDK returned: floats, or base64 of little-endian float32."""
    if isinstance(embedding, str):
        return np.frombuffer(base64.b64decode(embedding), "<f4")
    return np.array(embedding, np.float32)


@pytest.mark.parametrize("with_token", [False, True])
def test_the_openai_sdk_against_bertindex_serve(tiny_config, small_corpus, tmp_path, with_token):
    openai = pytest.importorskip("openai")
    run_index([str(small_corpus)], tiny_config)
    token = "unused"  # the SDK needs a key; a store without tokens ignores it
    if with_token:
        created = CliRunner().invoke(
            main, ["token", "create", "--name", "sdk", "--store", tiny_config.store.path]
        )
        assert created.exit_code == 0, created.output
        token = created.stdout.strip().splitlines()[-1]
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(tiny_config.model_dump()))
    port = free_port()
    server = start_serve(config_file, port, "--workers", "1")  # several: test_metrics.py
    try:
        client = openai.OpenAI(api_key=token, base_url=f"http://127.0.0.1:{port}/v1")
        [model] = [m.id for m in client.models.list()]
        expected = load_encoder(tiny_config.model).encode_texts(TEXTS)
        tol = for_dtype("fp32")
        # unasked, the SDK asks for base64 and decodes it; asked for base64, it hands it on
        for fmt in ("float", "base64", None):
            asked = {"encoding_format": fmt} if fmt else {}
            answer = client.embeddings.create(model=model, input=TEXTS, **asked)
            got = np.stack([vector_of(d.embedding) for d in answer.data])
            assert isinstance(answer.data[0].embedding, str) == (fmt == "base64")
            assert cosines(got, expected).min() >= tol.min_cosine, fmt
            assert answer.usage.prompt_tokens == answer.usage.total_tokens > len(TEXTS) * 2
        cut = client.embeddings.create(model=model, input="the cat", dimensions=8)
        assert len(cut.data[0].embedding) == 8
        assert abs(np.linalg.norm(cut.data[0].embedding) - 1) < 1e-5
        with pytest.raises(openai.NotFoundError):
            client.embeddings.create(model="text-embedding-3-small", input="cat")
        if with_token:
            stranger = openai.OpenAI(api_key="bi_not-a-token", base_url=client.base_url)
            with pytest.raises(openai.AuthenticationError):
                stranger.embeddings.create(model=model, input="cat")
        else:
            raw = client.embeddings.with_raw_response.create(model=model, input="cat")
            assert raw.http_response.json()["data"][0]["index"] == 0
    finally:
        stop(server)
