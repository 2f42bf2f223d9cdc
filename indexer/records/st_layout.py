"""A sentence-transformers model directory's own settings, read as `model.*` defaults.

sentence-transformers saves, beside the HF weights: `modules.json` (the module chain:
Transformer, Pooling, Normalize, …), `1_Pooling/config.json` (which pooling),
`sentence_bert_config.json` (`max_seq_length`; newer versions: the tokenizer's
`model_max_length`) and `config_sentence_transformers.json`
(`prompts`, `default_prompt_name`, `similarity_fn_name`). A plain HF directory has none of
them and gets bertindex's own defaults. Keys given in config.yaml win over these
(`indexer.config.ModelConfig`). Imports neither torch nor sentence-transformers, nor the
config (which imports this module).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import get_args

from indexer.core.choices import PoolingMode

MODULES_FILE = "modules.json"
ST_CONFIG_FILE = "sentence_bert_config.json"
ST_MODEL_FILE = "config_sentence_transformers.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
MAX_POSITIONS = 512

# 1_Pooling/config.json flags -> the mode's name; bertindex runs those that are its own modes
POOLING_FLAGS = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
SUPPORTED_POOLING = tuple(m for m in get_args(PoolingMode) if m in POOLING_FLAGS.values())
SUPPORTED_MODULES = ("Transformer", "Pooling", "Normalize")
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus", "doc")


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} is not readable JSON ({exc}); repair or remove it") from None


def model_defaults(model_dir: Path, keys: Collection[str] = ("pooling",)) -> dict:
    """The `model.*` settings a sentence-transformers directory declares.

    Args:
        model_dir: a local model directory.
        keys: the settings wanted (a pooling mode bertindex cannot run is an error only
            when `pooling` is one of them: config.yaml may set its own).
    Returns:
        A subset of {"pooling", "normalize", "max_length", "query_prompt",
        "document_prompt"}, plus "include_prompt": False when the pooling leaves prompt
        tokens out; {} for a directory without `modules.json` (plain HF).
    Raises:
        ValueError: a module or pooling mode bertindex cannot run, or an unreadable file;
            the message names the file and how to override.
    """
    modules_file = model_dir / MODULES_FILE
    if not modules_file.is_file():
        return {}
    modules = _read(modules_file)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        # ValueError: what pydantic reports as a config error
        raise ValueError(f"{modules_file} must be a list of modules")
    kinds = {str(m.get("type", "")).rsplit(".", 1)[-1]: m for m in modules}
    other = [k for k in kinds if k not in SUPPORTED_MODULES]
    if other:
        raise ValueError(
            f"{modules_file} chains module(s) {', '.join(other)} that bertindex "
            f"does not run (only {', '.join(SUPPORTED_MODULES)}): its vectors "
            "would not be the model's; use a model without them"
        )
    transformer = kinds.get("Transformer")
    if transformer is not None and transformer.get("path", "") not in ("", "."):
        sub = model_dir / transformer["path"]
        raise ValueError(
            f"{modules_file}: the transformer is in {sub}; set model.name to that folder"
        )
    out: dict = {}
    config = _read(model_dir / ST_MODEL_FILE) if (model_dir / ST_MODEL_FILE).is_file() else {}
    similarity = config.get("similarity_fn_name")  # sentence-transformers' default: cosine
    out["normalize"] = "Normalize" in kinds or similarity in (None, "cosine")
    include_prompt = True
    pooling = kinds.get("Pooling")
    if pooling is not None:
        pool_file = model_dir / pooling.get("path", "1_Pooling") / "config.json"
        pool_config = _read(pool_file) if pool_file.is_file() else {}
        if "pooling" in keys:
            out["pooling"] = _pooling_mode(pool_file, pool_config)
        include_prompt = pool_config.get("include_prompt", True)
    length = _max_length(model_dir)
    if length is not None:
        out["max_length"] = length
    prompts = config.get("prompts") or {}
    default = prompts.get(config.get("default_prompt_name") or "", "")
    out["query_prompt"] = prompts.get("query", default)
    out["document_prompt"] = next(
        (prompts[n] for n in DOCUMENT_PROMPT_NAMES if n in prompts), default
    )
    if not include_prompt:  # checked against the prompts in use (ModelConfig)
        out["include_prompt"] = False
    return out


def _pooling_mode(pool_file: Path, pool_config: dict) -> str:
    """The one pooling mode a `Pooling` module's config asks for, if bertindex runs it."""
    modes = [name for flag, name in POOLING_FLAGS.items() if pool_config.get(flag)]
    if pool_config.get("pooling_mode"):  # newer files name it directly
        modes = [
            str(pool_config["pooling_mode"])
            .replace("mean_tokens", "mean")
            .replace("cls_token", "cls")
        ]
    if len(modes) != 1 or modes[0] not in SUPPORTED_POOLING:
        raise ValueError(
            f"{pool_file} asks for {' + '.join(modes) or 'no'} pooling; "
            f"bertindex pools with one of {', '.join(SUPPORTED_POOLING)}: "
            "set model.pooling in config.yaml to override"
        )
    return modes[0]


def _max_length(model_dir: Path) -> int | None:
    """The directory's declared max sequence length, capped at the learned positions.

    sentence-transformers < 5 writes max_seq_length in its config; later versions leave it to
    the tokenizer's model_max_length (HF writes 1e30 there for "none")."""
    length = None
    if (model_dir / ST_CONFIG_FILE).is_file():
        length = _read(model_dir / ST_CONFIG_FILE).get("max_seq_length")
    if length is None and (model_dir / TOKENIZER_CONFIG_FILE).is_file():
        length = _read(model_dir / TOKENIZER_CONFIG_FILE).get("model_max_length")
    if isinstance(length, int) and 8 <= length <= 1_000_000:
        return min(length, MAX_POSITIONS)
    return None
