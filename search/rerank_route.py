"""`POST /rerank` of `bertindex serve`: a query and some texts scored by the server's pair head
(`search.rerank`), in the two shapes clients already send.

- **TEI** (Text Embeddings Inference): `{"query", "texts", "return_text", "raw_scores"}`,
  answered with a JSON list of `{"index", "score"[, "text"]}`, best first.
- **Cohere** (and the services that copied it): `{"query", "documents", "top_n",
  "return_documents"}`, answered with `{"results": [{"index", "relevance_score"[,
  "document": {"text"}]}]}`, best first. `documents` may be strings or `{"text": ...}`.

A request names `texts` or `documents`, not both. Scores are the head's own
(`PairScorer.score`: on its trained range, 0-1 for a reranker from `bertindex train rerank`);
TEI's `raw_scores` is accepted and changes nothing (there is no sigmoid to skip). No
reranker configured: 404 naming `search.rerank`. At most `search.rerank_max_depth` texts per
request (400 above it), as for the reranked depth of `POST /search`: each pair costs ~25 ms
of CPU.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from indexer.config import SearchConfig
from indexer.errors import InputError
from indexer.query.searcher import Searcher
from search.access import needs
from search.error_map import NotFound

MAX_TEXT_CHARS = 20_000  # characters per text; the head cuts the passage to its length
MAX_QUERY_CHARS = 4_000
MAX_TEXTS = 1_000  # the schema's bound; `search.rerank_max_depth` is the server's


Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class CohereDocument(BaseModel):
    """A Cohere document given as an object."""

    model_config = ConfigDict(extra="ignore")
    text: Text


class RerankRequest(BaseModel):
    """The body of `POST /rerank` (see the module)."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    texts: list[Text] | None = Field(None, min_length=1, max_length=MAX_TEXTS)
    documents: list[Text | CohereDocument] | None = Field(None, min_length=1, max_length=MAX_TEXTS)
    top_n: int | None = Field(None, ge=1, le=MAX_TEXTS)
    return_text: bool = False
    return_documents: bool = False
    raw_scores: bool = False
    truncate: bool | None = None  # TEI's; the head always fits a passage to its length
    model: str | None = Field(None, max_length=256)  # Cohere's; the server has one head

    @model_validator(mode="after")
    def _one_list(self) -> RerankRequest:
        if (self.texts is None) == (self.documents is None):
            raise ValueError("give `texts` (TEI) or `documents` (Cohere), one of the two")
        return self

    def passages(self) -> list[str]:
        if self.texts is not None:
            return list(self.texts)
        return [d if isinstance(d, str) else d.text for d in self.documents or []]


def check_depth(count: int, settings: SearchConfig, what: str) -> None:
    """Refuse more pairs than `search.rerank_max_depth`: a client must not choose the CPU a
    request costs (each pair ~25 ms). `what` names the request's field in the message."""
    cap = settings.rerank_max_depth
    if count > cap:
        raise InputError(
            f"{what} {count} is above this server's cap (search.rerank_max_depth: {cap})"
        )


def rank(
    searcher: Searcher, request: RerankRequest, passages: list[str]
) -> list[tuple[int, float]]:
    """(input index, score) of each of `passages` (the request's texts), best first (ties
    keep the input order).

    Raises:
        NotFound: no reranker is configured.
        InputError: more texts than `search.rerank_max_depth`, or a query too long for the head.
    """
    settings = searcher.config.search
    if not settings.rerank:
        raise NotFound(
            "this server has no reranker: set search.rerank in its config.yaml to a pair "
            "head (`bertindex train rerank`)"
        )
    check_depth(len(passages), settings, "texts:")
    scores = searcher.reranker(settings.rerank).score([(request.query, p) for p in passages])
    order = sorted(range(len(passages)), key=lambda i: (-scores[i], i))
    return [(i, float(scores[i])) for i in order[: request.top_n or len(order)]]


def add_rerank_route(app, searcher: Searcher, before_query) -> None:
    """Add `POST /rerank` to a FastAPI app.

    Args:
        searcher: the server's Searcher (its configured pair head scores).
        before_query: called first in the request's thread (the server's thread cap).
    """

    @app.post("/rerank", dependencies=[needs("read")])
    def rerank(request: RerankRequest):
        """Score `query` against each text with the server's pair head, best first."""
        before_query()
        passages = request.passages()
        ranked = rank(searcher, request, passages)
        if request.texts is not None:
            return [
                {"index": i, "score": s, **({"text": passages[i]} if request.return_text else {})}
                for i, s in ranked
            ]
        return {
            "results": [
                {
                    "index": i,
                    "relevance_score": s,
                    **({"document": {"text": passages[i]}} if request.return_documents else {}),
                }
                for i, s in ranked
            ]
        }
