"""The encoder with a masked-LM head: loaded from any encoder directory, saved back as one.

A directory without MLM weights (the packaged all-MiniLM-L6-v2 ships none) gets a fresh
head (transformers' initialisation, seeded) whose output projection is the input word
embeddings, tied as BERT's is; a directory an earlier `bertindex adapt` wrote carries its head
in `mlm-head.safetensors`, which is loaded back. The result is saved as a normal encoder
directory: the backbone's weights through the family's `AutoModel` (the pooler, which the
MLM model has none of, kept from the base), the tokenizer, the sentence-transformers files
of the base (pooling, normalisation, prompts) copied unchanged, and the head beside them in
`mlm-head.safetensors`, which `AutoModel` ignores.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import torch

from indexer.encode.model_facts import load_transformer
from indexer.errors import ModelError

log = logging.getLogger(__name__)

HEAD_FILE = "mlm-head.safetensors"
HEAD_INFO = "mlm-head.json"
# heads applied to the backbone's hidden states, one module each: scored on the chosen
# positions only (the vocabulary projection over every position is most of a small model's
# step); families with other head layouts run the whole MLM model (same loss, more work)
SPARSE_HEADS = ("cls", "lm_head", "predictions")
ST_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


def load_mlm(base: Path, seed: int):
    """The MLM model of `base` and how its head came to be.

    Returns:
        (model, {"head": "fresh" | "loaded", "tied": bool, "missing": [...]})
    Raises:
        ModelError: the directory cannot be loaded as a masked LM.
    """
    from transformers import AutoModelForMaskedLM

    torch.manual_seed(seed)  # the fresh head's weights
    try:
        model, _ = load_transformer(base, AutoModelForMaskedLM, output_loading_info=True)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load {base} as a masked language model: {exc}") from None
    model, info = model if isinstance(model, tuple) else (model, {})
    missing = sorted(info.get("missing_keys", []))
    prefix = model.base_model_prefix
    backbone_missing = [k for k in missing if k.startswith(prefix + ".") and "pooler" not in k]
    if backbone_missing:
        raise ModelError(
            f"{base}: the encoder's weights {backbone_missing[:3]} are missing; "
            "is it an encoder directory?"
        )
    head_file = Path(base) / HEAD_FILE
    tied = _tie(model)
    if head_file.is_file():
        from safetensors.torch import load_file

        state = load_file(str(head_file))
        result = model.load_state_dict(state, strict=False)
        if result.unexpected_keys:
            raise ModelError(
                f"{head_file}: weights {result.unexpected_keys[:3]} do not fit "
                f"{type(model).__name__}; remove the file to start a fresh head"
            )
        how = "loaded"
    else:
        how = "fresh" if missing else "the model's own"
    return model, {
        "head": how,
        "tied": tied,
        "class": type(model).__name__,
        "missing_at_load": missing,
    }


def _tie(model) -> bool:
    """Tie the output projection to the input word embeddings (BERT's rule) when the config
    left them apart; True when they are tied."""
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    if out is None:
        return False
    if out.weight.data_ptr() != inp.weight.data_ptr() and out.weight.shape == inp.weight.shape:
        out.weight = inp.weight
    return out.weight.data_ptr() == inp.weight.data_ptr()


def head_logits(model):
    """`fn(hidden (N, H)) -> logits (N, V)` for the chosen positions, or None when the
    family's head is not one module over the hidden states (`SPARSE_HEADS`)."""
    for name in SPARSE_HEADS:
        module = getattr(model, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    return None


def mlm_loss(model, batch: dict, head, token_types: bool) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Cross-entropy over the chosen positions.

    Args:
        batch: {"input_ids", "attention_mask", "labels"} (labels -100 where not chosen).
        head: `head_logits(model)`, or None to run the whole MLM model.
        token_types: pass all-zero token type ids (models that take them).
    Returns:
        (mean loss, correct predictions at chosen positions, chosen positions).
    """
    labels = batch["labels"]
    chosen = labels != -100
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    if token_types:
        inputs["token_type_ids"] = torch.zeros_like(batch["input_ids"])
    if head is not None:
        hidden = model.base_model(**inputs).last_hidden_state
        logits = head(hidden[chosen])
        target = labels[chosen]
    else:
        logits = model(**inputs).logits[chosen]
        target = labels[chosen]
    n = int(target.numel())
    if n == 0:
        return logits.sum() * 0.0, torch.tensor(0), 0
    loss = torch.nn.functional.cross_entropy(logits.float(), target)
    correct = (logits.detach().argmax(-1) == target).sum()
    return loss, correct, n


def save_adapted(model, tokenizer, base: Path, out: Path, receipt: dict) -> None:
    """Write `out` as an encoder directory (see the module), the head beside it."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    try:
        encoder, _ = load_transformer(base)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load {base} as an encoder to save into: {exc}") from None
    result = encoder.load_state_dict(model.base_model.state_dict(), strict=False)
    if result.unexpected_keys or [k for k in result.missing_keys if "pooler" not in k]:
        raise ModelError(
            f"the adapted weights do not fit {type(encoder).__name__}: missing "
            f"{result.missing_keys[:3]}, unexpected {result.unexpected_keys[:3]}"
        )
    encoder.save_pretrained(out)
    tokenizer.save_pretrained(out)
    for name in ST_FILES:
        if (base / name).is_file():
            shutil.copy2(base / name, out / name)
    for folder in base.iterdir():  # 1_Pooling, 2_Normalize, ...
        if folder.is_dir() and folder.name[:1].isdigit() and "_" in folder.name:
            shutil.copytree(folder, out / folder.name, dirs_exist_ok=True)
    embeddings = model.get_input_embeddings().weight
    prefix = model.base_model_prefix + "."
    head = {
        k: v.detach().contiguous().clone()
        for k, v in model.state_dict().items()
        if not k.startswith(prefix) and v.data_ptr() != embeddings.data_ptr()
    }
    save_file(head, str(out / HEAD_FILE))
    (out / HEAD_INFO).write_text(
        json.dumps(
            {
                "class": type(model).__name__,
                "tied_to_word_embeddings": _tie(model),
                "note": "the masked-LM head of `bertindex adapt`; AutoModel ignores this file, "
                "`bertindex adapt` loads it back",
                "receipt": "adapt-receipt.json",
            },
            indent=2,
        )
    )
    log.info("saved the adapted encoder to %s", out)
