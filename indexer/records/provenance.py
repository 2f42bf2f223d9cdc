"""What produced a vector (`Provenance`) and the model facts it is made of: the weights' hash,
a readable model name, the hidden width; and what produced a store's tuned hybrid weight
(`FusionTuning`). Imports neither torch nor transformers, so a process
that only searches (the ONNX query path) can check provenance without them.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from indexer.core.fsio import feed_file
from indexer.errors import ModelError

# Keys that must agree between stored vectors and a new encoder before adding vectors.
WRITE_KEYS = (
    "model_name",
    "weights_hash",
    "pooling",
    "normalize",
    "max_length",
    "dim",
    "document_prompt",
)
# Keys that must agree between stored vectors and the query encoder.
QUERY_KEYS = ("weights_hash", "pooling", "normalize", "dim")
# Keys an ONNX export and the store's vectors must agree on (QUERY_KEYS less `normalize`,
# which the query side applies from the configuration).
EXPORT_KEYS = ("weights_hash", "pooling", "dim")


@dataclass(frozen=True)
class Provenance:
    """What produced a vector. Stored with vectors and with every index, checked on use.

    `query_prompt` / `document_prompt`: the text put before each query / document before it
    is tokenised ("" = none); older stores that predate them read as "". `attention`: the
    attention implementation that made them (`indexer.encode.model_facts.attention_for`); a
    record only, never checked (sdpa and eager agree within float rounding).
    """

    model_name: str
    weights_hash: str
    pooling: str
    normalize: bool
    max_length: int
    dim: int
    dtype: str
    document_prompt: str = ""
    query_prompt: str = ""
    attention: str = ""  # sdpa or eager (torch), onnx (the export); "" in older stores

    def to_dict(self) -> dict:
        return asdict(self)

    def mismatches(self, other: Provenance, keys: Iterable[str]) -> list[str]:
        """Keys whose values differ, as `key: self != other` strings."""
        return [
            f"{k}: {getattr(self, k)!r} != {getattr(other, k)!r}"
            for k in keys
            if getattr(self, k) != getattr(other, k)
        ]


@dataclass(frozen=True)
class FusionTuning:
    """The hybrid dense weight an index run tuned on pseudo-queries drawn from the store
    (`indexer.indexing.fusion_tune`), and what it was tuned on. Written by the index run into
    the store's meta table, read by every search with `search.dense_weight: auto`.

    `documents`: the store's document count when tuned (a later run re-tunes once it moves
    by a tenth); `weights_hash`: the encoder's (another encoder's vectors re-tune);
    `curve`: mean nDCG@10 on the pseudo-queries by weight; `dense_ndcg` / `keyword_ndcg`:
    each side alone on them.
    """

    dense_weight: float
    queries: int
    documents: int
    sample_documents: int
    weights_hash: str
    dense_ndcg: float
    keyword_ndcg: float
    curve: dict[str, float]
    seed: int
    tuned_at: str
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


def weight_files(model_dir: Path) -> list[Path]:
    """The weight files a hash covers: every *.safetensors, else every *.bin."""
    return sorted(model_dir.glob("*.safetensors")) or sorted(model_dir.glob("*.bin"))


def weight_stats(model_dir: Path) -> list[list]:
    """[name, size, mtime_ns] of each weight file: a cheap check that the files a recorded
    hash was computed from are still the same."""
    out = []
    for path in weight_files(model_dir):
        st = path.stat()
        out.append([path.name, st.st_size, st.st_mtime_ns])
    return out


@functools.lru_cache(maxsize=8)
def weights_hash(model_dir: Path) -> str:
    """sha256 of the weight files (safetensors or bin), first 16 hex digits."""
    files = weight_files(model_dir)
    if not files:
        raise ModelError(f"{model_dir}: no *.safetensors or *.bin weight file found")
    digest = hashlib.sha256()
    for path in files:
        feed_file(digest, path)
    return digest.hexdigest()[:16]


def model_display_name(model_dir: Path, configured: str) -> str:
    """A readable model name: the configured one, or the HF `_name_or_path` when it is a path."""
    if not Path(configured).is_dir():
        return configured
    try:
        name = json.loads((model_dir / "config.json").read_text()).get("_name_or_path")
    except (OSError, ValueError):
        name = None
    return name or model_dir.name
