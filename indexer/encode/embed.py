"""Texts to vectors one each, encoded as the index run encodes a document's window (or as a
search encodes a query), for callers outside the index run: the server's `POST /v1/embeddings`.

A document is [CLS] document prompt, text [SEP] (`indexer.ingest.chunking.make_windows`: the
prompt's tokens put before the text's, not tokenized with it), a query the query prompt and
the query tokenized together (`encode_queries`), so a text short enough for one window gets
the vector the store holds for it. Does not window long texts: one longer than the model's
limit is refused, or cut to its first window when asked. Runs on either encoder a search
uses (`indexer.encode.query_encoder.QueryEncoder`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from indexer.encode.coalesce import EncodeIds
from indexer.encode.query_encoder import QueryEncoder
from indexer.errors import InputError


class TooLong(InputError):
    """An input longer than the model's limit, with no leave to cut it."""

    def __init__(self, message: str, position: int):
        super().__init__(message)
        self.position = position


@dataclass(frozen=True)
class Embedded:
    """The vectors of some texts and the tokens each ran through the model (its special
    tokens and prompt included)."""

    vectors: np.ndarray  # (len(texts), dim) float32, in input order
    tokens: list[int]


def sequences(
    encoder: QueryEncoder, texts: Sequence[str], query: bool = False, truncate: bool = False
) -> list[list[int]]:
    """The framed token ids each text is encoded from.

    Args:
        encoder: the search's encoder (its `model` config gives the prompts and max length).
        texts: the inputs.
        query: encode as a search query (`model.query_prompt`) rather than as a document
            (`model.document_prompt`).
        truncate: cut a text past the limit to its first `max_length` tokens (the store's
            first window of it) instead of refusing it.
    Raises:
        TooLong: a text over the limit and `truncate` false; names its position and sizes.
    """
    config = encoder.config
    if query:
        prompt, prefix = config.query_prompt, []
        ids = encoder.tokenize([prompt + t for t in texts] if prompt else list(texts))
    else:
        prefix = list(encoder.document_prefix)
        ids = encoder.tokenize(list(texts))
    room = config.max_length - 2 - len(prefix)
    for position, text_ids in enumerate(ids):
        if len(text_ids) > room and not truncate:
            raise TooLong(
                f"input {position} is {len(text_ids) + 2 + len(prefix)} tokens, over this "
                f"model's maximum of {config.max_length} (its special tokens and "
                f"{'query' if query else 'document'} prompt included); shorten it, or ask to "
                "cut it to the limit",
                position,
            )
    return [encoder.wrap([*prefix, *text_ids[:room]]) for text_ids in ids]


def embed(
    encoder: QueryEncoder,
    seqs: Sequence[Sequence[int]],
    dimensions: int | None = None,
    encode_ids: EncodeIds | None = None,
) -> Embedded:
    """Encode framed sequences from `sequences`.

    Args:
        encoder: the encoder `seqs` were made for.
        seqs: framed token ids.
        dimensions: keep the first this many components and scale each vector back to unit
            length (Matryoshka-style truncation, as OpenAI's `dimensions`); None: all, as stored.
        encode_ids: what encodes them (a server's `indexer.encode.coalesce.Coalescer`, which
            merges concurrent requests); None: the encoder's own `encode_ids`.
    Returns:
        Embedded.
    Raises:
        InputError: `dimensions` above the model's.
    """
    dim = encoder.provenance.dim
    if dimensions is not None and dimensions > dim:
        raise InputError(f"dimensions {dimensions} is more than this model has ({dim})")
    run = encode_ids or encoder.encode_ids
    vectors = run(seqs) if seqs else np.zeros((0, dim), np.float32)
    if dimensions is not None and dimensions < dim:
        vectors = vectors[:, :dimensions]
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return Embedded(vectors, [len(s) for s in seqs])
