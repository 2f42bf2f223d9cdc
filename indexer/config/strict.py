"""The base of every config section: unknown keys are refused, values are frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A config section: `extra=\"forbid\"` (a typo is an error naming the key), frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
