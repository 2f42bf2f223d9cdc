"""Rerank search hits with a pair head (a cross-encoder), and build a reranker's training pairs
from a BEIR-layout set.

`rerank_hits` scores the query with each of the top `depth` hits' best window (the chunk the
dense side matched; the whole text, cut by the scorer, for a keyword-only hit; the title before
it), orders those hits by that score (ties keep the first-stage order) and leaves the hits
below `depth` in their order beneath: no hit is dropped or added, `score` stays the first
stage's and `rerank` holds the head's. A head trained by `train rerank` carries a weight
(`RERANK_WEIGHT_KEY` in its config.json, chosen on held-out queries by `choose_rerank_weight`):
the order is by `(1 - w) * first + w * head`, each min-max scaled over the reranked hits, so a
reranker that knows less than the first stage moves it less; a head without one (a `train pair`
head) orders by its score alone (w = 1). `mine_pairs` draws judged positives and hard negatives
(the store's own hybrid hits not judged relevant). Does not train (`indexer.heads.train`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from indexer.heads.pair.keys import RERANK_WEIGHT_KEY
from search.hits import SearchHit

RERANK_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))  # 0 (first stage) .. 1 (head alone)
DEFAULT_NEGATIVES = 4  # hard negatives per training query
MINE_DEPTH = 30  # hybrid hits a training query's negatives are drawn from
# held-out nDCG@10 within this of the best counts as a tie, and a tie takes the lowest share:
# a few hundred held-out queries cannot tell such shares apart (a SciFact reranker's curve was
# flat within 0.0003 from 0.3 to 0.8), and the lowest moves the first stage least
RERANK_TIE = 0.002


def passage_of(title: str | None, text: str, start: int, end: int) -> str:
    """The text a reranker reads for a hit: its title, then its window `text[start:end]`."""
    window = text[start:end]
    return f"{title} {window}" if title else window


def hit_passage(hit: SearchHit) -> str:
    return passage_of(hit.title, hit.text, hit.chunk_start, hit.chunk_end)


def rerank_weight(scorer) -> float:
    """The head's share of the order: its config's `RERANK_WEIGHT_KEY`, else 1 (alone)."""
    config = getattr(getattr(scorer, "model", None), "config", None)
    weight = getattr(config, RERANK_WEIGHT_KEY, None)
    return 1.0 if weight is None else float(weight)


def _scaled(values: Sequence[float]) -> list[float]:
    """Min-max to 0..1 (all 0 when the values are equal)."""
    low, high = min(values), max(values)
    return [(v - low) / (high - low) if high > low else 0.0 for v in values]


def interpolated(first: Sequence[float], head: Sequence[float], weight: float) -> list[float]:
    """`(1 - weight) * first + weight * head`, each min-max scaled over these hits."""
    if not first:
        return []
    return [(1.0 - weight) * f + weight * h for f, h in zip(_scaled(first), _scaled(head))]


def rerank_order(first: Sequence[float], head: Sequence[float], weight: float) -> list[int]:
    """Indexes of the hits in reranked order (ties keep the first-stage order)."""
    mix = interpolated(first, head, weight) if weight < 1.0 else [float(h) for h in head]
    return sorted(range(len(mix)), key=lambda i: (-mix[i], i))


def rerank_hits(query: str, hits: Sequence[SearchHit], scorer, depth: int,
                weight: float | None = None) -> list[SearchHit]:
    """The hits with the top `depth` reordered by the head's score of (query, passage), mixed
    with the first stage's by the head's weight (see the module).

    Args:
        scorer: has `score(pairs) -> scores` (`indexer.heads.pair.scorer.PairScorer`).
        depth: how many of the first hits to rerank (>= 1).
        weight: the head's share (None: the head's own, `rerank_weight`).
    Returns:
        The same hits, renumbered: the reranked ones first, best first, each with `rerank`;
        those below `depth` after them, in their order, `rerank` None.
    """
    if depth < 1:
        raise ValueError(f"rerank depth must be >= 1, not {depth}")
    head, tail = list(hits[:depth]), list(hits[depth:])
    scores = scorer.score([(query, hit_passage(h)) for h in head]) if head else []
    weight = rerank_weight(scorer) if weight is None else weight
    order = rerank_order([h.score for h in head], [float(x) for x in scores], weight)
    ranked = [dataclasses.replace(head[i], rerank=float(scores[i])) for i in order] + tail
    return [dataclasses.replace(h, rank=n) for n, h in enumerate(ranked, start=1)]


def choose_rerank_weight(runs: Sequence[tuple[Sequence[SearchHit], Sequence[float]]],
                         qrels: Mapping[str, Mapping[str, int]], query_ids: Sequence[str]) -> dict:
    """The head's share (`RERANK_WEIGHTS`) with the best nDCG@10 over held-out queries; the
    lowest share within `RERANK_TIE` of the best on a tie (0 keeps the first stage's order: the
    head adds nothing).

    Args:
        runs: per query, its first-stage hits (top depth) and the head's scores of them.
        qrels: query id -> judged documents; query_ids: the queries of `runs`, in order.
    Returns:
        {"weight", "ndcg@10": by weight, "queries"} for the receipt.
    """
    from indexer.evaluation import retrieval_scores

    tried = {}
    for weight in RERANK_WEIGHTS:
        run = {}
        for q, (hits, scores) in zip(query_ids, runs):
            order = rerank_order([h.score for h in hits], scores, weight)
            run[q] = [hits[i].id for i in order]
        tried[weight] = retrieval_scores(run, {q: qrels[q] for q in query_ids})["ndcg@10"]
    best = lowest_of_the_best(tried)
    return {"weight": best, "ndcg@10": {str(w): round(v, 4) for w, v in tried.items()},
            "queries": len(query_ids), "tie": RERANK_TIE}


def lowest_of_the_best(tried: Mapping[float, float], tie: float = RERANK_TIE) -> float:
    """The lowest share whose score lies within `tie` of the best one's."""
    top = max(tried.values())
    return min(w for w, score in tried.items() if score >= top - tie)


