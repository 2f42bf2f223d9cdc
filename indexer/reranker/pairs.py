"""A reranker's training pairs from a BEIR-layout set: judged positives and hard negatives (the
store's own hybrid hits not judged relevant), each passage cut to the head's length as reranking
cuts it, and a split that holds out whole queries. Does not train (`indexer.reranker.train`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from indexer.query.rerank import hit_passage, passage_of

DEFAULT_NEGATIVES = 4  # hard negatives per training query
MINE_DEPTH = 30  # hybrid hits a training query's negatives are drawn from


def mine_pairs(
    searcher,
    collection: str,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    negatives: int = DEFAULT_NEGATIVES,
    depth: int = MINE_DEPTH,
    seed: int = 42,
) -> tuple[list[dict], dict]:
    """Training pairs for a reranker: per judged query, each relevant document (score 1) and
    `negatives` hard negatives (score 0) drawn at random from its top `depth` hybrid hits that
    are not judged relevant (a document judged 0 counts as a negative).

    A positive is read where the search ranked it (its best window); one the search missed is
    read whole (the scorer cuts it at the head's length, as it cuts a keyword-only hit).

    Args:
        searcher: an `indexer.query.searcher.Searcher` over a store holding the set's corpus in
            `collection`.
        queries: query id -> text; qrels: query id -> {document id: relevance}.
    Returns:
        (items `{id, text_a, text_b, score}`, a record of how they were drawn for the receipt).
    """
    rng = random.Random(seed)
    ids = [q for q in queries if any(r > 0 for r in qrels.get(q, {}).values())]
    texts = [queries[q] for q in ids]
    results = searcher.search_many(texts, depth, collection=collection, mode="hybrid")
    missed = {
        d
        for q, hits in zip(ids, results)
        for d, r in qrels[q].items()
        if r > 0 and d not in {h.id for h in hits}
    }
    documents = _documents(searcher.store, collection, sorted(missed))
    items: list[dict] = []
    found, unknown, short = 0, 0, 0
    for q, text, hits in zip(ids, texts, results):
        by_id = {h.id: h for h in hits}
        for doc, relevance in sorted(qrels[q].items()):
            if relevance <= 0:
                continue
            if doc in by_id:
                passage, found = hit_passage(by_id[doc]), found + 1
            elif doc in documents:
                passage = documents[doc]
            else:
                unknown += 1
                continue
            items.append({"id": f"{q}/{doc}", "text_a": text, "text_b": passage, "score": 1.0})
        pool = [h for h in hits if qrels[q].get(h.id, 0) <= 0]
        drawn = rng.sample(pool, min(negatives, len(pool)))
        short += len(drawn) < negatives
        items += [
            {"id": f"{q}/{h.id}", "text_a": text, "text_b": hit_passage(h), "score": 0.0}
            for h in drawn
        ]
    record = {
        "queries": len(ids),
        "pairs": len(items),
        "positives": sum(1 for i in items if i["score"] > 0),
        "negatives": sum(1 for i in items if i["score"] == 0),
        "positives_in_hits": found,
        "positives_not_in_store": unknown,
        "queries_with_fewer_negatives": short,
        "rule": (
            f"judged positives (relevance > 0) as score 1; {negatives} hard negatives "
            f"per query as score 0, drawn (seed {seed}) from its top {depth} hybrid "
            "hits not judged relevant; a passage is the hit's title and best window"
        ),
    }
    return items, record


def _documents(store, collection: str, external_ids: list[str]) -> dict[str, str]:
    """external id -> the passage of the whole stored document (title, text)."""
    if not external_ids:
        return {}
    stored = store.documents.existing(collection, external_ids)
    docs = store.reads.fetch_documents([d.doc_id for d in stored.values()])
    by_doc = {d.doc_id: e for e, d in stored.items()}
    return {by_doc[i]: passage_of(h.title, h.text, 0, len(h.text)) for i, h in docs.items()}


def cut_passages(items: list[dict], tokenizer, max_length: int) -> int:
    """Cut each item's `text_b` (in place) at a token boundary so that the pair fits
    `max_length` tokens with the tokenizer's pair template, as `PairScorer` cuts at search time.

    Returns:
        How many passages were cut.
    """
    room_total = max_length - tokenizer.num_special_tokens_to_add(pair=True)
    queries = tokenizer([i["text_a"] for i in items], add_special_tokens=False)["input_ids"]
    passages = tokenizer(
        [i["text_b"] for i in items], add_special_tokens=False, return_offsets_mapping=True
    )
    cut = 0
    for item, q, offsets in zip(items, queries, passages["offset_mapping"]):
        room = room_total - len(q)
        if room < 1:
            raise ValueError(
                f"{item['id']}: the query alone is {len(q)} tokens, over --max-length {max_length}"
            )
        if len(offsets) > room:
            item["text_b"] = item["text_b"][: offsets[room - 1][1]]
            cut += 1
    return cut


def split_queries(
    items: list[dict], validation_share: float, seed: int
) -> tuple[list[dict], list[dict]]:
    """(train, validation) items, whole queries held out (no query's pairs on both sides)."""
    queries = sorted({i["id"].split("/", 1)[0] for i in items})
    random.Random(seed).shuffle(queries)
    held = set(queries[: max(1, round(len(queries) * validation_share))])
    return (
        [i for i in items if i["id"].split("/", 1)[0] not in held],
        [i for i in items if i["id"].split("/", 1)[0] in held],
    )
