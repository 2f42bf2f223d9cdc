"""What produced a vector (model, weights hash, pooling, normalisation, max length, width,
dtype): stored with vectors and with every index, checked on use. Imports no torch, so the
store and the commands that do not encode stay light."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Provenance:
    """What produced a vector. Stored with vectors and with every index, checked on use."""

    model_name: str
    weights_hash: str
    pooling: str
    normalize: bool
    max_length: int
    dim: int
    dtype: str

    def to_dict(self) -> dict:
        return asdict(self)

    def mismatches(self, other: Provenance, keys: Iterable[str]) -> list[str]:
        """Keys whose values differ, as `key: self != other` strings."""
        return [
            f"{k}: {getattr(self, k)!r} != {getattr(other, k)!r}"
            for k in keys
            if getattr(self, k) != getattr(other, k)
        ]