def tune_rerank_weight(searcher, collection: str, head: Path, queries: dict, qrels: dict) -> dict:
    """Choose a trained reranker's share of the order on held-out queries (their hybrid top
    `search.rerank_depth` hits, `search.rerank.choose_rerank_weight`) and keep it in the
    head's config.json."""
    import json

    from indexer.heads.pair.scorer import PairScorer

    depth = searcher.config.search.rerank_depth
    ids = list(queries)
    results = searcher.search_many([queries[q] for q in ids], depth, collection=collection,
                                   mode="hybrid", rerank=False)
    scorer = PairScorer(head)
    runs = [(hits, [float(x) for x in scorer.score([(queries[q], hit_passage(h)) for h in hits])])
            for q, hits in zip(ids, results)]
    chosen = choose_rerank_weight(runs, qrels, ids)
    config_file = head / "config.json"
    config = json.loads(config_file.read_text())
    config[RERANK_WEIGHT_KEY] = chosen["weight"]
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return {**chosen, "depth": depth, "mode": "hybrid",
            "rule": "the head's share w of (1 - w) * first stage + w * head, each min-max "
                    "scaled over the reranked hits, by nDCG@10 on the held-out queries; the "
                    f"lowest share within {RERANK_TIE} of the best"}

def mine_pairs(searcher, collection: str, queries: Mapping[str, str],
               qrels: Mapping[str, Mapping[str, int]], negatives: int = DEFAULT_NEGATIVES,
               depth: int = MINE_DEPTH, seed: int = 42) -> tuple[list[dict], dict]:
    """Training pairs for a reranker: per judged query, each relevant document (score 1) and
    `negatives` hard negatives (score 0) drawn at random from its top `depth` hybrid hits that
    are not judged relevant (a document judged 0 counts as a negative).

    A positive is read where the search ranked it (its best window); one the search missed is
    read whole (the scorer cuts it at the head's length, as it cuts a keyword-only hit).

    Args:
        searcher: a `search.query.Searcher` over a store holding the set's corpus in
            `collection`.
        queries: query id -> text; qrels: query id -> {document id: relevance}.
    Returns:
        (items `{id, text_a, text_b, score}`, a record of how they were drawn for the receipt).
    """
    rng = random.Random(seed)
    ids = [q for q in queries if any(r > 0 for r in qrels.get(q, {}).values())]
    texts = [queries[q] for q in ids]
    results = searcher.search_many(texts, depth, collection=collection, mode="hybrid")
    missed = {d for q, hits in zip(ids, results) for d, r in qrels[q].items()
              if r > 0 and d not in {h.id for h in hits}}
    documents = _documents(searcher.store, collection, sorted(missed))
    items, found, unknown, short = [], 0, 0, 0
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
        items += [{"id": f"{q}/{h.id}", "text_a": text, "text_b": hit_passage(h), "score": 0.0}
                  for h in drawn]
    record = {"queries": len(ids), "pairs": len(items),
              "positives": sum(1 for i in items if i["score"] > 0),
              "negatives": sum(1 for i in items if i["score"] == 0),
              "positives_in_hits": found, "positives_not_in_store": unknown,
              "queries_with_fewer_negatives": short,
              "rule": (f"judged positives (relevance > 0) as score 1; {negatives} hard negatives "
                       f"per query as score 0, drawn (seed {seed}) from its top {depth} hybrid "
                       "hits not judged relevant; a passage is the hit's title and best window")}
    return items, record


def _documents(store, collection: str, external_ids: list[str]) -> dict[str, str]:
    """external id -> the passage of the whole stored document (title, text)."""
    if not external_ids:
        return {}
    stored = store.existing(collection, external_ids)
    docs = store.fetch_documents([d.doc_id for d in stored.values()])
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
    passages = tokenizer([i["text_b"] for i in items], add_special_tokens=False,
                         return_offsets_mapping=True)
    cut = 0
    for item, q, offsets in zip(items, queries, passages["offset_mapping"]):
        room = room_total - len(q)
        if room < 1:
            raise ValueError(f"{item['id']}: the query alone is {len(q)} tokens, over "
                             f"--max-length {max_length}")
        if len(offsets) > room:
            item["text_b"] = item["text_b"][: offsets[room - 1][1]]
            cut += 1
    return cut


def split_queries(items: list[dict], validation_share: float, seed: int
                  ) -> tuple[list[dict], list[dict]]:
    """(train, validation) items, whole queries held out (no query's pairs on both sides)."""
    queries = sorted({i["id"].split("/", 1)[0] for i in items})
    random.Random(seed).shuffle(queries)
    held = set(queries[: max(1, round(len(queries) * validation_share))])
    return ([i for i in items if i["id"].split("/", 1)[0] not in held],
            [i for i in items if i["id"].split("/", 1)[0] in held])
