"""Encoder invariants on a tiny random BERT: order, padding, batching, pooling modes."""

import numpy as np
import pytest

from indexer.config import ModelConfig
from indexer.encode.encoder import Encoder, plan_batches
from indexer.encode.policy import choose_dtype

TEXTS = [
    "the cat sat on the mat",
    "dog",
    "parse command line arguments with python and write data to a file",
    "red apple",
    "the big river runs past the small city and the green mountain",
]


def make(tiny_model_dir, **kw):
    base = {"name": str(tiny_model_dir), "dtype": "fp32", "device": "cpu", "max_length": 32}
    return Encoder(ModelConfig(**(base | kw)))


def test_plan_batches_covers_every_position_under_budget():
    lengths = [5, 30, 7, 30, 2, 12, 12, 40]
    batches = plan_batches(lengths, batch_tokens=60)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(lengths)))
    for b in batches:
        longest = max(lengths[i] for i in b)
        assert len(b) == 1 or len(b) * longest <= 60
        assert lengths[b[0]] == longest  # longest first


@pytest.mark.parametrize("pooling", ["mean", "cls", "pooler", "last4"])
def test_padding_and_batching_never_change_a_vector(tiny_model_dir, pooling):
    enc = make(tiny_model_dir, pooling=pooling)
    together = enc.encode_texts(TEXTS)
    alone = np.stack([enc.encode_texts([t])[0] for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    # a budget that forces one sequence per batch gives the same vectors in the same order
    tight = make(tiny_model_dir, pooling=pooling, batch_tokens=64)
    np.testing.assert_allclose(tight.encode_texts(TEXTS), together, atol=1e-5)
    expected_dim = 32 * 4 if pooling == "last4" else 32
    assert together.shape == (len(TEXTS), expected_dim)


@pytest.mark.parametrize("pooling", ["mean", "last4"])
def test_streams_and_tight_batches_give_the_same_vectors_in_order(tiny_model_dir, pooling):
    texts = TEXTS * 7  # enough batches for every stream to run several
    one = make(tiny_model_dir, pooling=pooling, streams=1, max_waste=None, batch_tokens=64)
    many = make(tiny_model_dir, pooling=pooling, streams=3, max_waste=0.0, batch_tokens=64)
    assert many.streams == 3
    np.testing.assert_allclose(many.encode_texts(texts), one.encode_texts(texts), atol=1e-5)
    seqs = [one.wrap(ids) for ids in one.tokenize(texts)]
    keep = [[0, len(s) - 1] for s in seqs]
    for a, b in zip(many.token_states(seqs, keep), one.token_states(seqs, keep), strict=True):
        assert a.shape == (2, 32)
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_max_waste_zero_batches_hold_equal_lengths(tiny_model_dir):
    enc = make(tiny_model_dir, max_waste=0.0)
    lengths = [len(enc.wrap(ids)) for ids in enc.tokenize(TEXTS * 2)]
    for batch in enc.plan(lengths):
        assert len({lengths[i] for i in batch}) == 1
    with pytest.raises(ValueError, match="exceed max_length 32"):
        enc.plan([40])


def test_normalized_vectors_have_unit_length(tiny_model_dir):
    vectors = make(tiny_model_dir).encode_texts(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    raw = make(tiny_model_dir, normalize=False).encode_texts(TEXTS)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)


def test_mean_pooling_matches_manual_forward(tiny_model_dir):
    import torch

    enc = make(tiny_model_dir, normalize=False)
    ids = enc.wrap(enc.tokenize(["the cat sat"])[0])
    with torch.no_grad():
        hidden = enc.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
    np.testing.assert_allclose(enc.encode_ids([ids])[0], hidden.mean(0).numpy(), atol=1e-5)


def test_too_long_sequences_are_refused(tiny_model_dir):
    enc = make(tiny_model_dir, max_length=8)
    with pytest.raises(ValueError, match="exceed max_length 8"):
        enc.encode_ids([list(range(10))])


def test_bf16_stays_close_to_fp32(tiny_model_dir):
    fp32 = make(tiny_model_dir).encode_texts(TEXTS)
    bf16 = make(tiny_model_dir, dtype="bf16").encode_texts(TEXTS)
    assert (fp32 * bf16).sum(axis=1).min() > 0.99


def test_provenance_names_the_setup(tiny_model_dir):
    prov = make(tiny_model_dir, pooling="cls").provenance
    assert (prov.pooling, prov.dim, prov.dtype, prov.max_length) == ("cls", 32, "fp32", 32)
    assert len(prov.weights_hash) == 16


def test_auto_dtype_on_cpu_is_bf16_only_with_native_support():
    import torch

    from indexer.encode.policy import cpu_has_bf16

    expected = torch.bfloat16 if cpu_has_bf16() else torch.float32
    assert choose_dtype("auto", torch.device("cpu")) == expected


def test_default_streams_follow_the_calling_threads_torch_threads(tiny_model_dir, monkeypatch):
    """A server request's thread capped to one torch thread runs one stream, not one per core
    (which oversubscribed the cores); `model.streams` set in the config is kept."""
    import torch

    from indexer.encode import encoder as encoder_module

    seen: list[int] = []
    real = encoder_module.stream_map
    monkeypatch.setattr(encoder_module, "stream_map", lambda n: seen.append(n) or real(n))
    default = make(tiny_model_dir, batch_tokens=64)
    default.streams = 2  # as loaded on two cores
    configured = make(tiny_model_dir, batch_tokens=64, streams=2)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        default.encode_texts(TEXTS)
        configured.encode_texts(TEXTS)
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 2]
