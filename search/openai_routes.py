"""The OpenAI-compatible routes of `bertindex serve`: `POST /v1/embeddings` and `GET /v1/models`,
in OpenAI's request, response and error shapes, so the `openai` SDK and the libraries built on
it (LangChain's and LlamaIndex's OpenAI embeddings) embed with the served store's encoder.

The vectors are the store's own: the search's encoder (torch, or the index version's ONNX
export) encoding each input as the index run encodes a document, or a query when asked
(`indexer.encode.embed`). Token-id inputs are refused: the model's own tokenizer reads text.
Errors are `search.error_map.OpenAIError`; docs/guides/server.md describes the fields and caps.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from indexer.encode.coalesce import Coalescer, EncodeIds
from indexer.encode.embed import Embedded, TooLong, embed, sequences
from indexer.encode.query_encoder import QueryEncoder
from indexer.errors import InputError
from indexer.query.searcher import Searcher
from search.access import needs
from search.error_map import OpenAIError

MAX_INPUTS = 256  # texts per request
MAX_INPUT_CHARS = 20_000  # characters per text (past any model's limit: truncate decides)
MAX_REQUEST_TOKENS = 32_768  # tokens per request, all inputs together, prompts included
MAX_DIMENSIONS = 16_384  # above any encoder's width; the model's own width is checked too
MAX_TOKEN_IDS = 8_192  # a token-id input is refused, but read no further than this
MAX_NAME_CHARS = 256  # `model`, `user`

Text = Annotated[str, Field(max_length=MAX_INPUT_CHARS)]
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
TokenIds = Annotated[list[TokenId], Field(max_length=MAX_TOKEN_IDS)]


class EmbeddingsRequest(BaseModel):
    """The body of `POST /v1/embeddings`: OpenAI's fields, plus `input_type` and `truncate`.
    Unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")

    input: list[Text | TokenId | TokenIds] = Field(
        min_length=1,
        max_length=MAX_INPUTS,
        description="a text or a list of texts (token ids are refused: send text)",
    )
    model: str = Field(max_length=MAX_NAME_CHARS, description="the id `GET /v1/models` lists")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: each vector's little-endian float32 bytes"
    )
    dimensions: int | None = Field(
        None,
        ge=1,
        le=MAX_DIMENSIONS,
        description="keep the first this many components, scaled back to unit length",
    )
    user: str | None = Field(None, max_length=MAX_NAME_CHARS, description="accepted, unused")
    input_type: Literal["document", "query"] = Field(
        "document",
        description="query: encode as a search query (the query prompt) instead of a document",
    )
    truncate: bool = Field(
        False,
        description="cut an input over the model's limit to its first window instead of "
        "refusing it",
    )

    @field_validator("input", mode="before")
    @classmethod
    def one_or_many(cls, value):
        """One text, or one token-id list, is a list of one input (OpenAI accepts both)."""
        if isinstance(value, str) or (
            isinstance(value, list) and value and all(isinstance(x, int) for x in value)
        ):
            return [value]
        return value


def add_openai_routes(
    app, searcher: Searcher, pin_threads: Callable[[], None], count: Callable[[int, int], None]
) -> None:
    """Add `POST /v1/embeddings` and `GET /v1/models` (both need `read`) to `app`.

    Args:
        app: the FastAPI app of `search.server.create_app`.
        searcher: its loaded Searcher: its encoder encodes.
        pin_threads: called first in each request's thread (`search.server.thread_pinner`).
        count: called with (inputs, tokens) of each answer (`search.metrics`).
    """
    from fastapi.responses import Response

    encoder = searcher.encoder
    served = encoder.provenance.model_name
    # concurrent requests' texts merged into forwards, one at a time per core: the processes
    # of `serve --workers` do not share keep-alive connections evenly (16 went to one of two)
    coalescer = Coalescer(encoder.encode_ids, MAX_INPUTS, os.cpu_count() or 1)

    @app.get("/v1/models", dependencies=[needs("read")])
    def models() -> dict:
        """The served encoder, in OpenAI's model list shape."""
        return {
            "object": "list",
            "data": [{"id": served, "object": "model", "owned_by": "bertindex"}],
        }

    @app.post("/v1/embeddings", dependencies=[needs("read")])
    def embeddings(request: EmbeddingsRequest) -> Response:  # a plain def: on FastAPI's pool
        """One vector per input, as `bertindex index` encodes a document (or a search a
        query), with the tokens they took."""
        pin_threads()
        done = encode_request(encoder, served, request, coalescer.encode_ids)
        data = [
            {"object": "embedding", "index": i, "embedding": _encoded(v, request.encoding_format)}
            for i, v in enumerate(done.vectors)
        ]
        tokens = sum(done.tokens)
        count(len(data), tokens)
        body = {
            "object": "list",
            "data": data,
            "model": served,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return Response(json.dumps(body), media_type="application/json")


def encode_request(
    encoder: QueryEncoder,
    served: str,
    request: EmbeddingsRequest,
    encode_ids: EncodeIds | None = None,
) -> Embedded:
    """The vectors and token counts of a request's inputs, or the OpenAIError that refuses it:
    another model than `served`, token ids, an input over the model's limit without `truncate`,
    more tokens than `MAX_REQUEST_TOKENS`, more `dimensions` than the model has. `encode_ids`
    encodes (None: the encoder's own; the route's Coalescer)."""
    if request.model != served:
        raise OpenAIError(
            404,
            f"The model `{request.model}` does not exist: this server embeds with "
            f"`{served}` (GET /v1/models)",
            "model",
            "model_not_found",
        )
    texts = [x for x in request.input if isinstance(x, str)]
    if len(texts) < len(request.input):
        raise OpenAIError(
            400,
            "token-id inputs are not accepted: send the text, the server tokenizes it "
            "with the model's own tokenizer",
            "input",
            "invalid_input",
        )
    try:
        seqs = sequences(encoder, texts, request.input_type == "query", request.truncate)
        total = sum(len(s) for s in seqs)
        if total > MAX_REQUEST_TOKENS:
            raise OpenAIError(
                400,
                f"the inputs are {total} tokens together, over this server's cap of "
                f"{MAX_REQUEST_TOKENS} a request; send them in several requests",
                "input",
                "max_tokens_per_request",
            )
        done = embed(encoder, seqs, request.dimensions, encode_ids)
    except TooLong as exc:
        raise OpenAIError(
            400, f"{exc} (`truncate: true`)", "input", "context_length_exceeded"
        ) from None
    except InputError as exc:  # dimensions above the model's
        raise OpenAIError(400, str(exc), "dimensions") from None
    return done


def _encoded(vector, encoding_format: str):
    """A vector as OpenAI sends it: a list of floats, or its little-endian float32 bytes in
    base64."""
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()
