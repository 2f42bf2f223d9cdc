"""The results heads return, `Label` (a classifier's) and `Entity` (a tagger's), all heads'
results for one text (`Annotation`), and the rows
they become: one Arrow schema per store table (`table_schema`, from which the store derives its
DDL) and the item of `annotate --out` files and search hits. Records only: no SQL, no models.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import ClassVar

import pyarrow as pa


def _required(name: str, type_: pa.DataType) -> pa.Field:
    return pa.field(name, type_, nullable=False)


@dataclass(frozen=True)
class Label:
    """A text's label from a classifier head."""

    label: str
    score: float  # softmax probability of `label`
    head: str | None = None  # the head's name under `annotate` (None from `predict`)
    # second-highest probability (review `margin`); not part of a label's identity
    runner_up: float | None = dataclass_field(default=None, compare=False)

    field: ClassVar[str] = "labels"  # `Annotation` attribute and `annotate --out` column
    table: ClassVar[str] = "annotations"  # store table (schema step 2 in `indexer.store.schema`)
    # the one schema of the table: the store's DDL is derived from it (NOT NULL where
    # nullable=False); `runner_up` came with schema step 4 and is NULL on older rows
    table_schema: ClassVar[pa.Schema] = pa.schema(
        [
            _required("doc_id", pa.int64()),
            _required("head", pa.string()),
            _required("head_version", pa.string()),
            _required("label", pa.string()),
            _required("probability", pa.float64()),
            pa.field("runner_up", pa.float64()),
        ]
    )
    out_struct: ClassVar[pa.DataType] = pa.struct(
        [
            ("head", pa.string()),
            ("head_version", pa.string()),
            ("label", pa.string()),
            ("probability", pa.float64()),
        ]
    )

    def table_row(self, doc_id: int, version: str) -> dict:
        """One row of `table`, columns in `table_schema` order."""
        return {
            "doc_id": doc_id,
            "head": self.head,
            "head_version": version,
            "label": self.label,
            "probability": self.score,
            "runner_up": self.runner_up,
        }

    def out_row(self, version: str) -> dict:
        """The JSON-ready item of `annotate --out` files and search results (`out_struct`)."""
        return {
            "head": self.head,
            "head_version": version,
            "label": self.label,
            "probability": round(self.score, 6),
        }


@dataclass(frozen=True)
class Entity:
    """An entity span from a tagger head."""

    type: str
    start: int  # character offsets into the text, end exclusive
    end: int
    text: str
    score: float  # mean probability of the words' tags
    head: str | None = None  # the head's name under `annotate` (None from `predict`)

    field: ClassVar[str] = "entities"
    table: ClassVar[str] = "entities"
    table_schema: ClassVar[pa.Schema] = pa.schema(
        [
            _required("doc_id", pa.int64()),
            _required("head", pa.string()),
            _required("head_version", pa.string()),
            _required("start_char", pa.int32()),
            _required("end_char", pa.int32()),
            _required("type", pa.string()),
            _required("text", pa.string()),
            _required("score", pa.float64()),
        ]
    )
    out_struct: ClassVar[pa.DataType] = pa.struct(
        [
            ("head", pa.string()),
            ("type", pa.string()),
            ("start", pa.int32()),
            ("end", pa.int32()),
            ("text", pa.string()),
            ("score", pa.float64()),
        ]
    )

    def table_row(self, doc_id: int, version: str) -> dict:
        return {
            "doc_id": doc_id,
            "head": self.head,
            "head_version": version,
            "start_char": self.start,
            "end_char": self.end,
            "type": self.type,
            "text": self.text,
            "score": self.score,
        }

    def out_row(self, version: str) -> dict:
        return {
            "head": self.head,
            "type": self.type,
            "start": self.start,
            "end": self.end,
            "text": self.text,
            "score": round(self.score, 6),
        }


Result = Label | Entity
RESULT_TYPES: tuple[type[Label | Entity], ...] = (Label, Entity)  # the store's two tables


@dataclass
class Annotation:
    """All heads' output for one text, one list per result type (`Result.field`)."""

    labels: list[Label] = dataclass_field(default_factory=list)
    entities: list[Entity] = dataclass_field(default_factory=list)

    def add(self, results: list[Result]) -> None:
        for result in results:
            getattr(self, result.field).append(result)

    def results(self) -> dict[type[Result], list[Result]]:
        """{result type: this text's results of it}, for every result type."""
        return {rt: getattr(self, rt.field) for rt in RESULT_TYPES}
