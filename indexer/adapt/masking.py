"""The masking rule of BERT's pretraining, as the source documents give it.

Of every sequence, each position that is not a special token or padding is chosen with
probability `MASK_PROB` (15 %); of the chosen, 80 % are replaced by the mask token, 10 % by a
random token and 10 % kept as they are. The loss is computed on the chosen positions only:
every other position's label is -100, the value cross-entropy ignores. With whole-word
masking the choice is made per word (the subwords `word_ids()` gives one word are chosen, or
not, together) and the 80/10/10 split per chosen subword, as in Google's whole-word-masking
release. A random replacement is drawn from the vocabulary without its special tokens (a
[CLS] or [PAD] in mid-sentence is not a token the model will ever read).

Pure tensor functions: the caller passes the generator, so a step's masks are a function of
the run's seed and the step's number, the same after a resume.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

IGNORE = -100  # cross-entropy's ignore_index: positions without a loss


@dataclass(frozen=True)
class MaskRule:
    """Which positions are chosen and what they become."""

    mask_prob: float = 0.15
    replace_mask: float = 0.8  # of the chosen: the mask token
    replace_random: float = 0.1  # of the chosen: a random token; the rest are kept
    whole_word: bool = False

    def describe(self) -> dict:
        """The rule as the receipt records it."""
        keep = round(1 - self.replace_mask - self.replace_random, 6)
        return {
            **asdict(self),
            "keep": keep,
            "never_chosen": "special tokens and padding",
            "random_from": "the vocabulary less its special tokens",
            "loss_on": "chosen positions only",
        }


def word_starts(word_ids: list[list[int | None]], length: int) -> torch.Tensor:
    """A (B, L) tensor numbering each position's word within its row (-1 for specials and
    padding), from the tokenizer's `word_ids()` of each row (right-padded to `length`)."""
    out = torch.full((len(word_ids), length), -1, dtype=torch.long)
    for row, ids in enumerate(word_ids):
        for col, word in enumerate(ids[:length]):
            if word is not None:
                out[row, col] = word
    return out


def mask_tokens(
    input_ids: torch.Tensor,
    candidates: torch.Tensor,
    mask_id: int,
    random_ids: torch.Tensor,
    rule: MaskRule,
    generator: torch.Generator,
    words: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply `rule` to a batch.

    Args:
        input_ids: (B, L) token ids.
        candidates: (B, L) bool, True where a position may be chosen (not special, not
            padding).
        mask_id: the mask token's id.
        random_ids: 1-D ids a random replacement is drawn from.
        rule: the masking rule.
        generator: the source of randomness (seeded by the caller).
        words: (B, L) word numbers per row (`word_starts`), required with `rule.whole_word`.
    Returns:
        (inputs, labels): inputs with the chosen positions replaced; labels holding the
        original id at chosen positions and IGNORE elsewhere.
    """
    shape = input_ids.shape
    if rule.whole_word:
        if words is None:
            raise ValueError("whole-word masking needs the word numbers of each position")
        chosen = _choose_words(words, candidates, rule.mask_prob, generator)
    else:
        chosen = (torch.rand(shape, generator=generator) < rule.mask_prob) & candidates
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE))
    draw = torch.rand(shape, generator=generator)
    to_mask = chosen & (draw < rule.replace_mask)
    to_random = (
        chosen & (draw >= rule.replace_mask) & (draw < rule.replace_mask + rule.replace_random)
    )
    inputs = input_ids.clone()
    inputs[to_mask] = mask_id
    picks = torch.randint(len(random_ids), shape, generator=generator)
    inputs[to_random] = random_ids[picks[to_random]]
    return inputs, labels


def _choose_words(
    words: torch.Tensor, candidates: torch.Tensor, prob: float, generator: torch.Generator
) -> torch.Tensor:
    """Choose each (row, word) with probability `prob`; every candidate subword of a chosen
    word is chosen."""
    top = int(words.max().item()) + 1 if words.numel() else 0
    if top <= 0:
        return torch.zeros_like(candidates)
    per_word = torch.rand((words.shape[0], top), generator=generator) < prob  # (B, W)
    index = words.clamp(min=0)
    chosen = torch.gather(per_word, 1, index)
    return chosen & (words >= 0) & candidates
