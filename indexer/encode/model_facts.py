"""What a model directory's transformer and tokenizer take, read from the model class, its config
and its tokenizer instead of assumed to be BERT's: the attention implementation (sdpa where
the class supports it, else eager), whether the forward takes token type ids, the usable
length (position embeddings less any padding offset, and the tokenizer's limit), the special
tokens around one sequence, the pad id and the padding side.

Decides and loads; does not run a model. The encoder (`indexer.encode.encoder`), the heads
(`indexer.heads`) and annotate load through `load_transformer` so that all agree.
"""

from __future__ import annotations

import functools
import inspect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexer.errors import ModelError

log = logging.getLogger(__name__)

TOKENIZER_NO_LIMIT = 1_000_000  # HF writes model_max_length 1e30 when a tokenizer names none
SENTINEL_TEXT = "a"  # any short text: its ids with and without specials give the template


def attention_for(model_class) -> str:
    """The attention implementation to load `model_class` with: sdpa where it supports it.

    Args:
        model_class: a transformers model class (`BertModel`, `MPNetForTokenClassification`).
    Returns:
        "sdpa" or "eager".
    """
    return "sdpa" if getattr(model_class, "_supports_sdpa", False) else "eager"


def resolve_class(auto_class, config):
    """The concrete class `auto_class` (`AutoModel`, `AutoModelFor...`) makes for `config`.

    Raises:
        ModelError: the auto class has no model for this config's type.
    """
    mapping: Any = getattr(auto_class, "_model_mapping", None)  # None: a TypeError below
    try:
        return mapping[type(config)]
    except (KeyError, TypeError):
        raise ModelError(
            f"{auto_class.__name__} has no model for model_type "
            f"{getattr(config, 'model_type', '?')!r}; use a directory of an encoder "
            "family transformers knows (docs/guides/own-model.md)"
        ) from None


def load_transformer(model_dir: str | Path, auto_class=None, **kwargs):
    """Load a model directory with the attention implementation its class supports.

    Args:
        model_dir: a local HF model directory.
        auto_class: `AutoModel` (default) or an `AutoModelFor...` class.
        kwargs: passed to `from_pretrained` (dtype, num_labels, ...).
    Returns:
        (model, attention implementation used).
    Raises:
        OSError, ValueError: as `from_pretrained` (callers name the directory).
    """
    from transformers import AutoConfig, AutoModel

    auto_class = auto_class or AutoModel
    config = AutoConfig.from_pretrained(model_dir)
    attention = kwargs.pop("attn_implementation", None) or attention_for(
        resolve_class(auto_class, config)
    )
    model = auto_class.from_pretrained(model_dir, attn_implementation=attention, **kwargs)
    return model, attention


def takes_token_types(model) -> bool:
    """True when the model's forward has a `token_type_ids` argument (BERT, RoBERTa, ALBERT,
    ELECTRA, DeBERTa; not DistilBERT, MPNet or ModernBERT)."""
    model_class: type = type(model)  # as `type`: mypy sees no type[Any] as Hashable
    return _forward_takes(model_class, "token_type_ids")


@functools.lru_cache(maxsize=64)
def _forward_takes(model_class, name: str) -> bool:
    return name in inspect.signature(model_class.forward).parameters


def forward_inputs(model, ids, mask) -> dict:
    """The keyword arguments of one forward pass: ids, mask, and all-zero token type ids only
    for a model that takes them (one segment)."""
    out = {"input_ids": ids, "attention_mask": mask}
    if takes_token_types(model):
        import torch

        out["token_type_ids"] = torch.zeros_like(ids)
    return out


def drop_unused_inputs(model, batch: dict) -> dict:
    """`batch` (a tokenizer's output) without `token_type_ids` when the model takes none."""
    if "token_type_ids" in batch and not takes_token_types(model):
        batch = {k: v for k, v in batch.items() if k != "token_type_ids"}
    return batch


@dataclass(frozen=True)
class Length:
    """The longest sequence (special tokens included) a model and its tokenizer take, and why."""

    limit: int
    why: str


