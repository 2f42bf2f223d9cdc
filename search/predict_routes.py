"""`POST /predict` and `POST /annotate` of `bertindex serve`: the heads `serve --heads` loaded,
run over a request's texts as `bertindex annotate` runs them (`indexer.annotate.served`).

- `POST /predict`, text classification in TEI's (Text Embeddings Inference) shape:
  `{"inputs": str | [str], "raw_scores", "truncate", "head"}`, answered for one string with a
  list of `{"label", "score"}`, best first, and for a list with one such list per input.
- `POST /annotate`, entity spans from a tagger (NER): `{"inputs": str | [str], "head"}`,
  answered for one string with a list of `{"type", "start", "end", "text", "score"}` (character
  offsets into the text, end exclusive), for a list with one such list per input.

`head` names one of the loaded heads of the route's kind; it may be left out when one is
loaded. None loaded: 404 naming `serve --heads`. The caps (MAX_INPUTS, MAX_INPUT_CHARS,
MAX_REQUEST_TOKENS) are listed in docs/guides/server.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from indexer.encode.embed import TooLong
from indexer.errors import InputError
from search.access import needs
from search.error_map import NotFound

if TYPE_CHECKING:  # torch loads where heads are loaded (`search.workers`), not with the routes
    from indexer.annotate.served import ServedHeads, Tokenized

MAX_INPUTS = 256  # texts per request
MAX_INPUT_CHARS = 20_000  # characters per text
MAX_REQUEST_TOKENS = 32_768  # tokens the head runs per request (`ServedHeads.cost`)
MAX_NAME_CHARS = 200  # `head`

Text = Annotated[str, Field(max_length=MAX_INPUT_CHARS)]
KINDS = {  # spans? -> (what the heads are, the `bertindex train` command that makes one)
    False: ("classifier", "bertindex train classifier"),
    True: ("tagger (NER)", "bertindex train ner"),
}


class HeadRequest(BaseModel):
    """The body of `POST /annotate`, and the fields `POST /predict` shares; unknown fields are
    refused (422)."""

    model_config = ConfigDict(extra="forbid")

    inputs: list[Text] = Field(
        min_length=1, max_length=MAX_INPUTS, description="a text, or a list of texts"
    )
    head: str | None = Field(
        None,
        max_length=MAX_NAME_CHARS,
        description="the loaded head to run (None: the one of this route's kind)",
    )
    _single: bool = PrivateAttr(False)  # `inputs` was one string: answer with one result

    @model_validator(mode="wrap")
    @classmethod
    def _one_or_many(cls, data, handler):
        """One string is a list of one input, answered with that input's result alone."""
        single = isinstance(data, dict) and isinstance(data.get("inputs"), str)
        request = handler({**data, "inputs": [data["inputs"]]} if single else data)
        request._single = single
        return request

    def answer(self, per_input: list) -> list:
        """The results in the request's shape: one input's own, or one per input."""
        return per_input[0] if self._single else per_input


class PredictRequest(HeadRequest):
    """The body of `POST /predict` (TEI's fields)."""

    raw_scores: bool = Field(
        False, description="the head's logits instead of its probabilities (same order)"
    )
    truncate: bool = Field(
        False,
        description="read an input longer than the head's window in its first window "
        "instead of refusing it",
    )


def add_predict_routes(app, heads: ServedHeads | None, pin_threads: Callable[[], None]) -> None:
    """Add `POST /predict` and `POST /annotate` (both need `read`) to `app`.

    Args:
        app: the FastAPI app of `search.server.create_app`.
        heads: the heads `serve --heads` loaded (None: none; both routes answer 404).
        pin_threads: called first in each request's thread (`search.server.thread_pinner`).
    """
    from fastapi.responses import Response

    @app.post("/predict", dependencies=[needs("read")])
    def predict(request: PredictRequest) -> Response:  # a plain def: on FastAPI's pool
        """Each input's labels with their scores, best first, from a classifier head: the
        probabilities `bertindex annotate` stores (its label and `probability` first, its
        `runner_up` second), through the same code.

        `raw_scores`: the logits those probabilities are the softmax of (for a text read in
        several windows, the mean of its windows' logits, as `annotate` averages them); the
        order is the same. `truncate`: an input longer than the head's window (`model.
        max_length`) is read in its first window; without it such an input is refused (400
        naming its index), where `annotate` would average its windows.
        """
        pin_threads()
        name = pick(heads, request.head, spans=False)
        batch = checked(heads, name, request.inputs, request.truncate)
        try:
            scored = heads.label_scores(batch, request.raw_scores, request.truncate)
        except TooLong as exc:
            raise InputError(f"{exc} (`truncate: true`)") from None
        rows = [[{"label": label, "score": s} for label, s in labels] for labels in scored]
        return Response(json.dumps(request.answer(rows)), media_type="application/json")

    @app.post("/annotate", dependencies=[needs("read")])
    def annotate(request: HeadRequest) -> Response:
        """Each input's entity spans from a tagger head, as `bertindex annotate` stores them
        (the same windows over a long text, the same decoding), character offsets into the
        input, end exclusive; `score` is the mean probability of the span's words' tags."""
        pin_threads()
        name = pick(heads, request.head, spans=True)
        batch = checked(heads, name, request.inputs, truncate=False)
        rows = [
            [
                {"type": e.type, "start": e.start, "end": e.end, "text": e.text, "score": e.score}
                for e in found
            ]
            for found in heads.entities(batch)
        ]
        return Response(json.dumps(request.answer(rows)), media_type="application/json")


def pick(heads: ServedHeads | None, asked: str | None, spans: bool) -> str:
    """The head a request runs: the one it names, or the only one of the route's kind.

    Raises:
        NotFound: no head of the kind is loaded (the message says how to load one).
        InputError: `asked` is not a loaded head of the kind, or it is left out while
            several are loaded (both name the loaded ones).
    """
    kind, train = KINDS[spans]
    loaded = (heads.span_heads() if spans else heads.text_heads()) if heads else []
    if not loaded:
        raise NotFound(
            f"this server has no {kind} head: start it with `bertindex serve --heads "
            f"NAME=PATH` (a head from `{train}`)"
        )
    if asked is None:
        if len(loaded) == 1:
            return loaded[0]
        raise InputError(
            f"this server has {len(loaded)} {kind} heads: name one in `head` ({', '.join(loaded)})"
        )
    if asked not in loaded:
        other = " (a head of another kind: POST /predict runs classifiers, POST /annotate taggers)"
        raise InputError(
            f"no {kind} head '{asked}' on this server"
            + (other if heads and asked in heads.heads else "")
            + f"; choose one of {', '.join(loaded)}"
        )
    return asked


def checked(heads: ServedHeads, name: str, texts: list[str], truncate: bool) -> Tokenized:
    """`texts` tokenised for head `name`, refused (InputError) when the head would run more
    than MAX_REQUEST_TOKENS tokens for them."""
    batch = heads.tokenize(name, texts)
    cost = heads.cost(batch, first_window=truncate)
    if cost > MAX_REQUEST_TOKENS:
        raise InputError(
            f"the inputs are {cost} tokens for head '{name}' to run (its windows' special "
            f"tokens included), over this server's cap of {MAX_REQUEST_TOKENS} a request; "
            "send them in several requests"
        )
    return batch
