"""Heads kept loaded to answer a few texts per call (`bertindex serve --heads`, its `POST /predict`
and `POST /annotate`): each text's scores per label, or its entity spans, as `bertindex annotate`
computes them, through the same `Annotator`. Does not know HTTP (`search.predict_routes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from indexer.annotate.annotator import Annotator, Head, load_heads
from indexer.encode.embed import TooLong
from indexer.errors import InputError, ModelError
from indexer.heads.base import softmax
from indexer.ingest.chunking import window_spans
from indexer.records.annotations import Entity


@dataclass(frozen=True)
class Tokenized:
    """Texts tokenised for one head (`ServedHeads.tokenize`): `tokens` holds each text's
    token count, special tokens left out."""

    head: str
    texts: list[str]
    encodings: list  # `Annotator.tokenize`'s, one per head group
    tokens: list[int]


class ServedHeads:
    """Loaded heads by name. The heads on one backbone share one `Annotator` (one pass serves
    them all, as under `annotate`) that runs one stream, on the caller's thread: a server
    runs requests side by side instead.

    Args:
        heads: loaded heads (`load_heads`); a pair head is refused (it scores pairs of texts:
            a search's reranker, `search.rerank`).
        config: the configuration whose encoder settings `annotate` runs the heads with
            (`Annotator.for_config`: dtype, device, window length and stride).
    """

    def __init__(self, heads: list[Head], config):
        for h in heads:
            if h.kind.capabilities.scores_pairs:
                raise ModelError(
                    f"head '{h.name}' ({h.path}) scores pairs of texts, not texts: a reranker "
                    "is served by setting search.rerank in config.yaml to it"
                )
        groups: dict[str, list[Head]] = {}
        for h in heads:
            groups.setdefault(h.backbone_key, []).append(h)
        self.heads = {h.name: h for h in heads}
        self._annotators: dict[str, Annotator] = {}
        for group in groups.values():
            annotator = Annotator.for_config(group, config, streams=1)
            self._annotators.update((h.name, annotator) for h in group)

    @classmethod
    def load(cls, args: Sequence[str], config) -> ServedHeads:
        """Load heads by `NAME=DIR` or `DIR`, as `bertindex annotate --heads` takes them.

        Raises:
            ModelError: a head that cannot be loaded or served (the message names it).
        """
        return cls(load_heads(args), config)

    def text_heads(self) -> list[str]:
        """The heads that score texts (classifiers: `Capabilities.scores_texts`), in load
        order."""
        return [n for n, h in self.heads.items() if h.kind.capabilities.scores_texts]

    def span_heads(self) -> list[str]:
        """The heads that find spans in texts (taggers: `Capabilities.scores_spans`), in load
        order."""
        return [n for n, h in self.heads.items() if h.kind.capabilities.scores_spans]

    def window(self, head: str) -> int:
        """Tokens in one window of `head` ([CLS] and [SEP] included): `model.max_length`,
        or the head's own limit where that is lower."""
        return self._annotator(head).max_length

    def tokenize(self, head: str, texts: Sequence[str]) -> Tokenized:
        """`texts` tokenised as `head` reads them (nothing run yet: a caller can check sizes)."""
        encodings = self._annotator(head).tokenize(texts)
        tokens = [max(len(enc["input_ids"][i]) for enc in encodings) for i in range(len(texts))]
        return Tokenized(head, list(texts), encodings, tokens)

    def cost(self, batch: Tokenized, first_window: bool = False) -> int:
        """Tokens the head's model runs for `batch`: every window's tokens, the overlaps of a
        long text's windows and each window's [CLS] and [SEP] included (`first_window`: each
        text's first window only)."""
        annotator = self._annotator(batch.head)
        room, mode = annotator.max_length - 2, "truncate" if first_window else "chunk"
        return sum(
            e - s + 2
            for n in batch.tokens
            for s, e in window_spans(n, room, annotator.stride, mode)
        )

    def label_scores(
        self, batch: Tokenized, raw: bool = False, truncate: bool = False
    ) -> list[list[tuple[str, float]]]:
        """Each text's labels with their scores, best first (ties in the head's label order).

        The scores are the probabilities `annotate` stores: the first label and its score are
        the label and `probability` it writes for the text, the second's score its
        `runner_up`. A single-label softmax over the head's labels (the project trains no
        multi-label heads).

        Args:
            batch: texts tokenised for a head that scores texts.
            raw: the logits the probabilities are the softmax of, instead.
            truncate: read a text longer than one window in its first window only.
        Raises:
            TooLong: a text longer than the head's window and `truncate` false; names its
                position. (`annotate` reads such a text in windows and averages them.)
        """
        annotator = self._annotator(batch.head)
        room = annotator.max_length - 2
        for position, n in enumerate(batch.tokens):
            if n > room and not truncate:
                raise TooLong(
                    f"input {position} is {n + 2} tokens, over the {annotator.max_length} "
                    f"of head '{batch.head}' (its special tokens included); shorten it, or "
                    "ask to cut it to its first window",
                    position,
                )
        found = annotator.text_logits(batch.texts, batch.encodings, first_window=truncate)
        logits = found[batch.head]  # (texts, labels)
        scores = logits if raw else softmax(logits)
        labels = self.heads[batch.head].labels
        order = np.argsort(-scores, axis=1, kind="stable")  # ties keep the label order
        return [[(labels[j], float(row[j])) for j in best] for row, best in zip(scores, order)]

    def entities(self, batch: Tokenized) -> list[list[Entity]]:
        """Each text's entity spans from the head, as `annotate` stores them: a long text read
        in overlapping windows, each token tagged from the window where it sits farthest from
        an edge, decoded by the head's own segmentation and decoding; character offsets into
        the text."""
        found = self._annotator(batch.head).annotate_tokenized(batch.texts, batch.encodings)
        return [[e for e in a.entities if e.head == batch.head] for a in found]

    def _annotator(self, head: str) -> Annotator:
        if head not in self._annotators:
            raise InputError(f"no head '{head}'; choose one of {', '.join(self.heads) or 'none'}")
        return self._annotators[head]