def usable_length(model, tokenizer) -> Length:
    """The usable length of a loaded model with its tokenizer.

    Absolute position embeddings: `max_position_embeddings`, less the offset of models whose
    position ids start after the padding index (RoBERTa, XLM-R, MPNet: padding_idx + 1, so
    514 positions give 512). Relative attention without absolute positions (DeBERTa-v2/v3):
    no limit from the model, so the tokenizer's. Rotary (ModernBERT): `max_position_embeddings`.
    Always at most the tokenizer's `model_max_length` when it names one.

    Args:
        model: a loaded transformers model (base or with a head).
        tokenizer: its tokenizer.
    Returns:
        A Length: the limit and a phrase saying where it comes from.
    """
    config = model.config
    name = type(model.base_model).__name__
    positions = getattr(config, "max_position_embeddings", None)
    limit, why = None, ""
    if getattr(config, "relative_attention", False) and not getattr(
        config, "position_biased_input", True
    ):
        why = f"{name} uses relative attention only"
    elif positions is not None:
        embedding = getattr(
            getattr(model.base_model, "embeddings", None), "position_embeddings", None
        )
        offset = getattr(embedding, "padding_idx", None)
        offset = 0 if offset is None else offset + 1  # position ids start at padding_idx + 1
        limit = positions - offset
        why = (
            f"{positions} position embeddings less {name}'s padding offset {offset}"
            if offset
            else f"{name}'s {positions} position embeddings"
        )
    tok_limit = getattr(tokenizer, "model_max_length", None)
    if (
        isinstance(tok_limit, int)
        and 0 < tok_limit < TOKENIZER_NO_LIMIT
        and (limit is None or tok_limit < limit)
    ):
        limit = tok_limit
        why = f"the tokenizer's model_max_length {tok_limit}" + (f" ({why})" if why else "")
    if limit is None:
        if positions is None:
            raise ModelError(
                f"{name}: neither its config (max_position_embeddings) nor its "
                "tokenizer (model_max_length) names a length limit; set "
                "model_max_length in tokenizer_config.json"
            )
        limit, why = positions, f"{why}; the tokenizer names none, so max_position_embeddings"
    return Length(int(limit), why)


def check_length(asked: int, length: Length, what: str, where: str) -> None:
    """Refuse a configured length above the model's usable length, naming the real limit.

    Raises:
        ModelError: `what` (the option or key) `asked` exceeds `length.limit`.
    """
    if asked > length.limit:
        raise ModelError(
            f"{what} {asked} exceeds the usable length of {where}: {length.limit} "
            f"tokens ({length.why}); set {what} to at most {length.limit}"
        )


@dataclass(frozen=True)
class Specials:
    """How the tokenizer frames one sequence: `prefix` ids before it, `suffix` ids after it,
    the pad id, and the padding side."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    pad_id: int
    padding_side: str

    @property
    def framing(self) -> int:
        """Special tokens around one sequence."""
        return len(self.prefix) + len(self.suffix)


def special_tokens(tokenizer, where: str) -> Specials:
    """The tokenizer's own framing of a single sequence, found by encoding a short text with
    and without special tokens (so `<s> … </s>` for RoBERTa, `[CLS] … [SEP]` for BERT).

    bertindex frames every window the same way; it needs exactly one token before and one
    after (the template of every encoder family it tests).

    Args:
        tokenizer: a fast tokenizer.
        where: the model directory, for the error.
    Returns:
        The Specials.
    Raises:
        ModelError: a template other than one token before and one after the text.
    """
    plain = tokenizer(SENTINEL_TEXT, add_special_tokens=False)["input_ids"]
    framed = tokenizer(SENTINEL_TEXT, add_special_tokens=True)["input_ids"]
    start = next(
        (i for i in range(len(framed) - len(plain) + 1) if framed[i : i + len(plain)] == plain),
        None,
    )
    if start is None or not plain:
        raise ModelError(
            f"{where}: cannot find how the tokenizer frames a text ({plain} -> {framed})"
        )
    prefix, suffix = tuple(framed[:start]), tuple(framed[start + len(plain) :])
    if len(prefix) != 1 or len(suffix) != 1:
        raise ModelError(
            f"{where}: the tokenizer frames one text with {len(prefix)} token(s) "
            f"before and {len(suffix)} after ({framed}); bertindex needs one of "
            "each ([CLS] … [SEP], <s> … </s>)"
        )
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = 0
        log.info("%s: the tokenizer has no pad token; padding with id 0 (masked out)", where)
    side = getattr(tokenizer, "padding_side", "right") or "right"
    return Specials(prefix, suffix, int(pad), side)


def add_prefix_space(tokenizer) -> bool:
    """Make a byte-level BPE tokenizer (RoBERTa, ModernBERT, GPT-2 style) put a space before
    every word, in place, so that pre-split words (`is_split_into_words`) are tokenised as
    they are inside running text (`Ġword`) and raw text the same way from its first word.

    Args:
        tokenizer: a fast tokenizer (its backend `tokenizers.Tokenizer` is replaced).
    Returns:
        True when it changed anything (False: not byte-level, or already so).
    """
    import json

    from tokenizers import Tokenizer

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    changed = False

    def visit(node) -> None:
        nonlocal changed
        if not isinstance(node, dict):
            return
        if node.get("type") == "ByteLevel" and node.get("add_prefix_space") is False:
            node["add_prefix_space"] = True
            changed = True
        for child in node.get("pretokenizers", []) or []:
            visit(child)

    visit(spec.get("pre_tokenizer"))
    if changed:
        tokenizer._tokenizer = Tokenizer.from_str(json.dumps(spec))
        if hasattr(tokenizer, "add_prefix_space"):
            tokenizer.add_prefix_space = True  # saved in tokenizer_config.json too
    return changed
