"""The query encoder a search uses: the `QueryEncoder` interface both encoders satisfy, and the
choice between the index version's ONNX export and the torch encoder (`search.query_encoder`).

Does not encode anything itself. Imports neither torch nor transformers unless it falls back
to the torch encoder (a cold ONNX search never loads torch).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from indexer.config import Config, ModelConfig
from indexer.encode.onnx_files import Unavailable
from indexer.encode.onnx_runtime import OnnxEncoder
from indexer.errors import ModelError
from indexer.records.provenance import QUERY_KEYS, Provenance

log = logging.getLogger(__name__)


@runtime_checkable
class QueryEncoder(Protocol):
    """What a search asks of its encoder (`indexer.query.searcher.Searcher`): the torch
    `indexer.encode.encoder.Encoder` and `indexer.encode.onnx_runtime.OnnxEncoder` both are one.
    """

    provenance: Provenance  # what produced its vectors, checked against the store's
    config: ModelConfig  # its prompts and max length

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """`model.query_prompt` + each query, one (len(queries), dim) float32 row each."""
        ...

    def release(self) -> None:
        """Free the weights; the encoder cannot encode afterwards."""
        ...

    # what `indexer.encode.embed` needs to encode texts as the index run encodes documents
    @property
    def document_prefix(self) -> list[int]:
        """The document prompt's token ids (empty: no prompt)."""
        ...

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text without special tokens, not truncated."""
        ...

    def wrap(self, ids: Sequence[int]) -> list[int]:
        """ids framed by the tokenizer's special tokens."""
        ...

    def encode_ids(self, sequences: Sequence[Sequence[int]]) -> np.ndarray:
        """One (len(sequences), dim) float32 row per framed id sequence, in input order."""
        ...


def load_query_encoder(config: Config, store, index) -> QueryEncoder:
    """The encoder a search uses for its queries (`search.query_encoder`).

    `auto`: the ONNX export the index version names when it checks out, else the torch
    encoder with one line on stderr saying why; `onnx`: the export or an error; `onnx-int8`:
    the export's int8 twin or an error; `torch`: the torch encoder. Either way the configured
    model must be the stored vectors' (else ProvenanceMismatch, as before).

    Args:
        config: the configuration (`search.query_encoder`, `model`).
        store: the open Store.
        index: the loaded VectorIndex (None: no index yet).
    Returns:
        The OnnxEncoder or the torch Encoder, its provenance checked against the store's.
    Raises:
        ModelError: `onnx` or `onnx-int8` asked for and the export cannot be used; the
            message says why and how to export it again.
    """
    mode = config.search.query_encoder
    encoder: QueryEncoder  # the export when it checks out, else the torch encoder
    if mode != "torch":
        try:
            if index is None:
                raise Unavailable(f"the store {store.path} has no index version yet")
            encoder = OnnxEncoder.open(
                store.path,
                index.query_encoder,
                config.model,
                store.vectors.provenance(),
                int8=mode == "onnx-int8",
            )
        except Unavailable as exc:
            fix = (
                f"index into --store {store.path} again to export it (unchanged documents "
                "are skipped)"
            )
            if mode != "auto":
                raise ModelError(
                    f"search.query_encoder is {mode} but {exc}; {fix}, or set "
                    "search.query_encoder to auto"
                ) from None
            log.warning("%s: encoding the query with torch (slower start); %s", exc, fix)
        else:
            store.vectors.check_provenance(encoder.provenance, QUERY_KEYS)
            return encoder
    from indexer.encode.encoder import load_encoder

    encoder = load_encoder(config.model)
    store.vectors.check_provenance(encoder.provenance, QUERY_KEYS)
    return encoder
