"""Score pairs of texts with a saved pair head (`bertindex train pair|rerank`): `PairScorer`
loads one and returns one score per (text_a, text_b), in input order, from length-sorted
batches. Search reranking (`indexer.query.rerank`) runs it on (query, hit window) pairs.

Unlike training, scoring cuts: a pair longer than the head's trained `max_length` (its run
receipt; else the model's positions) keeps all of text_a (the query) and is cut at the end of
text_b (the passage), since a search must answer; a text_a alone over the limit is refused,
named. A regression head trained with a blend (`heads.pair.blend`) mixes in the cosine of the
two texts from its bi-encoder, loaded on first use, as `eval head` scores it. Does not train or
search.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from indexer.config import MAX_POSITIONS
from indexer.encode.model_facts import usable_length
from indexer.errors import InputError, ModelError
from indexer.heads.features import Encoded, collate, sorted_batches
from indexer.heads.inference import pad_id_of
from indexer.heads.pair.blend import blend_of, cosine_encoder, text_cosines
from indexer.heads.pair.head_type import pair_scores
from indexer.heads.receipt import RECEIPT

SCORE_BATCH = 32  # pairs per forward pass


def trained_max_length(path: Path, positions: int) -> int:
    """The `recipe.max_length` a head was trained at (run-receipt.json), at most `positions`;
    `positions` when the head has no receipt."""
    receipt = Path(path) / RECEIPT
    try:
        length = json.loads(receipt.read_text())["recipe"]["max_length"]
    except (OSError, ValueError, KeyError, TypeError):
        return positions
    return min(int(length), positions) if isinstance(length, int) else positions


class PairScorer:
    """A loaded pair head. `score(pairs)` -> one float per pair (a regression head: on its
    train range, e.g. 0-5 for STS-B or 0-1 for a reranker; a classifier: the probability of
    its last label).

    Args:
        path: a head directory written by `bertindex train pair` or `train rerank`.
        max_length: longest pair in tokens (None: as trained, see the module).
        threads: torch threads (None: leave torch's setting).
        dtype: `auto` (bf16 weights on CPUs with native bf16, AVX512-BF16 or AMX, as annotate
            runs heads; else fp32), `fp32` or `bf16`.
    """

    def __init__(
        self,
        path: str | Path,
        max_length: int | None = None,
        threads: int | None = None,
        dtype: str = "auto",
    ):
        from indexer.encode.policy import resolve_dtype
        from indexer.heads.predict import load_model_dir

        self.path = Path(path)
        self.kind, self.model, self.tokenizer = load_model_dir(self.path)
        if not self.kind.capabilities.scores_pairs:
            raise ModelError(
                f"{self.path} is a {self.kind.name} head; reranking needs a pair head "
                "(`bertindex train rerank` or `bertindex train pair`)"
            )
        positions = min(usable_length(self.model, self.tokenizer).limit, MAX_POSITIONS)
        self.max_length = max_length or trained_max_length(self.path, positions)
        self.pad_id = pad_id_of(self.tokenizer)
        self.dtype = resolve_dtype(dtype)
        if self.dtype == "bf16":
            self.model.to(torch.bfloat16)
        self.blend = blend_of(self.model.config)
        self._cosine_encoder = None
        if threads is not None:
            torch.set_num_threads(threads)

    def encode(self, pairs: Sequence[tuple[str, str]]) -> Encoded:
        """Tokenise pairs with the pair template, text_b cut to fit `max_length`."""
        firsts = [a for a, _ in pairs]
        room = self.max_length - self.tokenizer.num_special_tokens_to_add(pair=True)
        lengths = [len(x) for x in self.tokenizer(firsts, add_special_tokens=False)["input_ids"]]
        too_long = [i for i, n in enumerate(lengths) if n >= room]
        if too_long:
            i = too_long[0]
            raise InputError(
                f"query {firsts[i][:80]!r} is {lengths[i]} tokens; a pair head "
                f"trained at {self.max_length} tokens needs it under {room}; "
                "shorten the query"
            )
        enc = self.tokenizer(
            firsts,
            [b for _, b in pairs],
            add_special_tokens=True,
            truncation="only_second",
            max_length=self.max_length,
        )
        return Encoded(
            [str(i) for i in range(len(pairs))],
            enc["input_ids"],
            [0] * len(pairs),
            token_type_ids=enc.get("token_type_ids"),
        )

    @torch.inference_mode()
    def score(self, pairs: Sequence[tuple[str, str]], batch_size: int = SCORE_BATCH) -> np.ndarray:
        """One score per pair, in input order (see the class).

        Args:
            pairs: (text_a, text_b) each; for reranking (query, passage window).
            batch_size: pairs per forward pass (length-sorted, so padding stays small).
        Returns:
            (pairs,) float64 scores.
        """
        if not pairs:
            return np.zeros(0)
        encoded = self.encode(pairs)
        cosines = self.cosines(pairs) if self.blend else None
        out = np.zeros(len(pairs))
        for index in sorted_batches(encoded.lengths, batch_size):
            batch = collate(encoded, index, self.pad_id, with_labels=False)
            logits = self.kind.logits(self.model, batch).float().numpy()  # (B, outputs)
            out[index] = pair_scores(
                logits, self.model.config, None if cosines is None else cosines[index]
            )
        return out

    def cosines(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """The blend's bi-encoder cosine per pair (its encoder loaded on first use).

        Raises:
            ModelError: the head has no blend.
        """
        if self.blend is None:
            raise ModelError(f"{self.path}: the head has no blend, so no bi-encoder cosine")
        if self._cosine_encoder is None:
            self._cosine_encoder = cosine_encoder(self.blend["encoder"], self.path)
        return text_cosines(self._cosine_encoder, [a for a, _ in pairs], [b for _, b in pairs])
